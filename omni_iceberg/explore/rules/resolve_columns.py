"""Rule: every column reference binds to one (table alias, logical path)."""

from __future__ import annotations

from sqlglot import exp

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES
from catalog_ext.family import FamilyState
from catalog_ext.suggest import closest, did_you_mean
from omni_iceberg.explore.rules.context import QueryContext
from omni_iceberg.read.guard import QueryError, at
from omni_iceberg.read.scope import SelectScope, Source, is_opaque


def top_level(state: FamilyState) -> list[str]:
    """The wide table's top-level columns (features stored under a stage included)."""
    names = state.top_level_columns()
    return names + [c.path for c in state.columns if c.kind == "feature" and c.path not in names]


def _candidates(ctx: QueryContext) -> list[str]:
    names: set[str] = set()
    for t in ctx.tables.values():
        names.update(top_level(t.state))
        names.update(c.path for c in t.state.columns)
    for s in ctx.system.values():
        names.update(s.columns)
    return sorted(names)


def _hint(ctx: QueryContext, parts: list[str], name: str) -> str:
    """What an unknown column may have meant: a stage field of that name, a near name, or the columns there are.

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> ctx = example_context("SELECT 1 FROM web", through="bind_tables")
    >>> _hint(ctx, ["raw_data"], "raw_data"), _hint(ctx, ["qualty"], "qualty")
    ("; did you mean 'RawData.raw_data'?", "; did you mean 'quality'?")
    >>> _hint(ctx, ["bogus"], "bogus")
    '; the columns are _ai_unique_id_, _ai_append_name_, RawData, ProcessedData, quality, lang'
    """
    known = _candidates(ctx)
    wanted = parts[-1] if parts[0] in ctx.tables else name
    # a field of a stage written without its stage (src for RawData.src)
    fields = [c for c in known if "." in c and c.rsplit(".", 1)[1].lower() == parts[-1].lower()]
    if fields:
        return "; did you mean " + " or ".join(repr(c) for c in fields[:3]) + "?"
    near = did_you_mean(wanted, known)
    if near:
        return near
    leaves = {c.rsplit(".", 1)[1]: c for c in known if "." in c}
    leaf = closest(parts[-1], leaves)
    if leaf is not None:
        return f"; did you mean {leaves[leaf]!r}?"
    columns = list(dict.fromkeys(c for t in ctx.tables.values() for c in top_level(t.state)))
    columns += [c for s in ctx.system.values() for c in s.columns if c not in columns]
    shown = ", ".join(columns[:20]) + (f" and {len(columns) - 20} more" if len(columns) > 20 else "")
    return f"; the columns are {shown}" if columns else ""


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
    """Bind columns by name, qualified (``w.quality``) or not; unknown and ambiguous names are errors.

    Names resolve by SQL scope (:mod:`omni_iceberg.read.scope`): a qualifier names
    the nearest FROM item of that name, an unqualified column the tables of its own
    SELECT first, then those of the queries it is nested in. Output aliases
    (``ORDER BY n``) and columns that may come from a CTE, a subquery, VALUES or
    unnest are left to the engine: those are built from checked parts. Columns of
    system tables are checked but not recorded: no later rule plans anything for them.

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> ctx = resolve_columns(example_context("SELECT RawData.raw_data, w.quality FROM web AS w",
    ...                                       until="resolve_columns"))
    >>> sorted(ctx.resolved.values())
    [('w', 'RawData.raw_data'), ('w', 'quality')]
    >>> resolve_columns(example_context("SELECT qualty FROM web", until="resolve_columns"))
    Traceback (most recent call last):
    ...
    omni_iceberg.read.guard.QueryError: unknown column 'qualty' at line 1, column 8; did you mean 'quality'?
    """
    for star in ctx.tree.find_all(exp.Star):
        parent = star.parent
        if isinstance(parent, exp.Column) and parent.table:
            ctx.star.add(parent.table)
        elif not isinstance(parent, exp.Count):
            ctx.star.update(ctx.tables)
    by_node = {id(t.node): alias for alias, t in [*ctx.tables.items(), *ctx.system.items()]}
    for col in ctx.tree.find_all(exp.Column):
        if isinstance(col.this, exp.Star):
            continue
        scope = ctx.scopes.column_scope.get(id(col)) if ctx.scopes is not None else None
        if scope is None:
            continue  # ORDER BY of a UNION names the union's output columns
        parts = [p.name for p in col.parts]
        matches, opaque = _matches(ctx, scope, parts, by_node)
        name = ".".join(parts)
        if len(matches) != 1 and len(parts) == 1 and parts[0].lower() in _output_names(scope):
            continue  # ORDER BY / HAVING on an output alias
        if not matches and opaque:
            continue  # a column of a CTE, subquery, VALUES or unnest: the engine binds it
        if not matches:
            raise QueryError(f"unknown column {name!r}{at(col)}{_hint(ctx, parts, name)}")
        if len(matches) > 1:
            tables = ", ".join(f"{a} ({(ctx.tables.get(a) or ctx.system[a]).identifier})" for a, _ in matches)
            raise QueryError(f"ambiguous column {name!r}{at(col)}: it exists in {tables}; qualify it")
        if matches[0][0] in ctx.tables:
            ctx.resolved[id(col)] = matches[0]
    return ctx


def _pivoted(src: Source) -> bool:
    """A pivoted table's output has columns of its own (one per pivot value): the engine binds those."""
    return bool(src.node.args.get("pivots"))


def _output_names(scope: SelectScope) -> set[str]:
    return {e.alias.lower() for e in scope.select.expressions if isinstance(e, exp.Alias)}


def _matches(ctx: QueryContext, scope: SelectScope, parts: list[str],
             by_node: dict[int, str]) -> tuple[list[tuple[str, str]], bool]:
    """(alias, logical path) candidates for a column, and whether an opaque FROM item may hold it instead."""
    if len(parts) > 1:
        src = scope.find(parts[0])
        if src is not None:
            alias = by_node.get(id(src.node))
            if alias in ctx.tables:
                path = _resolve_path(ctx.tables[alias].state, parts[1:])
                return ([(alias, path)] if path is not None else []), _pivoted(src)
            if alias in ctx.system:
                found = len(parts) == 2 and parts[1] in ctx.system[alias].columns
                return ([(alias, parts[1])] if found else []), False
            return [], True  # a CTE, subquery or unnest: the engine knows its columns
    opaque = False
    for level in scope.chain():  # the innermost SELECT with a match wins, as in SQL
        found: list[tuple[str, str]] = []
        for src in level.sources.values():
            alias = by_node.get(id(src.node))
            if alias in ctx.tables:
                path = _resolve_path(ctx.tables[alias].state, parts)
                if path is not None:
                    found.append((alias, path))
                opaque = opaque or _pivoted(src)
            elif alias in ctx.system:
                if len(parts) == 1 and parts[0] in ctx.system[alias].columns:
                    found.append((alias, parts[0]))
            elif is_opaque(src):
                opaque = True
        if found:
            return found, opaque
    return [], opaque
