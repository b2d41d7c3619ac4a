"""What each table name and column qualifier in a query means, by SQL scope.

A name in FROM is a CTE only where that CTE is visible: in the later CTEs of its WITH
list, in the query the WITH belongs to, in every subquery nested in those, and in its
own body when the WITH is RECURSIVE. Anywhere else - an outer query, a sibling
subquery, an earlier CTE of the same list, its own body without RECURSIVE - the same
name is a table, which in omni sql must be a logical table (or ``omni_sys.*``). Names
compare case-insensitively, as in DuckDB (quoted ones too).

Collecting CTE names across the whole query instead let ``FROM (WITH pg_settings AS
(...) ...) AS a, pg_settings`` through as a CTE reference, and DuckDB answered the outer
``pg_settings`` from its catalog. The binding here is therefore also what the physical
query is built from (:func:`rewrite_sources`): every CTE gets a generated name and only
the references bound to it are renamed, every table reference becomes a generated
scan. An engine whose scoping differed from this module's could then only fail to find
a generated name; it never sees a name that could resolve to one of its own objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

from omni_iceberg.read.guard import GENERATED_PREFIX, QueryError, check_tree

#: FROM items whose columns the planner does not know (a CTE, a subquery, VALUES,
#: unnest, LATERAL): their columns come from checked parts and the engine binds them
_OPAQUE = (exp.Subquery, exp.Values, exp.Unnest, exp.Lateral)


@dataclass
class Source:
    """One FROM or JOIN item of a SELECT, under the name the SELECT knows it by."""

    name: str  # lower case: the alias, or the table's name
    node: exp.Expression
    cte: exp.CTE | None = None  # the CTE a table reference names (None: a table)


@dataclass
class SelectScope:
    select: exp.Select
    parent: SelectScope | None  # the query this one is nested in (correlated columns and LATERAL look there)
    sources: dict[str, Source] = field(default_factory=dict)

    def chain(self):
        scope: SelectScope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    def find(self, name: str) -> Source | None:
        """The nearest FROM item named ``name`` (a qualifier such as ``w`` in ``w.t_len``)."""
        for scope in self.chain():
            if name.lower() in scope.sources:
                return scope.sources[name.lower()]
        return None


@dataclass
class Scopes:
    """Every table reference bound to a CTE or a table, every column to its SELECT (see :func:`scopes`)."""

    ctes: dict[int, exp.CTE] = field(default_factory=dict)  # id(Table) -> the CTE it names
    tables: list[exp.Table] = field(default_factory=list)  # references to tables, in the query's order
    all_ctes: list[exp.CTE] = field(default_factory=list)
    column_scope: dict[int, SelectScope] = field(default_factory=dict)  # id(Column) -> its SELECT

    def names_cte(self, table: exp.Table) -> bool:
        return id(table) in self.ctes


def table_name(node: exp.Table) -> str | None:
    """The lower-case name of a plain ``FROM name`` that may name a CTE (None when qualified or not a name)."""
    if node.args.get("db") or node.args.get("catalog") or not isinstance(node.this, exp.Identifier):
        return None
    return node.name.lower()


def scopes(tree: exp.Expression) -> Scopes:
    """Bind every table reference and column of ``tree`` by SQL scope.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT * FROM (WITH s AS (SELECT 1) SELECT * FROM s) AS a, s", read="duckdb")
    >>> [(t.name, t.sql()) for t in scopes(q).tables]
    [('s', 's')]
    >>> q = sqlglot.parse_one("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r) SELECT * FROM r")
    >>> len(scopes(q).ctes), scopes(q).tables
    (2, [])
    """
    out = Scopes()
    # an explicit stack, not recursion: a deeply nested (but parseable) query must not
    # overflow Python's stack here
    stack: list[tuple[exp.Expression, dict[str, exp.CTE], SelectScope | None]] = [(tree, {}, None)]
    while stack:
        node, env, scope = stack.pop()
        with_ = node.args.get("with_")
        children_env = env
        if isinstance(with_, exp.With):
            children_env = dict(env)
            recursive = bool(with_.args.get("recursive"))
            outer = scope  # a CTE body is not nested in the query it belongs to: no correlation into it
            for cte in with_.expressions:
                name = cte.alias_or_name.lower()
                out.all_ctes.append(cte)
                if recursive:  # visible in its own body, not in the CTEs before it
                    children_env[name] = cte
                    stack.append((cte.this, dict(children_env), outer))
                else:
                    stack.append((cte.this, dict(children_env), outer))
                    children_env[name] = cte
        if isinstance(node, exp.Select):
            scope = SelectScope(node, scope)
            for item in from_items(node):
                src = _source(item, children_env)
                scope.sources.setdefault(src.name, src)
        elif isinstance(node, exp.Column):
            if scope is not None:
                out.column_scope[id(node)] = scope
        elif isinstance(node, exp.Table) and not isinstance(node.this, exp.Unnest):
            name = table_name(node)
            if name is not None and name in children_env:
                out.ctes[id(node)] = children_env[name]
            else:
                out.tables.append(node)
        for key, value in node.args.items():
            if key == "with_":
                continue
            # ORDER BY / LIMIT of a UNION name its output columns, not any table's
            child_scope = None if isinstance(node, exp.SetOperation) and key not in ("this", "expression") else scope
            for child in reversed(value) if isinstance(value, list) else [value]:
                if isinstance(child, exp.Expression):
                    stack.append((child, children_env, child_scope))
    # the walk pops in reverse; callers and messages want the order the query is written in
    order = {id(t): i for i, t in enumerate(tree.find_all(exp.Table))}
    out.tables.sort(key=lambda t: order.get(id(t), 0))
    return out


def from_items(select: exp.Select) -> list[exp.Expression]:
    items = []
    from_ = select.args.get("from_")
    if from_ is not None:
        items.append(from_.this)
    items += [j.this for j in select.args.get("joins") or []]
    items += list(select.args.get("laterals") or [])
    return items


def _source(item: exp.Expression, env: dict[str, exp.CTE]) -> Source:
    name = item.alias_or_name.lower() if hasattr(item, "alias_or_name") else ""
    if isinstance(item, exp.Table):
        plain = table_name(item)
        return Source(name, item, env.get(plain) if plain is not None else None)
    return Source(name, item)


def is_opaque(src: Source) -> bool:
    """True for FROM items whose columns only the engine knows (CTEs, subqueries, VALUES, unnest)."""
    return src.cte is not None or isinstance(src.node, _OPAQUE) or \
        (isinstance(src.node, exp.Table) and isinstance(src.node.this, exp.Unnest))


def generated_cte_name(prefix: str, index: int) -> str:
    return f"{prefix}_cte_{index}"


def rewrite_sources(original: exp.Expression, scoped: Scopes, prefix: str,
                    derived: Callable[[exp.Table], exp.Expression | None]) -> exp.Expression:
    """A copy of ``original`` whose every table and CTE name is generated.

    ``derived(table)`` gives what replaces a table reference bound in ``scoped`` (a
    subquery over scans); each CTE is renamed ``<prefix>_cte_<n>`` and each reference
    bound to it follows, keeping the name the user wrote as its alias, so qualified
    columns (``c.x``) still find it.
    """
    copy = original.copy()
    pairs = list(zip(original.walk(), copy.walk()))
    names = {id(c): generated_cte_name(prefix, i) for i, c in enumerate(scoped.all_ctes)}
    replace: list[tuple[exp.Expression, exp.Expression]] = []
    for orig, new in pairs:
        if isinstance(orig, exp.CTE) and id(orig) in names:
            alias = new.args["alias"]
            alias.set("this", exp.to_identifier(names[id(orig)], quoted=True))
        elif isinstance(orig, exp.Table) and id(orig) in scoped.ctes:
            if new.args.get("alias") is None:
                new.set("alias", exp.TableAlias(this=new.this.copy()))
            new.set("this", exp.to_identifier(names[id(scoped.ctes[id(orig)])], quoted=True))
        elif isinstance(orig, exp.Table):
            sub = derived(orig)
            if sub is not None:
                replace.append((new, sub))
    for new, sub in replace:
        new.replace(sub)
    return copy


def replacement(table: exp.Table, select: exp.Select) -> exp.Subquery:
    """``select`` as the subquery standing in for ``table``, under the name the query knows the table by.

    The clauses bind_tables keeps after a table name move onto the subquery: a sample
    is drawn from, a pivot turns, the logical rows.
    """
    name = table.args.get("alias")
    sub = exp.Subquery(this=select, alias=name.copy() if name is not None else exp.TableAlias(this=table.this.copy()))
    for clause in ("sample", "pivots"):
        value = table.args.get(clause)
        if value:
            sub.set(clause, [v.copy() for v in value] if isinstance(value, list) else value.copy())
    return sub


def check_generated(tree: exp.Expression, allowed: set[str], dialect: str) -> None:
    """Refuse a generated query that reads anything but ``allowed`` tables and its own generated CTEs."""
    check_tree(tree, "the generated query")
    scoped = scopes(tree)
    generated = {generated_cte_name(GENERATED_PREFIX, i) for i in range(len(scoped.all_ctes))}
    for cte in scoped.all_ctes:
        if cte.alias_or_name not in generated:
            raise QueryError(f"internal error: the generated query defines the CTE {cte.alias_or_name!r}, which omni "
                             f"did not name; please report this query")
    for t in tree.find_all(exp.Table):
        if isinstance(t.this, exp.Unnest):
            continue
        if scoped.names_cte(t) and t.name in generated:
            continue
        if scoped.names_cte(t) or t.name not in allowed:
            raise QueryError(f"internal error: the generated query reads {t.sql(dialect)!r}, "
                             f"which is not one of the planned scans; please report this query")
