"""The logical SQL planner's rules: small steps, each ``context in, context out``.

    parse_read_only -> bind_tables -> resolve_columns -> check_types
        -> prune_columns -> prune_batches -> push_predicates

Each rule reads and annotates a :class:`QueryContext`; the physical rewrite
(:mod:`omni_iceberg.explore.rewrite`) then replaces every logical table by a subquery
over only the physical tables, columns and batches the query needs. Errors name the
place in the query (line and column) and, for unknown names, the nearest known one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, PHYSICAL_SEPARATOR, STAGES, SYSTEM_NAMESPACE
from catalog_ext.family import FamilyState
from catalog_ext.errors import OmniError

READ_DIALECT = "duckdb"
_NUMERIC = {"long", "int", "double", "float"}
_FORBIDDEN = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Command, exp.Merge,
              exp.TruncateTable, exp.Set, exp.Use)


class QueryError(OmniError):
    """The query cannot be planned: syntax, not read-only, unknown or ambiguous name, types."""

    exit_code = 2


def _where(node: exp.Expression | None) -> str:
    meta = getattr(node, "meta", None) or {}
    if not meta and node is not None and isinstance(node, exp.Column):
        meta = node.this.meta
    if "line" in meta:
        # sqlglot reports where a token ends; users look for where it starts
        col = meta["col"] - (meta["end"] - meta["start"]) if "start" in meta else meta["col"]
        return f"line {meta['line']}, column {col}"
    return "in the query"


@dataclass
class BoundTable:
    alias: str
    identifier: str  # logical table, namespace.name
    state: FamilyState
    node: exp.Table


@dataclass
class QueryContext:
    sql: str
    as_of: int | None = None
    tree: exp.Expression | None = None
    tables: dict[str, BoundTable] = field(default_factory=dict)  # alias -> table
    resolved: dict[int, tuple[str, str]] = field(default_factory=dict)  # id(Column) -> (alias, logical path)
    star: set[str] = field(default_factory=set)  # aliases whose every column is needed
    columns: dict[str, list[str]] = field(default_factory=dict)  # alias -> logical paths read
    batches: dict[str, list[str] | None] = field(default_factory=dict)  # alias -> batches (None: all)
    pushed: dict[str, list[exp.Expression]] = field(default_factory=dict)  # alias -> conjuncts pushed to scans
    filter_columns: dict[str, list[str]] = field(default_factory=dict)  # alias -> paths used in WHERE


def parse_read_only(ctx: QueryContext) -> QueryContext:
    """Exactly one query; no DDL/DML anywhere; syntax errors with their position."""
    try:
        statements = [s for s in sqlglot.parse(ctx.sql, read=READ_DIALECT) if s is not None]
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        raise QueryError(f"syntax error at line {err.get('line')}, column {err.get('col')}: "
                         f"{err.get('description', e)} (near {err.get('highlight', '')!r})") from e
    if len(statements) != 1:
        raise QueryError(f"expected exactly one statement, got {len(statements)}: omni sql runs one query")
    tree = statements[0]
    bad = tree if isinstance(tree, _FORBIDDEN) else next(iter(tree.find_all(*_FORBIDDEN)), None)
    if bad is not None or not isinstance(tree, exp.Query):
        kind = (bad or tree).key.upper()
        raise QueryError(f"only queries are allowed, not {kind}: omni sql is read-only")
    ctx.tree = tree
    return ctx


def bind_tables(ctx: QueryContext, load_state: Callable[[str, str, int | None], FamilyState],
                known_tables: Callable[[], list[str]]) -> QueryContext:
    """Every table reference must be a logical table (never a physical or system table)."""
    from catalog_ext.contract import DEFAULT_NAMESPACE

    ctes = {c.alias_or_name for c in ctx.tree.find_all(exp.CTE)}
    for node in list(ctx.tree.find_all(exp.Table)):
        if not node.db and node.name in ctes:
            continue
        where = _where(node.this)
        if node.catalog:
            raise QueryError(f"{node.sql()} at {where}: name logical tables as NAME or NAMESPACE.NAME, "
                             f"without a catalog")
        if PHYSICAL_SEPARATOR in node.name:
            raise QueryError(f"{node.sql()} at {where} is a physical table; query the logical table "
                             f"{node.name.split(PHYSICAL_SEPARATOR)[0]!r} instead")
        ns = node.db or DEFAULT_NAMESPACE
        if ns == SYSTEM_NAMESPACE:
            raise QueryError(f"{node.sql()} at {where} is a system table, outside the logical namespace "
                             f"(use 'omni errors', 'omni lineage' or Spark/Trino to read it)")
        ident = f"{ns}.{node.name}"
        known = known_tables()
        if ident not in known:
            near = difflib.get_close_matches(ident, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (known: {', '.join(known) or 'none'})"
            raise QueryError(f"unknown logical table {ident!r} at {where}{hint}")
        alias = node.alias_or_name
        if alias in ctx.tables:
            raise QueryError(f"table alias {alias!r} is used twice at {where}; give each reference an alias")
        ctx.tables[alias] = BoundTable(alias, ident, load_state(ns, node.name, ctx.as_of), node)
    if not ctx.tables:
        raise QueryError("the query reads no logical table")
    return ctx


def _top_level(state: FamilyState) -> list[str]:
    return state.top_level_columns() + [c.path for c in state.columns if c.kind == "feature"
                                        and c.path not in state.top_level_columns()]


def _candidates(ctx: QueryContext) -> list[str]:
    names: set[str] = set()
    for t in ctx.tables.values():
        names.update(_top_level(t.state))
        names.update(c.path for c in t.state.columns)
    return sorted(names)


def _resolve_path(state: FamilyState, parts: list[str]) -> str | None:
    """``['RawData', 'url']`` -> ``RawData.url``; ``['t_len']`` -> ``t_len``; else None."""
    head = parts[0]
    if head in (ID_COLUMN, BATCH_COLUMN) and len(parts) == 1:
        return head
    if head in STAGES:
        if len(parts) == 1:
            return head if state.stage_fields(head) else None
        path = f"{head}.{parts[1]}"
        return path if state.has_column(path) and len(parts) == 2 else None
    if len(parts) == 1 and state.has_column(head) and state.column(head).kind == "feature":
        return head
    return None


def resolve_columns(ctx: QueryContext) -> QueryContext:
    """Bind every column reference to (table alias, logical path); unknown/ambiguous -> error."""
    select_aliases = {a.alias for a in ctx.tree.find_all(exp.Alias)}
    cte_names = {c.alias_or_name for c in ctx.tree.find_all(exp.CTE)}
    for star in ctx.tree.find_all(exp.Star):
        parent = star.parent
        if isinstance(parent, exp.Column) and parent.table:
            ctx.star.add(parent.table)
        elif not isinstance(parent, exp.Count):
            ctx.star.update(ctx.tables)
    for col in ctx.tree.find_all(exp.Column):
        if isinstance(col.this, exp.Star):
            continue
        parts = [p.name for p in col.parts]
        if len(parts) == 1 and parts[0] in select_aliases:
            continue  # ORDER BY / HAVING on an output alias
        if parts[0] in cte_names:
            continue
        matches: list[tuple[str, str]] = []
        if parts[0] in ctx.tables and len(parts) > 1:
            path = _resolve_path(ctx.tables[parts[0]].state, parts[1:])
            if path is not None:
                matches = [(parts[0], path)]
        else:
            for alias, t in ctx.tables.items():
                path = _resolve_path(t.state, parts)
                if path is not None:
                    matches.append((alias, path))
        name = ".".join(parts)
        if not matches:
            near = difflib.get_close_matches(parts[-1] if parts[0] in ctx.tables else name, _candidates(ctx), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise QueryError(f"unknown column {name!r} at {_where(col)}{hint}")
        if len(matches) > 1:
            tables = ", ".join(f"{a} ({ctx.tables[a].identifier})" for a, _ in matches)
            raise QueryError(f"ambiguous column {name!r} at {_where(col)}: it exists in {tables}; qualify it")
        ctx.resolved[id(col)] = matches[0]
    return ctx


def _column_type(ctx: QueryContext, col: exp.Column) -> str | None:
    hit = ctx.resolved.get(id(col))
    if hit is None:
        return None
    alias, path = hit
    state = ctx.tables[alias].state
    return state.column(path).type if state.has_column(path) else None


def check_types(ctx: QueryContext) -> QueryContext:
    """A column compared with a literal of another kind (number vs text) is an error, with its place."""
    for cmp in ctx.tree.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE):
        left, right = cmp.left, cmp.right
        for col, lit in ((left, right), (right, left)):
            if not isinstance(col, exp.Column) or not isinstance(lit, exp.Literal):
                continue
            typ = _column_type(ctx, col)
            if typ in _NUMERIC and lit.is_string:
                try:
                    float(lit.this)
                except ValueError:
                    raise QueryError(f"type error at {_where(lit)}: {col.sql()} is {typ}, compared with text "
                                     f"{lit.sql()}") from None
            if typ == "string" and not lit.is_string:
                raise QueryError(f"type error at {_where(lit)}: {col.sql()} is string, compared with number "
                                 f"{lit.sql()}; quote the value")
            if typ == "boolean" and lit.is_string:
                raise QueryError(f"type error at {_where(lit)}: {col.sql()} is boolean, compared with {lit.sql()}")
    return ctx


def prune_columns(ctx: QueryContext) -> QueryContext:
    """Per table: only the logical columns the query mentions (all of them for ``*``)."""
    for alias, t in ctx.tables.items():
        if alias in ctx.star:
            ctx.columns[alias] = _top_level(t.state)
            continue
        paths = [path for (a, path) in ctx.resolved.values() if a == alias]
        ctx.columns[alias] = list(dict.fromkeys([ID_COLUMN, BATCH_COLUMN] + paths))
    return ctx


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]


def _top_where(ctx: QueryContext) -> list[exp.Expression]:
    select = ctx.tree if isinstance(ctx.tree, exp.Select) else None
    where = select.args.get("where") if select is not None else None
    return _conjuncts(where.this) if where is not None else []


def prune_batches(ctx: QueryContext) -> QueryContext:
    """``_ai_append_name_ = 'x'`` / ``IN (...)`` in the top-level WHERE limits the batches scanned."""
    ctx.batches = {alias: None for alias in ctx.tables}
    for cond in _top_where(ctx):
        col, values = None, None
        if isinstance(cond, exp.EQ) and isinstance(cond.left, exp.Column) and isinstance(cond.right, exp.Literal):
            col, values = cond.left, [cond.right]
        elif isinstance(cond, exp.In) and isinstance(cond.this, exp.Column) and cond.expressions:
            col, values = cond.this, cond.expressions
        if col is None or not all(isinstance(v, exp.Literal) and v.is_string for v in values):
            continue
        hit = ctx.resolved.get(id(col))
        if hit is None or hit[1] != BATCH_COLUMN:
            continue
        names = [v.this for v in values]
        current = ctx.batches[hit[0]]
        ctx.batches[hit[0]] = names if current is None else [n for n in current if n in names]
    return ctx


def push_predicates(ctx: QueryContext) -> QueryContext:
    """Top-level conjuncts on one table's columns compared with literals go into its scans.

    They stay in the query too: pushing is only an optimisation (fewer files and rows read).
    """
    ctx.pushed = {alias: [] for alias in ctx.tables}
    ctx.filter_columns = {alias: [] for alias in ctx.tables}
    for cond in _top_where(ctx):
        cols = list(cond.find_all(exp.Column))
        hits = {ctx.resolved.get(id(c)) for c in cols}
        if None in hits or not hits:
            continue
        aliases = {a for a, _ in hits}
        for a, path in hits:
            ctx.filter_columns[a].append(path)
        if len(aliases) == 1 and _pushable(cond):
            ctx.pushed[aliases.pop()].append(cond)
    return ctx


def _pushable(cond: exp.Expression) -> bool:
    simple = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
    if isinstance(cond, simple):
        return {type(cond.left), type(cond.right)} <= {exp.Column, exp.Literal} and \
            isinstance(cond.left, exp.Column) != isinstance(cond.right, exp.Column)
    if isinstance(cond, exp.In):
        return isinstance(cond.this, exp.Column) and all(isinstance(v, exp.Literal) for v in cond.expressions)
    if isinstance(cond, exp.Is):
        return isinstance(cond.this, exp.Column) and isinstance(cond.expression, exp.Null)
    if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is):
        return _pushable(cond.this)
    return False


RULES = (parse_read_only, bind_tables, resolve_columns, check_types, prune_columns, prune_batches, push_predicates)


def run_rules(sql: str, load_state, known_tables, as_of: int | None = None) -> QueryContext:
    ctx = QueryContext(sql=sql, as_of=as_of)
    ctx = parse_read_only(ctx)
    ctx = bind_tables(ctx, load_state, known_tables)
    for rule in (resolve_columns, check_types, prune_columns, prune_batches, push_predicates):
        ctx = rule(ctx)
    return ctx


_ = Any
