"""Rule: every table reference names a logical table; each gets its family state at one version."""

from __future__ import annotations

from sqlglot import exp

from catalog_ext.contract import DEFAULT_NAMESPACE, PHYSICAL_SEPARATOR, SYSTEM_NAMESPACE
from catalog_ext.errors import NoSuchLogicalTableError
from catalog_ext.suggest import closest, did_you_mean
from omni_iceberg.explore.guard import QueryError, at
from omni_iceberg.explore.rules.context import BoundTable, QueryContext, SystemTable
from omni_iceberg.explore.scope import scopes


def bind_tables(ctx: QueryContext) -> QueryContext:
    """Bind ``FROM name`` / ``FROM namespace.name`` (never a physical table, a catalog or a file).

    Which names are tables and which are CTEs follows SQL scope
    (:mod:`omni_iceberg.explore.scope`): a CTE hides a table only inside its WITH's query.

    ``omni_sys.<name>`` binds to a system table (query log, runs, errors, lineage, ...):
    read-only like everything here, at its current snapshot (system tables are logs,
    not versioned with the logical tables, so ``--as-of`` does not apply to them).

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> ctx = bind_tables(example_context("SELECT 1 FROM web AS w", until="bind_tables"))
    >>> {alias: t.identifier for alias, t in ctx.tables.items()}
    {'w': 'aidata.web'}
    >>> sorted(bind_tables(example_context("SELECT * FROM omni_sys.query_log AS q", until="bind_tables")).system)
    ['q']
    >>> bind_tables(example_context("SELECT 1 FROM webb", until="bind_tables"))
    Traceback (most recent call last):
    ...
    omni_iceberg.explore.guard.QueryError: unknown logical table 'aidata.webb' at line 1, column 15; did you mean 'aidata.web'?
    >>> bind_tables(example_context("SELECT 1 FROM (WITH web AS (SELECT 1) SELECT * FROM web) AS a, web",
    ...                             until="bind_tables")).tables["web"].node.sql()
    'web'
    """
    ctx.scopes = scopes(ctx.tree)
    for node in ctx.scopes.tables:
        where = at(node)
        if node.catalog:
            raise QueryError(f"{node.sql()}{where}: name logical tables as NAME or NAMESPACE.NAME, without a catalog")
        if PHYSICAL_SEPARATOR in node.name:
            raise QueryError(f"{node.sql()}{where} is a physical table; query the logical table "
                             f"{node.name.split(PHYSICAL_SEPARATOR)[0]!r} instead")
        ns = node.db or DEFAULT_NAMESPACE
        alias = node.alias_or_name
        if alias in ctx.tables or alias in ctx.system:
            raise QueryError(f"table alias {alias!r} is used twice{where}; give each reference an alias")
        if ns.lower() == SYSTEM_NAMESPACE:
            _bind_system(ctx, node, alias, where)
            continue
        ident = f"{ns}.{node.name}"
        try:
            state = ctx.load_state(ns, node.name, ctx.as_of)
        except NoSuchLogicalTableError:
            known = ctx.known_tables()  # listing every table is slow: only for the message
            hint = did_you_mean(ident, known) or f" (known: {', '.join(known) or 'none'})"
            raise QueryError(f"unknown logical table {ident!r}{where}{hint}") from None
        ctx.tables[alias] = BoundTable(alias, ident, state, node)
    if not ctx.tables and not ctx.system:
        raise QueryError("the query reads no logical table")
    return ctx


def _bind_system(ctx: QueryContext, node: exp.Table, alias: str, where: str) -> None:
    from catalog_ext.system_tables import SCHEMAS

    if node.name not in SCHEMAS:
        near = closest(node.name, SCHEMAS)
        hint = f"did you mean {SYSTEM_NAMESPACE}.{near}?" if near else \
            f"system tables: {', '.join(f'{SYSTEM_NAMESPACE}.{n}' for n in sorted(SCHEMAS))}"
        raise QueryError(f"unknown system table {SYSTEM_NAMESPACE}.{node.name}{where}; {hint}")
    ctx.system[alias] = SystemTable(alias, f"{SYSTEM_NAMESPACE}.{node.name}", node.name,
                                    [f.name for f in SCHEMAS[node.name]], node)

