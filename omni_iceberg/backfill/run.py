"""Run a finished backfill plan and commit it as ONE logical version: the machinery every engine shares.

The core plans once per command (:mod:`omni_iceberg.backfill.planner`, handed down by
:func:`omni_iceberg.backfill.choose.run_backfill`), tunes once and commits once; an
engine (:class:`~omni_iceberg.backfill.protocol.BackfillEngine`) supplies only the
execution of units. :func:`run_plan` is the run: placement for the engine's GPUs,
tuning, attempts, and :class:`BackfillRun` - staging writers, resume from
checkpoints, the error budget, the ONE logical commit, lineage and run rows - which
hands each unit to the engine's :class:`~omni_iceberg.backfill.protocol.UnitExecutor`.

Each (stage, batch) unit ends with a checkpoint - one snapshot per feature table on
the run's staging branch - so a killed run resumes where it stopped. Record failures go
to ``omni_sys.errors``; lineage and the run report go to ``omni_sys.lineage`` and
``omni_sys.runs``. Where the run's time went is in ``BackfillReport.phases`` (see
:mod:`omni_iceberg.backfill.phases`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_ext import settings, system_tables
from catalog_ext.contract import RAW_STAGE, split_qualified
from catalog_ext.family import ComputedUnit, FamilyState
from catalog_ext.group_values import null_recomputed
from catalog_ext.staging import sweep_stale_branches
from catalog_ext.physical import StagedWrite, StagingBranchTakenError, abandon_all, arrow_type, key_arrow_fields
from catalog_ext.updates import MarkComputed, MarkRetried, PinSnapshot
from catalog_ext.errors import CommitConflictError, OmniError
from omni_iceberg.backfill.bookkeeping import (UNIT_ATTEMPT_PROPERTY, UNIT_PROPERTY, checkpoint_properties,
                                               error_row, unit_label)
from omni_iceberg.backfill.errors import failed_run_hint
from omni_iceberg.backfill.phases import PhaseClock
from omni_iceberg.backfill.planner import BackfillPlan, Stage, definitions_of, place
from omni_iceberg.backfill.protocol import BackfillEngine, BackfillReport, Unit, UnitExecutor, UnitStats
from omni_iceberg.backfill.reuse import ReuseIndex
from omni_iceberg.backfill.run_stats import ATTEMPT_KEY, RERUN_MARK, UNITS_KEY, next_attempt
from omni_iceberg.backfill.tuning import tune_run
from omni_iceberg.features.registry import physical_column_name
from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError
from omni_iceberg.read.reader import iter_logical_slices
from omni_iceberg.ui.progress import progress_bar

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


def now_ms() -> int:
    """Milliseconds since the epoch: the unit of checkpoint and run timestamps."""
    return int(time.time() * 1000)


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


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
        if state.version != plan.base_version:
            # the commit tells a concurrent run's units from this run's by comparing the latest
            # version with ``state``: a state newer than the plan already holds what another run
            # committed meanwhile, so this run's copies of those units would look new and be
            # published on top of that run's rows (see run_plan)
            raise ValueError(f"the plan of {plan.logical_table} was made on version {plan.base_version}, but the "
                             f"run was given version {state.version}: a run starts from its plan's version")
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
            # attach drops, rather than adopts, a branch staged under another id-bucket count
            # (a run that lost to a re-bucketing and was killed before it dropped it)
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
        if isinstance(error, (FeatureDefinitionError, ErrorBudgetExceededError, NullInputsError)) or (
                isinstance(error, CommitConflictError) and not self._resumable_after_refused_commit()):
            # a definition bug, budget breach or NULL input: do not resume this work; a refused
            # commit whose staging no rerun can resume: remove it now (branches, files, index
            # entries) rather than leave it pending for the stale-branch sweep's grace period
            abandon_all(self.writers.values())
            self.abandoned = True
        rerun = self.reruns_after(error)
        self._record_run("failed", None, (RERUN_MARK if rerun else "") + f"{type(error).__name__}: {error}")

    def _resumable_after_refused_commit(self) -> bool:
        """Whether a rerun of this plan could resume what this run staged, now that the logical
        commit was refused (a concurrent writer changed the family in a way the retries could not
        absorb).

        A rerun plans on the latest version, adopts a table's branch only where the branch starts
        at that version's pin (``StagedWrite.attach``), and trusts each checkpoint's unit label.
        That holds only when nothing under this run moved: every table still pinned where the
        run started and its branch still ending at a labelled checkpoint, and the same id-bucket
        count. A commit retry that rebased (or re-staged) a branch re-commits its files as one
        unlabelled snapshot on the winner's: a rerun would keep those files and compute the same
        units again beside them (b2's html_parser rows twice, tests/test_faults.py). A
        re-bucketing leaves the files partitioned by the old count, which no version of the new
        count may pin. One table that cannot be resumed makes the whole run's staging go: the
        other tables' units were computed from it.
        """
        ns, table = split_qualified(self.state.table.identifier)
        try:
            latest = self.store.load(ns, table)
            if latest.table.bucket_count != self.state.table.bucket_count:
                return False
            pins = {t.key: t.snapshot_id for t in latest.tables}
            for f, w in self.writers.items():
                key = self.bindings[f].table_key
                if not (key in pins and pins[key] == w.base_snapshot_id == self.state.physical_table(key).snapshot_id):
                    return False
                ice = self.store.catalog.load_table(w.identifier)
                ref = ice.metadata.refs.get(w.branch)
                if ref is not None and ref.snapshot_id != w.base_snapshot_id and not _labelled(
                        ice.snapshot_by_id(ref.snapshot_id)):
                    return False
        except Exception:  # noqa: BLE001 - cannot tell: keep it; the stale-branch sweep judges it later
            return True
        return True

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


def _labelled(snapshot: Any) -> bool:
    """Whether ``snapshot`` is a unit's checkpoint (not a rebase's or a re-stage's re-commit)."""
    return snapshot is not None and UNIT_PROPERTY in (snapshot.summary.additional_properties
                                                      if snapshot.summary else {})


def run_plan(ctx: OmniContext, engine: BackfillEngine, state: FamilyState, plan: BackfillPlan, *,
             max_error_ratio: float | None = None, progress: bool | None = None, command: str = "",
             engine_reason: str = "") -> BackfillReport:
    """Run the finished ``plan`` on ``engine``: ONE logical commit on ``state``'s table.

    Nothing is planned here. A plan routed for this machine (made without ``has_gpu``)
    is placed for the engine's workers when they see GPUs differently (a Spark
    cluster's executors): the same units, stages regrouped by route. The run is tuned
    once (:func:`~omni_iceberg.backfill.tuning.tune_run`), then attempted: an attempt
    the engine says ran out of memory (``engine.reruns_smaller``) runs again with batch
    sizes and slices halved, its finished units resumed from their checkpoints, down to
    1/:data:`MAX_MEMORY_SHRINK`.
    """
    started = time.perf_counter()
    if state.version != plan.base_version:
        # The plan was made on an earlier version: 'omni backfill' and Omni.backfill plan, print
        # the plan and load the UDFs before run_backfill loads the state again. A concurrent
        # backfill that committed a shared ancestor in between left that newer state holding the
        # ancestor's unit, which this plan computes too. Run on it, this run staged its copy on top
        # of the other run's snapshot, and the commit (which finds a concurrent run's units by
        # comparing the latest version with the run's state) saw nothing taken: both copies were
        # published - every row twice in the ancestor's table and in every feature computed from
        # this run's copy. On its plan's version, the commit finds the other run's unit and leaves
        # this run's copy out (BackfillRun.commit).
        state = ctx.store.load(*split_qualified(state.table.identifier), version=plan.base_version)
    if not plan.empty and plan.has_gpu is None:
        view = engine.has_gpu()
        if view is not None:
            plan = place(plan, view)
    report = start_report(state, plan, engine.name, engine_reason or f"requested --engine {engine.name}")
    if plan.empty:
        report.status = "nothing to do"
        return report
    clock = PhaseClock()
    with clock.span("plan_s"):
        tuning = tune_run(ctx, state, plan, definitions_of(state), slice_rows=SLICE_ROWS, max_shrink=MAX_MEMORY_SHRINK)
    report.tuning.extend(tuning.reasons)
    engine.start(report, tuning)
    command = command or (f"backfill {state.table.identifier} --features {','.join(plan.requested)}"
                          + ("" if engine.name == "local" else f" --engine {engine.name}"))
    shrink = tuning.shrink
    while True:
        run = BackfillRun(ctx, state, plan, report, engine.executor(tuning, shrink),
                          max_error_ratio=max_error_ratio, progress=progress, clock=clock)
        run.tuning = {**tuning.to_dict(), "shrink": shrink}
        # killed for memory: the same plan again (finished units resume from their
        # checkpoints) with batches and slices halved, not the same failure again
        run.reruns_after = lambda e, shrink=shrink: shrink < MAX_MEMORY_SHRINK and engine.reruns_smaller(e)
        try:
            return run.run_to_commit(command, started)
        except Exception as e:
            if not run.reruns_after(e):
                raise
            shrink *= 2
            what = str(e).split(";", 1)[0]  # which worker, killed while doing what
            report.tuning.append(f"{what} (out of memory?): rerun with batch sizes and slices divided by "
                                 f"{shrink}, finished units kept")
            print(f"warning: {report.tuning[-1]}", file=sys.stderr)
