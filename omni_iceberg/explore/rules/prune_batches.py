"""Rule: a batch predicate in the top-level WHERE limits the batches scanned."""

from __future__ import annotations

from sqlglot import exp

from catalog_ext.contract import BATCH_COLUMN
from omni_iceberg.explore.rules.context import QueryContext, top_where


def prune_batches(ctx: QueryContext) -> QueryContext:
    """``_ai_append_name_ = 'x'`` / ``IN ('x', 'y')`` -> only those batches (None: all).

    Only names of committed batches are kept: the list ends up in generated SQL and scan
    filters, and a name that is not a batch matches no row anyway.

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> sql = "SELECT 1 FROM web WHERE _ai_append_name_ IN ('cc', 'nope') AND quality > 1"
    >>> prune_batches(example_context(sql, until="prune_batches")).batches
    {'web': ['cc']}
    """
    ctx.batches = {alias: None for alias in ctx.tables}
    for cond in top_where(ctx):
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
        committed = [b.name for b in ctx.tables[hit[0]].state.batches]
        names = [v.this for v in values if v.this in committed]
        current = ctx.batches[hit[0]]
        ctx.batches[hit[0]] = names if current is None else [n for n in current if n in names]
    return ctx
