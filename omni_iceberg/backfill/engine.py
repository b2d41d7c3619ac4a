"""Run a backfill plan and commit it as ONE logical version; the local engine.

:class:`BackfillRun` is the machinery every engine shares (see
:mod:`omni_iceberg.backfill.protocol`); :class:`LocalExecutor` is the local engine's
per-unit work and :class:`LocalBackfill` the engine :mod:`omni_iceberg.engines` hands out.

Per stage, one worker holds every feature of the stage (models load once). Per batch
of the stage, the inputs are read once, bucket by bucket (bounded memory), from the
exact snapshots the run sees: the pinned logical version plus the outputs of earlier
stages of this same run. Each (stage, batch) unit ends with a checkpoint - one
snapshot per feature table on the run's staging branch - so a killed run resumes
where it stopped. Record failures go to ``omni_sys.errors``; lineage and the run
report go to ``omni_sys.lineage`` and ``omni_sys.runs``. Where the run's time went is
in ``BackfillReport.phases`` (see :mod:`omni_iceberg.backfill.phases`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_ext import settings, system_tables
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, RAW_STAGE, split_qualified
from catalog_ext.family import ComputedUnit, FamilyState
from catalog_ext.group_values import null_recomputed
from catalog_ext.staging import sweep_stale_branches
from catalog_ext.physical import StagedWrite, StagingBranchTakenError, abandon_all, arrow_type, key_arrow_fields
from catalog_ext.updates import MarkComputed, MarkRetried, PinSnapshot
from catalog_ext.errors import ConfigError, OmniError
from omni_iceberg.backfill.bookkeeping import (UNIT_ATTEMPT_PROPERTY, UNIT_PROPERTY, checkpoint_properties,
                                               error_row, unit_label)
from omni_iceberg.backfill.phases import PhaseClock
from omni_iceberg.backfill.planner import BackfillPlan, Stage, definitions_of, plan_backfill
from omni_iceberg.backfill.protocol import Unit, UnitExecutor
from omni_iceberg.backfill.reuse import ReuseIndex
from omni_iceberg.backfill.run_stats import (ATTEMPT_KEY, RERUN_MARK, UNITS_KEY, next_attempt, recorded_attempt,
                                             shown_error_attempts)
from omni_iceberg.backfill.tuning import tune_run
from omni_iceberg.backfill.worker import InlineWorker, ProcessWorker, SliceResult, WorkerCrashedError, holds_models
from omni_iceberg.features.registry import physical_column_name
from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError
from omni_iceberg.features.udf import get_udf
from omni_iceberg.ui.progress import progress_bar
from omni_iceberg.explore.reader import iter_logical_slices

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

SLICE_ROWS = settings.value("OMNI_SLICE_ROWS")
#: a backfill whose worker is killed for memory reruns with batches halved, down to 1/8
MAX_MEMORY_SHRINK = 8


class ErrorBudgetExceededError(OmniError):
    """More records failed than the run allows; nothing was committed."""

    exit_code = 4


class NullInputsError(OmniError):
    """A unit computed nothing: an input its feature reads was NULL on every row of the batch.

    Its output would be NULL for the whole batch - a producer that did not run, or ran
    and produced nothing - and a run that writes only NULLs never reports success. NULL
    in an ingested ``RawData`` field is the data as submitted and is not checked.
    """

    exit_code = 4


@dataclass
class UnitStats:
    feature: str
    batch: str
    rows: int = 0
    errors: int = 0
    reused: int = 0
    filtered: int = 0
    started_ms: int = 0
    finished_ms: int = 0
    resumed: bool = False
    #: the attempt of the run that computed the unit (a resumed unit keeps its own; 0: not recorded)
    attempt: int = 0


@dataclass
class BackfillReport:
    logical_table: str
    run_id: str = ""
    engine: str = "local"
    engine_reason: str = ""
    status: str = "planned"
    plan: dict[str, Any] = field(default_factory=dict)
    units: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    errors: int = 0
    reused: int = 0
    resumed_units: int = 0
    logical_version: int | None = None
    seconds: float = 0.0
    #: ``feature/batch`` units a concurrent run committed first; this run did not append them again
    raced_units: list[str] = field(default_factory=list)
    #: wall seconds per phase of the run (``plan_s``, ``worker_start_s``, ``read_s``, ``compute_s``,
    #: ``checkpoint_s``, ``commit_s``, ...; ``other_s`` is the rest): see :mod:`omni_iceberg.backfill.phases`
    phases: dict[str, float] = field(default_factory=dict)
    #: what the run changed about itself on the way (a rerun with smaller batches after running out of memory)
    tuning: list[str] = field(default_factory=list)
    #: built-ins registered first, as producers of inputs no registered feature computed (``name@version``)
    registered: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def now_ms() -> int:
    """Milliseconds since the epoch: the unit of checkpoint and run timestamps."""
    return int(time.time() * 1000)


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


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


def retry_failed(ctx: OmniContext, name: str, features: list[str], *, error_classes: list[str] | None = None,
                 **kwargs: Any) -> BackfillReport:
    """Recompute only the failed records of ``features`` on the local engine (optionally some exception classes)."""
    return LocalBackfill(ctx, isolation=kwargs.pop("isolation", "process")).retry_failed(
        name, features, error_classes, **kwargs)


def backfill(ctx: OmniContext, name: str, features: list[str], batches: list[str] | None = None, *,
             dry_run: bool = False, isolation: str = "process", max_error_ratio: float | None = None,
             progress: bool | None = None, command: str = "", has_gpu: bool | None = None,
             plan: BackfillPlan | None = None) -> BackfillReport:
    """Plan and (unless ``dry_run``) run a backfill on the local engine."""
    return LocalBackfill(ctx, isolation=isolation).run(
        name, features, batches, dry_run=dry_run, max_error_ratio=max_error_ratio, progress=progress,
        command=command, has_gpu=has_gpu, plan=plan)


def start_report(state: FamilyState, plan: BackfillPlan, engine: str, engine_reason: str) -> BackfillReport:
    """The report of a run of ``plan`` on ``engine``, with the run id every engine derives the same way.

    The id is a hash of the plan, so rerunning the same command finds the same staging
    branches and resumes.
    """
    report = BackfillReport(logical_table=state.table.identifier, plan=plan.to_dict(), engine=engine,
                            engine_reason=engine_reason)
    if not plan.empty:
        report.run_id = ("rt-" if plan.only_ids else "bf-") + plan.fingerprint()
    return report


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


class BackfillRun:
    """One run of a plan: the machinery every engine shares, with a per-unit hook.

    Staging writers (one per feature table) and resume from their checkpoints, the
    units still to do, the error budget, the ONE logical commit (which drops units a
    concurrent run already committed), lineage and run rows. The engine plugs in
    through ``executor`` (a :class:`~omni_iceberg.backfill.protocol.UnitExecutor`).

    Example::

        run = BackfillRun(omni.context, state, plan, start_report(state, plan, "local", ""), LocalExecutor())
        report = run.run_to_commit(command="backfill web --features quality")
    """

    def __init__(self, ctx: OmniContext, state: FamilyState, plan: BackfillPlan, report: BackfillReport,
                 executor: UnitExecutor, *, max_error_ratio: float | None = None, progress: bool | None = None,
                 clock: PhaseClock | None = None):
        if plan.registrations:
            raise FeatureDefinitionError(
                f"this plan registers built-ins first ({', '.join(d.key for d in plan.registrations.values())}); "
                "run it through Omni.backfill or 'omni backfill', which register them and plan again")
        self.ctx, self.store, self.state, self.plan, self.report = ctx, ctx.store, state, plan, report
        #: phase timings; engines add their own phases (worker start, read, compute) to it
        self.clock = clock or PhaseClock()
        setup_started = time.perf_counter()
        self.executor = executor
        report.engine = executor.name
        self.max_error_ratio = max_error_ratio
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.started_ms = now_ms()
        self.defs: dict[str, FeatureDefinition] = definitions_of(state)
        self.bindings = {f: state.feature(f) for f in plan.features if plan.features[f].batches}
        self.writers: dict[str, StagedWrite] = {}
        #: column groups whose old values of recomputed units this run nulled: (group, staged writer)
        self.nulled: list[tuple[Any, StagedWrite]] = []
        self.stats: dict[tuple[str, str], UnitStats] = {}
        self.done: set[str] = set()
        #: whether the engine reruns this plan itself after ``error`` (recorded on the failed run's row)
        self.reruns_after: Callable[[BaseException], bool] = lambda error: False
        #: the tuning this attempt runs with (recorded in omni_sys.runs: the next run learns from it)
        self.tuning: dict[str, Any] = {}
        #: units a concurrent run committed first: this run's copies were dropped at commit
        self.raced: set[tuple[str, str]] = set()
        #: the unit being finished: a failed attempt's runs row counts it too
        self.unfinished: dict[str, UnitStats] = {}
        #: the run failed and dropped its staged work: no unit of it is kept for a rerun to resume
        self.abandoned = False
        #: this attempt of the run (a rerun of the same plan is the next one); its error rows carry it
        self.attempt = next_attempt(self.store.catalog, state.table.identifier, report.run_id) if report.run_id else 1
        # branches of killed or superseded runs on these tables go first (metadata only;
        # a branch this same plan can resume is kept)
        sweep_stale_branches(self.store.catalog, state, table_keys=[b.table_key for b in self.bindings.values()])
        for f, binding in self.bindings.items():
            t = state.physical_table(binding.table_key)
            w = self.store.staged_write(state, t.identifier, t.snapshot_id, report.run_id,
                                        {"omni.operation": "backfill", "omni.run-id": report.run_id,
                                         "omni.feature": binding.key})
            for label, props in w.attach(UNIT_PROPERTY).items():
                fname, batch = label.split("/", 1)
                self.done.add(label)
                self.stats[(fname, batch)] = UnitStats(
                    fname, batch, int(props.get("omni.unit-rows", 0)), int(props.get("omni.unit-errors", 0)),
                    int(props.get("omni.unit-reused", 0)), 0, int(props.get("omni.unit-started", 0)),
                    int(props.get("omni.unit-finished", 0)), resumed=True,
                    attempt=int(props.get(UNIT_ATTEMPT_PROPERTY, 0)))
            self.writers[f] = w
        report.resumed_units = len(self.done)
        self.reuse = ReuseIndex.build(self.store, state, list(self.bindings.values()))
        self.clock.add("setup_s", time.perf_counter() - setup_started)

    def run_to_commit(self, command: str = "", started: float | None = None) -> BackfillReport:
        """Execute every unit, make the one logical commit, record lineage; on failure record that."""
        started = time.perf_counter() if started is None else started
        ns, table = split_qualified(self.state.table.identifier)
        try:
            self.execute()
            new_state = self.commit(ns, table, command)
        except BaseException as e:
            self.fail(e)
            raise
        self.report.status = "succeeded"
        self.report.logical_version = new_state.version
        self.record(new_state)
        # after the lineage and run rows: they are part of what a backfill call costs
        self.report.seconds = round(time.perf_counter() - started, 3)
        self.report.phases = self.clock.as_dict(time.perf_counter() - started)
        return self.report

    # ---- execution -----------------------------------------------------------------------
    def working_state(self) -> FamilyState:
        """The pinned version plus this run's own staged outputs (earlier stages feed later ones)."""
        heads = {self.bindings[f].table_key: w.staged_snapshot_id for f, w in self.writers.items()
                 if w.staged_snapshot_id is not None}
        heads.update({group.key: w.staged_snapshot_id for group, w in self.nulled})
        tables = tuple(t.model_copy(update={"snapshot_id": heads[t.key], "emptied": False}) if t.key in heads else t
                       for t in self.state.tables)
        return self.state.model_copy(update={"tables": tables})

    def units(self, stage: Stage) -> Iterator[Unit]:
        """The units of ``stage`` still to do (finished ones were found on the staging branches)."""
        for batch in stage.batches:
            todo = tuple(f for f in stage.features
                         if batch in self.plan.features[f].batches and unit_label(f, batch) not in self.done)
            if not todo:
                continue
            retry = None
            if self.plan.only_ids:
                retry = frozenset().union(*(self.plan.only_ids.get((f, batch), set()) for f in todo))
            yield Unit(stage, batch, todo, retry)

    def execute(self) -> None:
        try:
            self.nulled = self._null_recomputed_in_groups()
            self._execute_stages()
        finally:
            # an executor may keep one worker across stages (LocalExecutor): it ends here, also on failure
            end = getattr(self.executor, "end_run", None)  # optional: not part of UnitExecutor
            if end is not None:
                with self.clock.span("worker_stop_s"):
                    end(self)

    def _execute_stages(self) -> None:
        for stage in self.plan.stages:
            opened = False
            bar = progress_bar(self.progress, unit="batch", total=len(stage.batches), label=
                       f"stage {stage.index}/{len(self.plan.stages)} [{stage.engine}] {','.join(stage.features)}")
            try:
                finished = 0
                for unit in self.units(stage):
                    if not opened:
                        self.executor.open_stage(self, stage)
                        opened = True
                    self.run_unit(unit, bar)
                    finished += 1
                    if bar is not None:
                        bar.update(1)
                if bar is not None:
                    bar.update(len(stage.batches) - finished)  # units resumed from checkpoints
            finally:
                if opened:
                    with self.clock.span("worker_stop_s"):
                        self.executor.close_stage(self, stage)
                if bar is not None:
                    bar.close()

    def run_unit(self, unit: Unit, bar: Any = None) -> None:
        """The per-unit hook: the engine computes ``unit`` and ends it with :meth:`finish_unit`."""
        if not self.plan.only_ids:  # a stale unit's old rows are replaced, not added to
            for f in unit.features:
                if unit.batch in self.plan.features[f].stale:
                    self.writers[f].clear_batches([unit.batch])
        self.executor.run_unit(self, unit, bar)

    def finish_unit(self, unit: Unit, stats: dict[str, UnitStats], error_rows: list[dict[str, Any]],
                    checkpoint: Callable[[str, dict[str, str]], None] | None = None) -> None:
        """Record the unit's failed records, enforce the budget, checkpoint each feature.

        Failed records are appended BEFORE the budget check: a run stopped by its
        budget commits nothing, but its records stay readable (``omni errors --run``).
        ``checkpoint(feature, properties)`` is the engine's own (default: the staged
        writer commits its pending files as the labelled snapshot).
        """
        if error_rows:
            self._append_system_rows(system_tables.ERRORS, error_rows, "errors_append_s")
        self.unfinished = stats
        self.check_inputs_not_all_null(unit, stats)
        self.check_budget(stats)
        for f in unit.features:
            s = stats[f]
            s.finished_ms = now_ms()
            s.attempt = self.attempt
            props = checkpoint_properties(s)
            with self.clock.span("checkpoint_s"):
                if checkpoint is None:
                    self.writers[f].checkpoint(props)
                else:
                    checkpoint(f, props)
            self.stats[(f, unit.batch)] = s
            self.done.add(unit_label(f, unit.batch))
        self.unfinished = {}

    def error_row(self, feature: str, record_id: str, batch: str, exception_class: str, message: str,
                  traceback_digest: str, failed_at: datetime | None = None) -> dict[str, Any]:
        """A row of ``omni_sys.errors`` for a record ``feature`` failed on in this run."""
        return error_row(
            run_id=self.report.run_id, logical_table=self.state.table.identifier, feature=feature,
            version=self.defs[feature].version, record_id=record_id, batch=batch, exception_class=exception_class,
            message=message, traceback_digest=traceback_digest, attempt=self.attempt,
            failed_at=failed_at or datetime.now(timezone.utc))

    def append(self, f: str, data: pa.Table) -> None:
        """Write rows (keys + physical output columns) of feature ``f`` to its staged table."""
        d = self.defs[f]
        schema = pa.schema(key_arrow_fields() + [
            pa.field(physical_column_name(o.name), arrow_type(o.type)) for o in d.outputs])
        with self.clock.span("write_s"):
            self.writers[f].write(data.select(schema.names).cast(schema))

    def _append_system_rows(self, name: str, rows: list[dict[str, Any]], phase: str) -> None:
        """One append to ``omni_sys.<name>`` timed as ``phase``; its occasional compaction as a phase of its own."""
        with self.clock.span(phase):
            table = system_tables.append_rows(self.store.catalog, name, rows, compact=False)
        if table is not None:
            with self.clock.span("system_compaction_s"):
                system_tables.maybe_compact(table)

    def check_inputs_not_all_null(self, unit: Unit, stats: dict[str, UnitStats]) -> None:
        """Fail a unit that computed no row because a computed input was NULL everywhere.

        Only looked into when a unit wrote nothing on a batch that has rows (one read of
        the input column then); a retry's few records are not judged.
        """
        batch = self.state.batch(unit.batch)
        if self.plan.only_ids or batch is None or not batch.rows:
            return
        for f in unit.features:
            s = stats[f]
            if s.rows or s.errors or s.reused:
                continue
            d = self.defs[f]
            for path in d.inputs:
                if path.startswith(RAW_STAGE + ".") or self._has_value(path, unit.batch):
                    continue
                producer = self.working_state().producer_of(path)
                source = (f"its producer {producer.key} wrote no value for this batch" if producer is not None
                          else "no feature produces it")
                raise NullInputsError(
                    f"feature {f}, batch {unit.batch}: every value of {path} was NULL on all {batch.rows} rows "
                    f"({source}), so every value of {', '.join(d.output_names)} would be NULL; nothing committed")

    def _has_value(self, path: str, batch: str) -> bool:
        """Whether logical column ``path`` holds a non-NULL value on ``batch``, as this run sees it."""
        for part in iter_logical_slices(self.store.catalog, self.working_state(), [path], batch):
            if part.column(path).null_count < part.num_rows:
                return True
        return False

    def check_budget(self, stats: dict[str, UnitStats]) -> None:
        if self.max_error_ratio is None:
            return
        for s in list(stats.values()):
            total = s.rows + s.errors
            if total and s.errors / total > self.max_error_ratio:
                raise ErrorBudgetExceededError(
                    f"feature {s.feature} failed on {s.errors} of {total} records of batch {s.batch} "
                    f"({s.errors / total:.3%} > {self.max_error_ratio:.3%}); nothing committed. The failed "
                    f"records are kept: see '{failed_run_hint(self.state.table.identifier, self.report.run_id)}'")

    # ---- commit and records ------------------------------------------------------------------
    def commit(self, ns: str, table: str, command: str) -> FamilyState:
        """The ONE logical commit: pin every staged table, mark the units computed.

        Built against ``latest`` on every attempt: a unit a concurrent run committed
        first (same feature version, same batch) is dropped from this commit - its files
        are left out of the rebase and it is not marked twice - so a lost race never
        appends a second copy of the winner's rows.
        """
        self.executor.before_commit(self)
        writers = {f: w for f, w in self.writers.items() if w.staged_snapshot_id is not None}
        nulled = self.nulled

        def updates(latest: FamilyState):
            ups: list[Any] = []
            for f, w in writers.items():
                binding = self.bindings[f]
                if not self.plan.only_ids:  # a retry adds values to units that are already computed
                    # a unit that changed since this run's base was committed by a concurrent run
                    mine = {b for g, b in self.stats if g == f}
                    taken = {b for b in mine if latest.computed_unit(f, binding.version, b) is not None
                             and latest.computed_unit(f, binding.version, b)
                             != self.state.computed_unit(f, binding.version, b)}
                    if {(f, b) for b in taken} - self.raced:
                        self.raced |= {(f, b) for b in taken}
                        w.rebase_excluding(latest.physical_table(binding.table_key).snapshot_id, taken)
                ups.append(PinSnapshot(binding.table_key, w.staged_snapshot_id, w.base_snapshot_id))
            # recomputed batches leave their column groups in this same commit (group_values.null_recomputed)
            ups += [PinSnapshot(group.key, w.staged_snapshot_id, group.snapshot_id) for group, w in nulled]
            if self.plan.only_ids:  # values added to computed units: their signatures must move
                return tuple(ups) + (MarkRetried(tuple(
                    (f, self.bindings[f].version, b, s.rows) for (f, b), s in sorted(self.stats.items()))),)
            ups.append(MarkComputed(tuple(
                ComputedUnit(feature=f, version=self.bindings[f].version, batch=b, run_id=self.report.run_id,
                             rows=s.rows, errors=s.errors, reused=s.reused, logical_version=latest.version + 1,
                             data_version=self.plan.features[f].data_version,
                             upstream=tuple(self.plan.features[f].upstream))
                for (f, b), s in sorted(self.stats.items()) if (f, b) not in self.raced)))
            return tuple(ups)

        summary = {"omni.run-id": self.report.run_id,
                   "omni.features": ",".join(sorted({f for f, _ in self.stats}))}
        with self.clock.span("commit_s"):
            new_state = self.store.commit(ns, table, updates, operation="backfill", command=command,
                                          summary=lambda _: summary,
                                          staged=list(writers.values()) + [w for _, w in nulled])
        self.report.raced_units = sorted(unit_label(f, b) for f, b in self.raced)
        return new_state

    def _null_recomputed_in_groups(self) -> list[tuple[Any, Any]]:
        """Group tables rewritten so the old values of this plan's recomputed (stale) units leave them.

        Done before the first unit: a later stage reading a recomputed column must not
        find the old value in the group (COALESCE would return it for a record that now
        fails). Redone from the pinned version on every attempt (a resumed run included).
        """
        if self.plan.only_ids:
            return []
        recomputed: dict[str, set[str]] = {}
        for f, fp in self.plan.features.items():
            batches = set(fp.stale) & set(fp.batches)
            if batches and f in self.bindings:
                for out in self.bindings[f].outputs:
                    recomputed.setdefault(out, set()).update(batches)
        if not recomputed:
            return []
        with self.clock.span("write_s"):
            return null_recomputed(self.store, self.state, recomputed, self.report.run_id)

    def fail(self, error: BaseException) -> None:
        self.report.status = "failed"
        if not isinstance(error, StagingBranchTakenError):  # else the branches are the other run's too
            abandon_all(w for _, w in self.nulled)  # cheap to redo from the pinned version on a rerun
        if isinstance(error, (FeatureDefinitionError, ErrorBudgetExceededError, NullInputsError)):
            abandon_all(self.writers.values())  # a definition bug, budget breach or NULL input: do not resume this work
            self.abandoned = True
        rerun = self.reruns_after(error)
        self._record_run("failed", None, (RERUN_MARK if rerun else "") + f"{type(error).__name__}: {error}")

    def record(self, new_state: FamilyState) -> None:
        kept = {k: s for k, s in self.stats.items() if k not in self.raced}  # the winner's lineage stands
        self.report.units = [asdict(s) for s in kept.values()]
        self.report.rows = sum(s.rows for s in kept.values())
        self.report.errors = sum(s.errors for s in kept.values())
        self.report.reused = sum(s.reused for s in kept.values())
        lineage = []
        for (f, batch), s in sorted(kept.items()):
            d, binding = self.defs[f], self.bindings[f]
            inputs = []
            input_tables = {}
            for path in d.inputs:
                producer = new_state.producer_of(path)
                inputs.append({"column": path, "producer": producer.key if producer else "ingest"})
                for pc in new_state.physical_columns_of(path):
                    t = new_state.physical_table(pc.table)
                    input_tables[t.identifier] = t.snapshot_id
            out_table = new_state.physical_table(binding.table_key)
            for out in d.outputs:
                lineage.append({
                    "run_id": self.report.run_id, "logical_table": new_state.table.identifier,
                    "output_column": out.name, "feature": d.name, "version": d.version, "batch": batch,
                    "input_columns": json.dumps(inputs), "input_snapshots": json.dumps(input_tables, sort_keys=True),
                    "output_table": out_table.identifier, "output_snapshot": out_table.snapshot_id,
                    "logical_version": new_state.version, "code_hash": binding.code_hash,
                    "engine": f"{self.report.engine}:{self.plan.features[f].engine}",
                    "started_at": _ts(s.started_ms or self.started_ms), "finished_at": _ts(s.finished_ms or now_ms()),
                    "rows": s.rows, "errors": s.errors, "reused": s.reused})
        self._append_system_rows(system_tables.LINEAGE, lineage, "lineage_append_s")
        message = (f"units committed first by a concurrent run, not appended again: "
                   f"{', '.join(self.report.raced_units)}" if self.raced else "")
        self._record_run("succeeded", new_state.version, message)

    def _tuning_record(self) -> dict[str, Any]:
        """The tuning, plus the UDFs' own seconds where the engine clocks them: the next run's rate."""
        compute = self.clock.seconds.get("compute_s")
        return {**self.tuning, **({"compute_s": round(compute, 3)} if compute else {})}

    def _record_run(self, status: str, version: int | None, message: str) -> None:
        # what this attempt computed: not the units it resumed from an earlier attempt's
        # checkpoints, and, when it failed, the unit it failed in too
        kept = [s for k, s in self.stats.items() if k not in self.raced and not s.resumed]
        if status != "succeeded":
            kept += list(self.unfinished.values())
        # which attempt computed each unit whose work stands (resumed ones keep theirs): the units
        # whose error rows 'omni errors' shows by default
        units = {} if self.abandoned else {unit_label(f, b): s.attempt for (f, b), s in sorted(self.stats.items())
                                           if (f, b) not in self.raced}
        plan = {**self.report.plan, ATTEMPT_KEY: self.attempt, UNITS_KEY: units}
        if self.tuning:
            plan["tuning"] = self._tuning_record()
        try:
            self._append_system_rows(system_tables.RUNS, [{
                "run_id": self.report.run_id, "logical_table": self.state.table.identifier,
                "features": ",".join(sorted(self.bindings)), "batches": ",".join(self.plan.batches),
                "engine": self.report.engine, "status": status,
                "plan": json.dumps(plan, default=str),
                "rows": sum(s.rows for s in kept), "errors": sum(s.errors for s in kept),
                "reused": sum(s.reused for s in kept), "logical_version": version,
                "started_at": _ts(self.started_ms), "finished_at": datetime.now(timezone.utc),
                "message": message}], "runs_append_s")
        except Exception:  # noqa: BLE001 - never hide the run's own outcome behind bookkeeping
            if status == "succeeded":
                raise


