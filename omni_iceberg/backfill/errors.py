"""The records a backfill failed on, as users and retries read them (``omni_sys.errors``).

Every attempt of a run appends its failed records; these functions read them back -
per unit, the records of the attempt whose work stands (:func:`errors_of`), with the
outcome of the attempt that recorded them (:func:`run_errors`), or as what a retry
recomputes (:func:`unresolved_errors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_ext import system_tables
from catalog_ext.contract import ID_COLUMN, split_qualified
from catalog_ext.family import FamilyState
from omni_iceberg.backfill.bookkeeping import unit_label
from omni_iceberg.backfill.run_stats import recorded_attempt, shown_error_attempts
from omni_iceberg.features.spec import FeatureDefinitionError

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


def unresolved_errors(ctx: OmniContext, state: FamilyState, features: list[str], error_classes: list[str] | None = None
                      ) -> tuple[dict[tuple[str, str], set[str]], int]:
    """Failed records of the current feature versions that still have no value; and the retry's round.

    Only records of computed units count: a failed run's records (kept in
    ``omni_sys.errors`` for reading) belong to units no commit made, which the next
    plain backfill computes whole - retrying them alone would add a second copy later.
    The round (``BackfillPlan.attempt``) is one more than the runs that recorded these
    failures, so a retry of records an earlier retry left failing is a new run, not
    that committed run again.
    """
    errors = system_tables.read_rows(ctx.catalog, system_tables.ERRORS,
                                     f"logical_table == '{state.table.identifier}'").to_pylist()
    failed: dict[tuple[str, str], set[str]] = {}
    attempt = 1
    for f in features:
        binding = state.feature(f)
        if binding is None:
            raise FeatureDefinitionError(f"no feature {f!r} is registered on {state.table.identifier}")
        computed = state.computed_batches(f, binding.version)
        rows = [r for r in errors if r["feature"] == f and r["version"] == binding.version
                and r["batch"] in computed and (not error_classes or r["exception_class"] in error_classes)]
        if not rows:
            continue
        attempt = max(attempt, len({r["run_id"] for r in rows}) + 1)
        table = state.physical_table(binding.table_key)
        have = set(ctx.catalog.load_table(table.identifier).scan(
            snapshot_id=table.snapshot_id, selected_fields=(ID_COLUMN,)).to_arrow().column(0).to_pylist())
        for r in rows:
            if r[ID_COLUMN] not in have:
                failed.setdefault((f, r["batch"]), set()).add(r[ID_COLUMN])
    return failed, attempt


def failed_run_hint(logical_table: str, run_id: str) -> str:
    """The exact command that shows the failed records of a run, committed or not."""
    return f"omni errors {logical_table} --run {run_id}"


def run_errors(ctx: OmniContext, name: str, run_id: str | None = None, *, all_attempts: bool = False) -> pa.Table:
    """Failed records of ``name`` (optionally one run) with the status of the attempt that recorded them.

    Failed attempts keep their records in ``omni_sys.errors`` too: ``run_status`` tells
    them apart (``succeeded``, ``failed``, or ``running`` while an attempt has no outcome
    yet). By default only the records of the attempt whose work on each unit stands are
    shown (see :func:`errors_of`).
    """
    ns, table = split_qualified(name)
    errors = errors_of(ctx.catalog, ctx.state(name).table.identifier, run_id or None, all_attempts=all_attempts)
    runs = system_tables.read_rows(ctx.catalog, system_tables.RUNS, f"logical_table == '{ns}.{table}'")
    rows = runs.select(["run_id", "started_at", "finished_at", "status", "plan"]).to_pylist()
    by_attempt = {(r["run_id"], n): r["status"] for r in rows if (n := recorded_attempt(r)) is not None}
    # rows written before attempts were recorded: the attempt an error row belongs to is
    # the run row whose time span holds the moment it failed
    spans: dict[str, list[tuple[Any, Any, str]]] = {}
    for r in rows:
        spans.setdefault(r["run_id"], []).append((r["started_at"], r["finished_at"], r["status"]))

    def status_of(rid: str, attempt: int, failed_at: Any) -> str:
        if (rid, attempt) in by_attempt:
            return by_attempt[(rid, attempt)]
        if any(k[0] == rid for k in by_attempt):
            return "running"  # this run numbers its attempts: one without a row has no outcome yet
        for started, finished, status in spans.get(rid, ()):
            if started <= failed_at <= finished:
                return status
        return "running"

    status = [status_of(r["run_id"], r["attempt"], r["failed_at"])
              for r in errors.select(["run_id", "attempt", "failed_at"]).to_pylist()]
    return errors.append_column("run_status", pa.array(status, pa.string()))


def errors_of(catalog: Any, logical_table: str, run_id: str | None = None, *, all_attempts: bool = False
              ) -> pa.Table:
    """Rows of ``omni_sys.errors`` for ``logical_table`` (optionally one run).

    A rerun of the same plan is another attempt of the same run (same run id): by
    default each unit's records are those of the attempt whose work on it is current
    (see :func:`~omni_iceberg.backfill.run_stats.shown_error_attempts`), so a record that
    failed in a failed attempt and again in its rerun is listed once, and a unit the rerun
    resumed from a checkpoint keeps the records of the attempt that computed it.
    ``all_attempts`` returns every attempt's rows (each with its ``attempt`` number).
    """
    where = f"logical_table == '{logical_table}'" + (f" and run_id == '{run_id}'" if run_id else "")
    errors = system_tables.read_rows(catalog, system_tables.ERRORS, where)
    if all_attempts or errors.num_rows == 0:
        return errors
    runs = system_tables.read_rows(catalog, system_tables.RUNS, where).select(["run_id", "plan"]).to_pylist()
    rows = [(r["run_id"], unit_label(r["feature"], r["batch"]), r["attempt"])
            for r in errors.select(["run_id", "feature", "batch", "attempt"]).to_pylist()]
    shown = shown_error_attempts(runs, rows)
    return errors.filter(pa.array([shown[(rid, unit)] == n for rid, unit, n in rows], pa.bool_()))
