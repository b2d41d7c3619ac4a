"""Rule: per table, only the logical columns the query mentions are read."""

from __future__ import annotations

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from omni_iceberg.explore.rules.context import QueryContext
from omni_iceberg.explore.rules.resolve_columns import top_level


def prune_columns(ctx: QueryContext) -> QueryContext:
    """The keys plus every column referenced (all top-level columns for ``*``).

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> prune_columns(example_context("SELECT avg(quality) FROM web", until="prune_columns")).columns
    {'web': ['_ai_unique_id_', '_ai_append_name_', 'quality']}
    >>> prune_columns(example_context("SELECT * FROM web", until="prune_columns")).columns["web"][2:]
    ['RawData', 'ProcessedData', 'quality', 'lang']
    """
    for alias, t in ctx.tables.items():
        if alias in ctx.star:
            ctx.columns[alias] = top_level(t.state)
            continue
        paths = [path for (a, path) in ctx.resolved.values() if a == alias]
        ctx.columns[alias] = list(dict.fromkeys([ID_COLUMN, BATCH_COLUMN] + paths))
    return ctx
