"""Rule: a query that needs no column of the base table reads a feature table's rows instead.

Every physical table carries both keys, but the logical table's rows are the base
table's rows; a feature table holds only the rows it was computed for. Reading a
feature table *instead of* the base table therefore changes nothing only when the
rows it lacks could not change the answer. Three ways to know that, in order:

1. **Coverage.** Snapshot metadata says the feature table holds as many rows as the
   base table (no delete files in either). Its rows are a subset of the base rows
   with unique keys, so it holds every row: any query gives the same answer.
2. **A NULL-rejecting filter.** A top-level ``WHERE`` conjunct such as ``quality > 0.5``,
   ``lang IN ('en')`` or ``quality IS NOT NULL`` is false or NULL on a row without a
   value in that table, so such rows are dropped anyway. (``IS NULL`` and ``COALESCE``
   are not: they select exactly those rows.)
3. **NULL-ignoring aggregates.** A single-table, ungrouped SELECT whose every output is
   ``sum/avg/min/max/count(column)`` over that table's columns: rows without values
   add nothing to these aggregates. ``count(*)`` and ``GROUP BY`` count those rows,
   so they do not qualify.

Otherwise the base table's keys are read (a keys-only scan) and the feature tables are
left-joined to them, as before.
"""

from __future__ import annotations

from sqlglot import exp

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.family import FamilyState
from omni_iceberg.explore.rules.context import QueryContext, top_where
from omni_iceberg.explore.rules.push_predicates import rejects_null
from omni_iceberg.read.reader import leaf_paths

_NULL_IGNORING = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count)


def skip_base_table(ctx: QueryContext) -> QueryContext:
    """Set ``ctx.drivers[alias]`` to the feature table whose rows stand for the logical rows.

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> ctx = skip_base_table(example_context("SELECT count(*) FROM web WHERE quality > 0.5",
    ...                                       until="skip_base_table"))
    >>> ctx.drivers, ctx.driver_reasons["web"]
    ({'web': 'f1'}, 'the filter quality > 0.5 drops rows without a value in aidata.web__f1')
    >>> skip_base_table(example_context("SELECT count(*) FROM web WHERE quality IS NULL",
    ...                                 until="skip_base_table")).drivers
    {}
    """
    for alias, bound in ctx.tables.items():
        state = bound.state
        if alias in ctx.star:
            continue
        needed = tables_needed(state, ctx.columns.get(alias, []))
        if not needed or state.base_table.key in needed:
            continue  # only keys (count(*)) or a base column: the base table is read
        found = (_covering(ctx, state, needed) or _null_rejecting_filter(ctx, alias, state, needed)
                 or _null_ignoring_aggregates(ctx, alias, state, needed))
        if found is not None:
            ctx.drivers[alias], ctx.driver_reasons[alias] = found
    return ctx


def tables_needed(state: FamilyState, columns: list[str]) -> list[str]:
    """Physical table keys holding the values of ``columns``, in first-use order."""
    out: list[str] = []
    for path in leaf_paths(state, columns):
        for pc in state.read_parts(path):
            if pc.table not in out:
                out.append(pc.table)
    return out


def _covering(ctx: QueryContext, state: FamilyState, needed: list[str]) -> tuple[str, str] | None:
    base_rows = ctx.row_count(state.base_table)
    if base_rows is None:
        return None
    for key in needed:
        table = state.physical_table(key)
        if ctx.row_count(table) == base_rows:
            return key, f"{table.identifier} holds all {base_rows} rows (snapshot metadata)"
    return None


def _null_rejecting_filter(ctx: QueryContext, alias: str, state: FamilyState,
                           needed: list[str]) -> tuple[str, str] | None:
    for cond in top_where(ctx):
        if not rejects_null(cond):
            continue
        col = next(cond.find_all(exp.Column))
        hit = ctx.resolved.get(id(col))
        if hit is None or hit[0] != alias or hit[1] in (ID_COLUMN, BATCH_COLUMN):
            continue
        pcs = state.read_parts(hit[1])
        if len(pcs) == 1 and pcs[0].table in needed:  # a column split over parts has no one table to drive
            table = state.physical_table(pcs[0].table)
            return pcs[0].table, f"the filter {cond.sql()} drops rows without a value in {table.identifier}"
    return None


def _null_ignoring_aggregates(ctx: QueryContext, alias: str, state: FamilyState,
                              needed: list[str]) -> tuple[str, str] | None:
    tree = ctx.tree
    if len(needed) != 1 or len(ctx.tables) != 1 or not isinstance(tree, exp.Select):
        return None
    if tree.args.get("group") or tree.args.get("distinct") or tree.find(exp.Window) or tree.find(exp.Subquery):
        return None
    if tree.find(exp.TableSample):
        return None  # a sample of the feature table's rows is not a sample of the logical rows
    if not all(isinstance(o.this if isinstance(o, exp.Alias) else o, _NULL_IGNORING) for o in tree.expressions):
        return None
    for agg in tree.find_all(exp.AggFunc):  # HAVING count(*) counts the rows too
        arg = agg.this
        if isinstance(arg, exp.Distinct):
            arg = arg.expressions[0] if len(arg.expressions) == 1 else None
        hit = ctx.resolved.get(id(arg)) if isinstance(agg, _NULL_IGNORING) and isinstance(arg, exp.Column) else None
        if hit is None or hit[1] in (ID_COLUMN, BATCH_COLUMN):
            return None  # count(*), count(1), an expression, or a key column: rows without values count
    key = needed[0]
    return key, (f"only NULL-ignoring aggregates over {state.physical_table(key).identifier}: "
                 f"rows without a value add nothing")
