"""Rule: every column reference binds to one (table alias, logical path)."""

from __future__ import annotations


from sqlglot import exp

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES
from catalog_ext.family import FamilyState
from catalog_ext.suggest import did_you_mean
from omni_iceberg.explore.guard import QueryError, at
from omni_iceberg.explore.rules.context import QueryContext


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

    Output aliases (``ORDER BY n``) and CTE columns are left alone. Columns of system
    tables are checked but not recorded: no later rule plans anything for them.

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> ctx = resolve_columns(example_context("SELECT RawData.raw_data, w.quality FROM web AS w",
    ...                                       until="resolve_columns"))
    >>> sorted(ctx.resolved.values())
    [('w', 'RawData.raw_data'), ('w', 'quality')]
    >>> resolve_columns(example_context("SELECT qualty FROM web", until="resolve_columns"))
    Traceback (most recent call last):
    ...
    omni_iceberg.explore.guard.QueryError: unknown column 'qualty' at line 1, column 8; did you mean 'quality'?
    """
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
        elif parts[0] in ctx.system and len(parts) > 1:
            if len(parts) == 2 and parts[1] in ctx.system[parts[0]].columns:
                matches = [(parts[0], parts[1])]
        else:
            for alias, t in ctx.tables.items():
                path = _resolve_path(t.state, parts)
                if path is not None:
                    matches.append((alias, path))
            matches += [(alias, parts[0]) for alias, s in ctx.system.items()
                        if len(parts) == 1 and parts[0] in s.columns]
        name = ".".join(parts)
        if not matches:
            hint = did_you_mean(parts[-1] if parts[0] in ctx.tables else name, _candidates(ctx))
            raise QueryError(f"unknown column {name!r}{at(col)}{hint}")
        if len(matches) > 1:
            tables = ", ".join(f"{a} ({(ctx.tables.get(a) or ctx.system[a]).identifier})" for a, _ in matches)
            raise QueryError(f"ambiguous column {name!r}{at(col)}: it exists in {tables}; qualify it")
        if matches[0][0] in ctx.tables:
            ctx.resolved[id(col)] = matches[0]
    return ctx
