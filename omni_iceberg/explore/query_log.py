"""The query log (``omni_sys.query_log``): what each query and export read.

Later work (materializations, hot OLAP columns, column splits) decides from it which
columns are read together, filtered on, and how often. Rows reach the table through a
local spool (``catalog_ext/log_spool.py``): a query pays a file append, not a commit.

Spark SQL and Trino queries on the logical views are recorded too (``query_engine`` says
which engine a query was submitted to): omni's Spark extension (a query-execution listener,
``spark_udfs/java/omni/spark/QueryLogListener.java``) and omni's Trino event listener
(``catalog_ext/trino_listener``) append what they saw to the spool's events file, and
:func:`engine_rows` turns those events into rows when the log is flushed. An event names a
table as the engine saw it: a logical view (its columns are logical columns) or a physical
table of a family (its columns are mapped back through the family state).
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
            "query_engine": "omni",
        })
    if getattr(ctx, "config", None) is None:  # a bare catalog holder (tests of the planner): no home to spool in
        system_tables.append_rows(ctx.catalog, system_tables.QUERY_LOG, records)
        return
    spool_for(ctx.config, system_tables.QUERY_LOG).add(ctx.catalog, records)  # none for system-only queries


def flush_query_log(ctx: OmniContext) -> int:
    """Push every spooled log row (the engines' events included) into ``omni_sys.query_log`` now; returns how many."""
    return spool_for(ctx.config, system_tables.QUERY_LOG).flush(ctx.catalog, convert=lambda ev: engine_rows(ctx, ev))


#: the engines an event may come from (anything else is not recorded)
ENGINES = ("spark", "trino")


def engine_rows(ctx: OmniContext, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Query-log rows for the engines' events; events on tables that are no omni table give none.

    An event: ``engine``, ``query_id``, ``namespace``, ``table``, ``columns`` and
    ``filter_columns`` (as the engine names them, any case), ``batches`` (or null: every
    batch), ``physical_tables`` read, ``rows``, ``latency_ms``, ``sql``, ``at`` (ISO 8601),
    and ``logical_version`` when the engine knows it (Spark reads it from the view's
    properties; for Trino it is the version that was current at ``at``).
    """
    resolver = _Resolver(ctx)
    out = []
    for ev in events:
        try:
            row = resolver.row(ev)
        except (KeyError, TypeError, ValueError) as e:  # a malformed event: said, not fatal to the others
            import sys

            print(f"warning: query-log event {str(ev)[:200]} skipped ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        if row is not None:
            out.append(row)
    return out


class _Resolver:
    """Names the engines saw -> logical tables, versions and columns, loaded once per flush."""

    def __init__(self, ctx: OmniContext):
        self.ctx = ctx
        self.families: dict[str, Any] = {}  # "ns.name" -> (current state, log) or None
        self.physical: dict[str, dict[str, tuple[str, str]]] = {}  # namespace -> table -> (family, key)

    def family(self, ident: str) -> Any:
        if ident not in self.families:
            from catalog_ext.errors import NoSuchLogicalTableError

            ns, _, name = ident.rpartition(".")
            try:
                self.families[ident] = (self.ctx.store.load(ns, name), self.ctx.store.log(ns, name))
            except (NoSuchLogicalTableError, ValueError):
                self.families[ident] = None
        return self.families[ident]

    def physical_home(self, namespace: str, table: str) -> tuple[str, str] | None:
        """The family and table key of physical table ``namespace.table`` (current versions only)."""
        if namespace not in self.physical:
            homes: dict[str, tuple[str, str]] = {}
            for ident in self.ctx.store.list_tables(namespace):
                found = self.family(ident)
                for t in found[0].tables if found else ():
                    homes[t.identifier.rpartition(".")[2].lower()] = (ident, t.key)
            self.physical[namespace] = homes
        return self.physical[namespace].get(table.lower())

    def row(self, ev: dict[str, Any]) -> dict[str, Any] | None:
        engine = ev["engine"]
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}")
        namespace, table = str(ev["namespace"]), str(ev["table"])
        at = datetime.fromisoformat(ev["at"])
        ident = f"{namespace}.{table}"
        found = self.family(ident)
        columns, filters = list(ev.get("columns") or []), list(ev.get("filter_columns") or [])
        if found is None:  # a physical table of a family, read directly?
            home = self.physical_home(namespace, table)
            if home is None:
                return None
            ident, key = home
            found = self.family(ident)
            columns, filters = _logical_of(found[0], key, columns), _logical_of(found[0], key, filters)
        state, log = found
        version = ev.get("logical_version")
        if version is None:  # the version current when the query ran
            stamp = at.timestamp() * 1000
            version = max((v.version for v in log if v.committed_ms <= stamp), default=state.version)
        return {
            "query_id": str(ev["query_id"])[:64], "kind": "sql", "logical_table": ident,
            "logical_version": int(version),
            "columns": json.dumps(_canonical(state, columns)),
            "filter_columns": json.dumps(sorted(set(_canonical(state, filters)))),
            "batches": json.dumps(ev.get("batches")), "physical_tables": json.dumps(list(ev.get("physical_tables") or [])),
            "engine": engine, "rows": int(ev.get("rows", -1)), "latency_ms": int(ev.get("latency_ms", 0)),
            "sql": redact(str(ev.get("sql", "")))[:4000], "at": at.astimezone(timezone.utc), "query_engine": engine,
        }


def _canonical(state: Any, names: list[str]) -> list[str]:
    """``names`` spelled as the family spells its columns (Trino lower-cases them), in order, once each."""
    spelled = {c.lower(): c for c in [*state.top_level_columns(), *(c.path for c in state.columns)]}
    out: list[str] = []
    for n in names:
        c = spelled.get(str(n).lower())
        if c is not None and c not in out:
            out.append(c)
    return out


def _logical_of(state: Any, key: str, physical: list[str]) -> list[str]:
    """The logical columns physical columns ``physical`` of table ``key`` hold (keys kept as they are)."""
    from catalog_ext.contract import KEY_COLUMNS

    by_name = {pc.name.lower(): pc.logical for pc in state.columns_of_table(key)}
    return [c if c in KEY_COLUMNS else by_name[c.lower()] for c in physical
            if c in KEY_COLUMNS or c.lower() in by_name]
