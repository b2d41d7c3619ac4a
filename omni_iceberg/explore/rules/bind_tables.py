"""Rule: every table reference names a logical table; each gets its family state at one version."""

from __future__ import annotations

import re

from sqlglot import exp

from catalog_ext.contract import DEFAULT_NAMESPACE, PHYSICAL_SEPARATOR, SYSTEM_NAMESPACE
from catalog_ext.errors import NoSuchLogicalTableError
from catalog_ext.suggest import closest, did_you_mean
from omni_iceberg.explore.rules.context import BoundTable, QueryContext, SystemTable
from omni_iceberg.read.guard import QueryError, at
from omni_iceberg.read.scope import scopes

#: clauses after a table name the physical query keeps (on the subquery that replaces
#: the table); the time-travel ones are read here. Any other clause is refused: the
#: table is replaced by a subquery, and a clause left behind would be silently dropped.
_KEPT_CLAUSES = {"this", "db", "catalog", "alias", "sample", "pivots"}
_VERSION_CLAUSES = {"version", "when"}
_PINNED_VIEW = re.compile(r"^(?P<table>.+?)__(?:v(?P<version>[0-9]+)|tag_(?P<tag>[a-z0-9_]+))$")


def bind_tables(ctx: QueryContext) -> QueryContext:
    """Bind ``FROM name`` / ``FROM namespace.name`` (never a physical table, a catalog or a file).

    Which names are tables and which are CTEs follows SQL scope
    (:mod:`omni_iceberg.read.scope`): a CTE hides a table only inside its WITH's query.
    ``VERSION AS OF N`` / ``AT (VERSION => N)`` after a table reads it at logical
    version N, as ``--as-of N`` does for the whole query; other time-travel clauses
    are refused.

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
    omni_iceberg.read.guard.QueryError: unknown logical table 'aidata.webb' at line 1, column 15; did you mean 'aidata.web'?
    >>> bind_tables(example_context("SELECT 1 FROM (WITH web AS (SELECT 1) SELECT * FROM web) AS a, web",
    ...                             until="bind_tables")).tables["web"].node.sql()
    'web'
    """
    ctx.scopes = scopes(ctx.tree)
    for node in ctx.tree.find_all(exp.Table):
        if ctx.scopes.names_cte(node):
            _refuse_clauses(node, f"the CTE {node.name!r}", _KEPT_CLAUSES)
    for node in ctx.scopes.tables:
        where = at(node)
        if node.catalog:
            raise QueryError(f"{node.sql()}{where}: name logical tables as NAME or NAMESPACE.NAME, without a catalog")
        if PHYSICAL_SEPARATOR in node.name:
            raise QueryError(_not_logical(node, where))
        ns = node.db or DEFAULT_NAMESPACE
        alias = node.alias_or_name
        if alias in ctx.tables or alias in ctx.system:
            raise QueryError(f"table alias {alias!r} is used twice{where}; give each reference an alias")
        version = _version_clause(ctx, node, where)
        _refuse_clauses(node, f"the table {node.name!r}", _KEPT_CLAUSES | _VERSION_CLAUSES)
        if ns.lower() == SYSTEM_NAMESPACE:
            if version is not None:
                raise QueryError(f"{node.sql()}{where}: system tables are logs read at their current snapshot; "
                                 f"they have no logical versions")
            _bind_system(ctx, node, alias, where)
            continue
        ident = f"{ns}.{node.name}"
        try:
            state = ctx.load_state(ns, node.name, ctx.as_of if version is None else version)
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


def _not_logical(node: exp.Table, where: str) -> str:
    """Why a name with the physical separator cannot be read, and what to read instead."""
    pinned = _PINNED_VIEW.match(node.name)
    ns = f"{node.db}." if node.db else ""
    if pinned and pinned["version"]:
        return (f"{node.sql()}{where} is the pinned view of version {pinned['version']} of {ns}{pinned['table']} "
                f"(made by omni pin, for Spark and Trino); in omni sql read {ns}{pinned['table']} with "
                f"--as-of {pinned['version']} (or FROM {ns}{pinned['table']} VERSION AS OF {pinned['version']})")
    if pinned and pinned["tag"]:
        return (f"{node.sql()}{where} is the pinned view of a tag of {ns}{pinned['table']} (made by omni tag, for "
                f"Spark and Trino); in omni sql read {ns}{pinned['table']} with --as-of TAG")
    return (f"{node.sql()}{where} is a physical table; query the logical table "
            f"{node.name.split(PHYSICAL_SEPARATOR)[0]!r} instead")


def _version_clause(ctx: QueryContext, node: exp.Table, where: str) -> int | None:
    """The logical version a ``VERSION AS OF N`` / ``AT (VERSION => N)`` clause asks for (None: none given).

    Time travel by timestamp, ``BEFORE``, ``CHANGES`` and version ranges are refused:
    the logical version is what pins every physical snapshot of the family.
    """
    clause = node.args.get("version") or node.args.get("when")
    if clause is None:
        return None
    text = clause.sql("duckdb")
    kind = str(clause.this).upper()
    by_version = (isinstance(clause, exp.Version) and kind == "VERSION" and
                  str(clause.args.get("kind", "")).upper() == "AS OF") or \
        (isinstance(clause, exp.HistoricalData) and kind == "AT" and str(clause.args.get("kind", "")).upper() == "VERSION")
    value = clause.args.get("expression")
    number = value.this if isinstance(value, exp.Literal) and value.this.isdigit() else None
    if not by_version or number is None:
        raise QueryError(f"{text!r} after {node.name!r}{where} is not supported: omni sql reads logical versions by "
                         f"number - use --as-of N (or VERSION AS OF N); omni log {node.name} lists the versions "
                         f"and when they were made")
    version = int(number)
    if ctx.as_of is not None and version != ctx.as_of:
        raise QueryError(f"{text!r} after {node.name!r}{where} asks for version {version} but --as-of asks for "
                         f"{ctx.as_of}; give the version once")
    return version


def _refuse_clauses(node: exp.Table, what: str, kept: set[str]) -> None:
    """A clause after a table name that the physical query would not keep is an error, never dropped."""
    for key, value in node.args.items():
        if key in kept or value in (None, [], False):
            continue
        clause = value.sql("duckdb") if isinstance(value, exp.Expression) else \
            " ".join(v.sql("duckdb") for v in value) if isinstance(value, list) else str(value)
        raise QueryError(f"{clause!r} after {what}{at(node)} is not supported in omni sql")
