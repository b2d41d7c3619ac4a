"""The query log (``omni_sys.query_log``): what each query and export read.

Later work (materializations, hot OLAP columns, column splits) decides from it which
columns are read together, filtered on, and how often. Rows reach the table through a
local spool (``catalog_ext/log_spool.py``): a query pays a file append, not a commit.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from catalog_ext import system_tables
from catalog_ext.log_spool import spool_for
from catalog_ext.redact import redact

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


def log_query(ctx: OmniContext, plan: Any, *, kind: str, engine: str, rows: int, latency_ms: int) -> None:
    """Append one row per logical table read; the SQL is stored redacted (it may quote a secret)."""
    now = datetime.now(timezone.utc)
    qid = uuid.uuid4().hex[:16]
    records = []
    for alias, t in plan.ctx.tables.items():
        records.append({
            "query_id": qid, "kind": kind, "logical_table": t.identifier, "logical_version": t.state.version,
            "columns": json.dumps(plan.ctx.columns.get(alias, [])),
            "filter_columns": json.dumps(sorted(set(plan.ctx.filter_columns.get(alias, [])))),
            "batches": json.dumps(plan.ctx.batches.get(alias)),
            "physical_tables": json.dumps([s.table.identifier for s in plan.scans if s.alias == alias]),
            "engine": engine, "rows": rows, "latency_ms": latency_ms, "sql": redact(plan.ctx.sql)[:4000], "at": now,
        })
    if getattr(ctx, "config", None) is None:  # a bare catalog holder (tests of the planner): no home to spool in
        system_tables.append_rows(ctx.catalog, system_tables.QUERY_LOG, records)
        return
    spool_for(ctx.config, system_tables.QUERY_LOG).add(ctx.catalog, records)  # none for system-only queries


def flush_query_log(ctx: OmniContext) -> int:
    """Push every spooled log row into ``omni_sys.query_log`` now; returns how many."""
    return spool_for(ctx.config, system_tables.QUERY_LOG).flush(ctx.catalog)
