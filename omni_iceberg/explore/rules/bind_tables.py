"""Rule: every table reference names a logical table; each gets its family state at one version."""

from __future__ import annotations

import difflib

from sqlglot import exp

from catalog_ext.contract import DEFAULT_NAMESPACE, PHYSICAL_SEPARATOR, SYSTEM_NAMESPACE
from omni_iceberg.explore.guard import QueryError, at
from omni_iceberg.explore.rules.context import BoundTable, QueryContext


def bind_tables(ctx: QueryContext) -> QueryContext:
    """Bind ``FROM name`` / ``FROM namespace.name`` (never a physical table, a catalog or a file).

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> ctx = bind_tables(example_context("SELECT 1 FROM web AS w", until="bind_tables"))
    >>> {alias: t.identifier for alias, t in ctx.tables.items()}
    {'w': 'aidata.web'}
    >>> bind_tables(example_context("SELECT 1 FROM webb", until="bind_tables"))
    Traceback (most recent call last):
    ...
    omni_iceberg.explore.guard.QueryError: unknown logical table 'aidata.webb' at line 1, column 15; did you mean 'aidata.web'?
    """
    ctes = {c.alias_or_name for c in ctx.tree.find_all(exp.CTE)}
    for node in list(ctx.tree.find_all(exp.Table)):
        if isinstance(node.this, exp.Unnest):
            continue
        if not node.db and node.name in ctes:
            continue
        where = at(node)
        if node.catalog:
            raise QueryError(f"{node.sql()}{where}: name logical tables as NAME or NAMESPACE.NAME, without a catalog")
        if PHYSICAL_SEPARATOR in node.name:
            raise QueryError(f"{node.sql()}{where} is a physical table; query the logical table "
                             f"{node.name.split(PHYSICAL_SEPARATOR)[0]!r} instead")
        ns = node.db or DEFAULT_NAMESPACE
        if ns.lower() == SYSTEM_NAMESPACE:
            raise QueryError(f"{node.sql()}{where} is a system table, outside the logical namespace "
                             f"(use 'omni errors', 'omni lineage' or Spark/Trino to read it)")
        ident = f"{ns}.{node.name}"
        known = ctx.known_tables()
        if ident not in known:
            near = difflib.get_close_matches(ident, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (known: {', '.join(known) or 'none'})"
            raise QueryError(f"unknown logical table {ident!r}{where}{hint}")
        alias = node.alias_or_name
        if alias in ctx.tables:
            raise QueryError(f"table alias {alias!r} is used twice{where}; give each reference an alias")
        ctx.tables[alias] = BoundTable(alias, ident, ctx.load_state(ns, node.name, ctx.as_of), node)
    if not ctx.tables:
        raise QueryError("the query reads no logical table")
    return ctx