# ---- the local engine ------------------------------------------------------------------------
class LocalExecutor:
    """The local engine's units: pyarrow reads, UDFs in a worker process (or inline).

    ``isolation="process"`` runs a stage's UDFs in a child process (a crashing UDF
    cannot take the caller down); ``"inline"`` runs them here (tests, debugging).
    """

    name = "local"

    def __init__(self, isolation: str = "process", shrink: int = 1, slice_rows: int = SLICE_ROWS):
        if isolation not in ("process", "inline"):
            raise ConfigError(f"unknown isolation {isolation!r}: use 'process' or 'inline'")
        self.isolation = isolation
        #: batch sizes and slice rows are divided by this (history, hints, or a rerun after
        #: the worker ran out of memory: see :mod:`omni_iceberg.backfill.tuning`)
        self.shrink = shrink
        self.slice_rows = slice_rows
        self._worker: Any = None
        self._stage: Stage | None = None

    def open_stage(self, run: BackfillRun, stage: Stage) -> None:
        # Called only for a stage with units to do. The worker starts now, not at the first
        # compute: the child imports while this process reads the first unit's inputs.
        with run.clock.span("worker_start_s"):
            defs = [run.defs[f] if self.shrink == 1 else
                    run.defs[f].model_copy(update={"batch_size": max(1, run.defs[f].batch_size // self.shrink)})
                    for f in stage.features]
            specs = {d.name: get_udf(d.udf) for d in defs}
            label = f"stage {stage.index}"
            if self._worker is not None:  # kept from the previous stage (see close_stage)
                self._worker.load(defs, specs, label)
            elif self.isolation == "process":
                self._worker = ProcessWorker(defs, specs, label)
            else:
                self._worker = InlineWorker(defs, specs)
        self._stage = stage

    def close_stage(self, run: BackfillRun, stage: Stage) -> None:
        """End the stage's worker, or keep it for the next stage when neither holds a model.

        A process costs its start (interpreter, imports) every time; a worker whose
        UDFs are plain functions is as good as new for the next stage. One that
        loaded a model (class UDFs, GPU stages) ends, so its memory goes back.
        """
        if self._worker is None:
            return
        nxt = self._next_stage(run, stage)
        if nxt is not None and not holds_models(self._worker.definitions, self._worker.specs):
            nxt_defs = [run.defs[f] for f in nxt.features]
            if not holds_models(nxt_defs, {d.name: get_udf(d.udf) for d in nxt_defs}):
                return
        self.end_run(run)

    @staticmethod
    def _next_stage(run: BackfillRun, stage: Stage) -> Stage | None:
        stages = run.plan.stages
        at = next((i for i, s in enumerate(stages) if s is stage), None)
        return stages[at + 1] if at is not None and at + 1 < len(stages) else None

    def end_run(self, run: BackfillRun) -> None:
        """End the worker if one is running (the run calls this when it ends, failed or not)."""
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.close()

    def before_commit(self, run: BackfillRun) -> None:
        pass  # every write went through the staged writers

    def run_unit(self, run: BackfillRun, unit: Unit, bar: Any) -> None:
        todo, batch = list(unit.features), unit.batch
        inputs = list(dict.fromkeys(p for f in todo for p in run.defs[f].inputs))
        stats = {f: UnitStats(f, batch, started_ms=now_ms()) for f in todo}
        error_rows: list[dict[str, Any]] = []
        clock = run.clock
        parts = _rebatch(iter_logical_slices(run.store.catalog, run.working_state(), inputs, batch),
                         max(1, self.slice_rows // self.shrink), unit.retry_ids)
        for part in clock.timed_iter("read_s", parts):
            with clock.span("read_s"):
                computed_here = self._reuse(run, todo, part)
            with clock.span("worker_start_s"):
                self._worker.wait_ready()
            with clock.span("compute_s"):
                result: SliceResult = self._worker.compute(todo, part)
            for f in todo:
                self._write(run, f, result, computed_here.get(f), stats[f], batch, error_rows)
            if bar is not None:
                bar.set_postfix_str(f"batch {batch}: {sum(s.rows for s in stats.values())} rows")
        run.finish_unit(unit, stats, error_rows)

    @staticmethod
    def _reuse(run: BackfillRun, todo: list[str], part: pa.Table) -> dict[str, pa.Table]:
        """Copy values computed elsewhere for the same content; those rows are then not recomputed."""
        if not run.reuse.active:
            return {}
        found: dict[str, pa.Table] = {}
        for f in todo:
            cols = [physical_column_name(o.name) for o in run.defs[f].outputs]
            hit = run.reuse.lookup(f, part.column(ID_COLUMN).combine_chunks(), cols)
            if hit is not None and hit.num_rows:
                found[f] = hit
        return found

    @staticmethod
    def _write(run: BackfillRun, f: str, result: SliceResult, reused: pa.Table | None, s: UnitStats, batch: str,
               error_rows: list) -> None:
        out = result.outputs.get(f)
        s.filtered += result.filtered.get(f, 0)
        if reused is not None:
            reused_ids = set(reused.column(ID_COLUMN).to_pylist())
            copy = pa.Table.from_arrays(
                [reused.column(ID_COLUMN), pa.array([batch] * reused.num_rows, pa.string())]
                + [reused.column(c) for c in reused.column_names[1:]],
                names=[ID_COLUMN, BATCH_COLUMN] + reused.column_names[1:])
            if out is not None:
                keep = pa.array([i not in reused_ids for i in out.column(ID_COLUMN).to_pylist()])
                out = out.filter(keep)
            s.reused += copy.num_rows
            run.append(f, copy)
        failures = [(rid, fail) for rid, fail in result.failures.get(f, [])
                    if reused is None or rid not in reused_ids]
        if out is not None and out.num_rows:
            run.append(f, out)
            s.rows += out.num_rows
        s.rows += 0 if reused is None else reused.num_rows
        s.errors += len(failures)
        now = datetime.now(timezone.utc)
        for rid, fail in failures:
            error_rows.append(run.error_row(f, rid, batch, fail.exception_class, fail.message,
                                            fail.traceback_digest, now))


class LocalBackfill:
    """The local backfill engine (registered as ``local`` in :mod:`omni_iceberg.engines`).

    >>> from omni_iceberg.engines import backfill_engine
    >>> backfill_engine("local") is LocalBackfill
    True
    """

    name = "local"

    def __init__(self, ctx: OmniContext, *, isolation: str = "process", **_ignored: Any):
        # other engines' options (a Spark master) mean nothing here: the registry passes them to every engine
        self.ctx = ctx
        self.isolation = isolation

    def __enter__(self) -> LocalBackfill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def run(self, name: str, features: list[str], batches: list[str] | None = None, *, dry_run: bool = False,
            max_error_ratio: float | None = None, progress: bool | None = None, command: str = "",
            has_gpu: bool | None = None, plan: BackfillPlan | None = None, engine_reason: str = "",
            ) -> BackfillReport:
        """Plan (unless ``plan`` is given) and run on this machine; ONE logical commit."""
        started = time.perf_counter()
        clock = PhaseClock()
        with clock.span("plan_s"):
            ns, table = split_qualified(name)
            state = self.ctx.store.load(ns, table)
            plan = plan or plan_backfill(state, features, batches, has_gpu)
            report = start_report(state, plan, self.name, engine_reason)
        if plan.empty or dry_run:
            report.status = "nothing to do" if plan.empty else "dry run"
            return report
        with clock.span("plan_s"):
            tuning = tune_run(self.ctx, state, plan, definitions_of(state), slice_rows=SLICE_ROWS,
                              max_shrink=MAX_MEMORY_SHRINK)
        report.tuning.extend(tuning.reasons)
        if tuning.parallelism > 1:
            report.tuning.append(f"parallelism {tuning.parallelism} asked: the local engine runs one worker per "
                                 "stage (the Spark engine uses it)")
        shrink = tuning.shrink
        while True:
            executor = LocalExecutor(self.isolation, shrink, slice_rows=tuning.slice_rows)
            run = BackfillRun(self.ctx, state, plan, report, executor,
                              max_error_ratio=max_error_ratio, progress=progress, clock=clock)
            run.tuning = {**tuning.to_dict(), "shrink": shrink}
            # killed for memory: the same plan again (finished units resume from their
            # checkpoints) with batches and slices halved, not the same failure again
            run.reruns_after = lambda e, shrink=shrink: (isinstance(e, WorkerCrashedError) and e.out_of_memory
                                                         and shrink < MAX_MEMORY_SHRINK
                                                         and self.isolation == "process")
            try:
                return run.run_to_commit(command, started)
            except WorkerCrashedError as e:
                if not run.reruns_after(e):
                    raise
                shrink *= 2
                what = str(e).split(";", 1)[0]  # which worker, killed while doing what
                report.tuning.append(f"{what} (out of memory?): rerun with batch sizes and slices divided by "
                                     f"{shrink}, finished units kept")
                print(f"warning: {report.tuning[-1]}", file=sys.stderr)

    def retry_failed(self, name: str, features: list[str], error_classes: list[str] | None = None,
                     **kwargs: Any) -> BackfillReport:
        """Recompute only the failed records of ``features`` (optionally some exception classes)."""
        from omni_iceberg.backfill.planner import plan_retry

        ns, table = split_qualified(name)
        state = self.ctx.store.load(ns, table)
        failed, attempt = unresolved_errors(self.ctx, state, features, error_classes)
        plan = plan_retry(state, features, failed, attempt, kwargs.pop("has_gpu", None))
        return self.run(name, features, plan=plan, **kwargs)


def _rebatch(slices, size: int, only_ids: set[str] | None):
    """Regroup per-bucket slices into parts of about ``size`` rows: small buckets would starve
    batch UDFs (a model wants full batches), and big ones are cut so memory stays bounded."""
    buffer: list[pa.Table] = []
    rows = 0
    for data in slices:
        if only_ids is not None:  # a retry run recomputes only the records that failed
            data = data.filter(pa.array([i in only_ids for i in data.column(ID_COLUMN).to_pylist()], pa.bool_()))
        for start in range(0, data.num_rows, size):
            piece = data.slice(start, size)
            buffer.append(piece)
            rows += piece.num_rows
            if rows >= size:
                yield pa.concat_tables(buffer).combine_chunks()
                buffer, rows = [], 0
    if rows:
        yield pa.concat_tables(buffer).combine_chunks()
