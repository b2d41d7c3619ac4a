"""The logical SQL planner's rules, one per module, each ``context in, context out``.

:data:`RULES` is the order they run in; :func:`run_rules` runs exactly that tuple.
Each rule reads and annotates a :class:`QueryContext`; the physical rewrite
(:class:`omni_iceberg.explore.planner.QueryPlan`) then replaces every logical table
by a subquery over only the physical tables, columns and batches the query needs.
Errors are :class:`QueryError` and name the place in the query (line and column) and,
for unknown names, the nearest known one.
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from catalog_ext.family import FamilyState, PhysicalTable
from omni_iceberg.explore.rules.bind_tables import bind_tables
from omni_iceberg.explore.rules.check_types import check_types
from omni_iceberg.explore.rules.context import BoundTable, QueryContext
from omni_iceberg.explore.rules.parse_read_only import parse_read_only
from omni_iceberg.explore.rules.prune_batches import prune_batches
from omni_iceberg.explore.rules.prune_columns import prune_columns
from omni_iceberg.explore.rules.push_predicates import push_predicates
from omni_iceberg.explore.rules.resolve_columns import resolve_columns
from omni_iceberg.explore.rules.skip_base_table import skip_base_table
from omni_iceberg.read.guard import QueryError

RULES = (parse_read_only, bind_tables, resolve_columns, check_types, prune_columns, prune_batches, push_predicates,
         skip_base_table)

__all__ = ["RULES", "BoundTable", "QueryContext", "QueryError", "run_rules"]


def run_rules(sql: str | exp.Query, load_state: Callable[[str, str, int | None], FamilyState],
              known_tables: Callable[[], list[str]], as_of: int | None = None,
              row_count: Callable[[PhysicalTable], int | None] | None = None) -> QueryContext:
    """Run :data:`RULES` in order on ``sql`` (text, or a query tree built by omni itself)."""
    tree = sql if isinstance(sql, exp.Expression) else None
    ctx = QueryContext(sql=tree.sql(dialect="duckdb") if tree is not None else sql, load_state=load_state,
                       known_tables=known_tables, as_of=as_of, tree=tree)
    if row_count is not None:
        ctx.row_count = row_count
    for rule in RULES:
        ctx = rule(ctx)
    return ctx
