"""Execute a backfill plan on the local engine and commit it as ONE logical version.

Per stage, one worker holds every feature of the stage (models load once). Per batch
of the stage, the inputs are read once, bucket by bucket (bounded memory), from the
exact snapshots the run sees: the pinned logical version plus the outputs of earlier
stages of this same run. Each (stage, batch) unit ends with a checkpoint - one
snapshot per feature table on the run's staging branch - so a killed run resumes
where it stopped. Record failures go to ``omni_sys.errors``; lineage and the run
report go to ``omni_sys.lineage`` and ``omni_sys.runs``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from catalog_ext import system_tables
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, split_qualified
from catalog_ext.family import ComputedUnit, FamilyState
from catalog_ext.physical import StagedWrite, arrow_type, key_arrow_fields
from catalog_ext.updates import MarkComputed, PinSnapshot
from omni_iceberg.backfill.bookkeeping import UNIT_PROPERTY, checkpoint_properties, error_row
from omni_iceberg.backfill.planner import BackfillPlan, definitions_of, plan_backfill
from omni_iceberg.backfill.reuse import ReuseIndex
from omni_iceberg.backfill.worker import InlineWorker, ProcessWorker, SliceResult
from catalog_ext.errors import OmniError
from omni_iceberg.features.registry import physical_column_name
from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError
from omni_iceberg.features.udf import get_udf
from omni_iceberg.ui.progress import progress_bar
from omni_iceberg.explore.reader import iter_logical_slices

SLICE_ROWS = int(os.environ.get("OMNI_SLICE_ROWS", "8192"))


class ErrorBudgetExceededError(OmniError):
    """More records failed than the run allows; nothing was committed."""

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def unresolved_errors(omni: Any, state: FamilyState, features: list[str], error_classes: list[str] | None = None
                      ) -> tuple[dict[tuple[str, str], set[str]], int]:
    """Failed records of the current feature versions that still have no value; and the next attempt number."""
    errors = system_tables.read_rows(omni.catalog, system_tables.ERRORS,
                                     f"logical_table == '{state.table.identifier}'").to_pylist()
    failed: dict[tuple[str, str], set[str]] = {}
    attempt = 1
    for f in features:
        binding = state.feature(f)
        if binding is None:
            raise FeatureDefinitionError(f"no feature {f!r} is registered on {state.table.identifier}")
        rows = [r for r in errors if r["feature"] == f and r["version"] == binding.version
                and (not error_classes or r["exception_class"] in error_classes)]
        if not rows:
            continue
        attempt = max(attempt, max(r["attempt"] for r in rows) + 1)
        table = state.physical_table(binding.table_key)
        have = set(omni.catalog.load_table(table.identifier).scan(
            snapshot_id=table.snapshot_id, selected_fields=(ID_COLUMN,)).to_arrow().column(0).to_pylist())
        for r in rows:
            if r[ID_COLUMN] not in have:
                failed.setdefault((f, r["batch"]), set()).add(r[ID_COLUMN])
    return failed, attempt


def retry_failed(omni: Any, name: str, features: list[str], *, error_classes: list[str] | None = None,
                 **kwargs: Any) -> BackfillReport:
    """Recompute only the failed records of ``features`` (optionally only some exception classes)."""
    from omni_iceberg.backfill.planner import plan_retry

    ns, table = split_qualified(name)
    state = omni.store.load(ns, table)
    failed, attempt = unresolved_errors(omni, state, features, error_classes)
    plan = plan_retry(state, features, failed, attempt, kwargs.pop("has_gpu", None))
    return backfill(omni, name, features, plan=plan, **kwargs)


def backfill(omni: Any, name: str, features: list[str], batches: list[str] | None = None, *,
             dry_run: bool = False, isolation: str = "process", max_error_ratio: float | None = None,
             progress: bool | None = None, command: str = "", has_gpu: bool | None = None,
             plan: BackfillPlan | None = None) -> BackfillReport:
    """Plan and (unless ``dry_run``) run a backfill on the local engine."""
    started = time.perf_counter()
    ns, table = split_qualified(name)
    store = omni.store
    state = store.load(ns, table)
    plan = plan or plan_backfill(state, features, batches, has_gpu)
    report = BackfillReport(logical_table=state.table.identifier, plan=plan.to_dict())
    if plan.empty or dry_run:
        report.status = "nothing to do" if plan.empty else "dry run"
        return report
    report.run_id = ("rt-" if plan.only_ids else "bf-") + plan.fingerprint()
    run = _Run(omni, store, state, plan, report, isolation, max_error_ratio, progress)
    return run.run_to_commit(ns, table, command, started)


class _Run:
    def __init__(self, omni, store, state: FamilyState, plan: BackfillPlan, report: BackfillReport,
                 isolation: str, max_error_ratio: float | None, progress: bool | None):
        self.omni, self.store, self.state, self.plan, self.report = omni, store, state, plan, report
        self.isolation = isolation
        self.max_error_ratio = max_error_ratio
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.started_ms = _now_ms()
        self.defs: dict[str, FeatureDefinition] = definitions_of(state)
        self.bindings = {f: state.feature(f) for f in plan.features if plan.features[f].batches}
        self.writers: dict[str, StagedWrite] = {}
        self.stats: dict[tuple[str, str], UnitStats] = {}
        self.done: set[str] = set()
        for f, binding in self.bindings.items():
            t = state.physical_table(binding.table_key)
            w = StagedWrite(store.catalog, t.identifier, t.snapshot_id, report.run_id,
                            {"omni.operation": "backfill", "omni.run-id": report.run_id, "omni.feature": binding.key})
            for label, props in w.attach(UNIT_PROPERTY).items():
                fname, batch = label.split("/", 1)
                self.done.add(label)
                self.stats[(fname, batch)] = UnitStats(
                    fname, batch, int(props.get("omni.unit-rows", 0)), int(props.get("omni.unit-errors", 0)),
                    int(props.get("omni.unit-reused", 0)), 0, int(props.get("omni.unit-started", 0)),
                    int(props.get("omni.unit-finished", 0)), resumed=True)
            self.writers[f] = w
        report.resumed_units = len(self.done)
        self.reuse = ReuseIndex.build(store, state, list(self.bindings.values()))

    def run_to_commit(self, ns: str, table: str, command: str, started: float) -> BackfillReport:
        """Execute every unit, make the one logical commit, record lineage; on failure record that."""
        try:
            self.execute()
            new_state = self.commit(ns, table, command)
        except BaseException as e:
            self.fail(e)
            raise
        self.report.status = "succeeded"
        self.report.logical_version = new_state.version
        self.report.seconds = round(time.perf_counter() - started, 3)
        self.record(new_state)
        return self.report

    # ---- execution -----------------------------------------------------------------------
    def _working_state(self) -> FamilyState:
        """The pinned version plus this run's own staged outputs (earlier stages feed later ones)."""
        heads = {self.bindings[f].table_key: w.staged_snapshot_id for f, w in self.writers.items()
                 if w.staged_snapshot_id is not None}
        tables = tuple(t.model_copy(update={"snapshot_id": heads[t.key]}) if t.key in heads else t
                       for t in self.state.tables)
        return self.state.model_copy(update={"tables": tables})

    def _worker(self, stage):
        defs = [self.defs[f] for f in stage.features]
        specs = {d.name: get_udf(d.udf) for d in defs}
        if self.isolation == "process":
            return ProcessWorker(defs, specs, f"stage {stage.index}")
        return InlineWorker(defs, specs)

    def execute(self) -> None:
        for stage in self.plan.stages:
            worker = None
            bar = progress_bar(self.progress, unit="batch", total=len(stage.batches), label=
                       f"stage {stage.index}/{len(self.plan.stages)} [{stage.engine}] {','.join(stage.features)}")
            try:
                for batch in stage.batches:
                    todo = [f for f in stage.features
                            if batch in self.plan.features[f].batches and f"{f}/{batch}" not in self.done]
                    if todo:
                        worker = worker or self._worker(stage)
                        self._run_unit(worker, todo, batch, bar)
                    if bar is not None:
                        bar.update(1)
            finally:
                if worker is not None:
                    worker.close()
                if bar is not None:
                    bar.close()

    def _run_unit(self, worker, todo: list[str], batch: str, bar) -> None:
        inputs = list(dict.fromkeys(p for f in todo for p in self.defs[f].inputs))
        stats = {f: UnitStats(f, batch, started_ms=_now_ms()) for f in todo}
        error_rows: list[dict[str, Any]] = []
        retry_ids = set().union(*(self.plan.only_ids.get((f, batch), set()) for f in todo)) if self.plan.only_ids else None
        for part in _rebatch(iter_logical_slices(self.store.catalog, self._working_state(), inputs, batch),
                             SLICE_ROWS, retry_ids):
            computed_here = self._reuse(todo, part, stats)
            result: SliceResult = worker.compute(todo, part)
            for f in todo:
                self._write(f, result, computed_here.get(f), stats[f], batch, error_rows)
            if bar is not None:
                bar.set_postfix_str(f"batch {batch}: {sum(s.rows for s in stats.values())} rows")
        self._check_budget(stats)
        system_tables.append_rows(self.store.catalog, system_tables.ERRORS, error_rows)
        for f in todo:
            s = stats[f]
            s.finished_ms = _now_ms()
            self.writers[f].checkpoint(checkpoint_properties(s))
            self.stats[(f, batch)] = s
            self.done.add(f"{f}/{batch}")

    def _reuse(self, todo: list[str], part: pa.Table, stats) -> dict[str, pa.Table]:
        """Copy values computed elsewhere for the same content; those rows are then not recomputed."""
        if not self.reuse.active:
            return {}
        found: dict[str, pa.Table] = {}
        for f in todo:
            cols = [physical_column_name(o.name) for o in self.defs[f].outputs]
            hit = self.reuse.lookup(f, part.column(ID_COLUMN).combine_chunks(), cols)
            if hit is not None and hit.num_rows:
                found[f] = hit
        return found

    def _write(self, f: str, result: SliceResult, reused: pa.Table | None, s: UnitStats, batch: str,
               error_rows: list) -> None:
        d = self.defs[f]
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
            self._append(f, copy)
        failures = [(rid, fail) for rid, fail in result.failures.get(f, [])
                    if reused is None or rid not in reused_ids]
        if out is not None and out.num_rows:
            self._append(f, out)
            s.rows += out.num_rows
        s.rows += 0 if reused is None else reused.num_rows
        s.errors += len(failures)
        now = datetime.now(timezone.utc)
        for rid, fail in failures:
            error_rows.append(error_row(
                run_id=self.report.run_id, logical_table=self.state.table.identifier, feature=d.name,
                version=d.version, record_id=rid, batch=batch, exception_class=fail.exception_class,
                message=fail.message, traceback_digest=fail.traceback_digest, attempt=self.plan.attempt,
                failed_at=now))

    def _append(self, f: str, data: pa.Table) -> None:
        d = self.defs[f]
        schema = pa.schema(key_arrow_fields() + [
            pa.field(physical_column_name(o.name), arrow_type(o.type)) for o in d.outputs])
        self.writers[f].write(data.select(schema.names).cast(schema))

    def _check_budget(self, stats: dict[str, UnitStats]) -> None:
        if self.max_error_ratio is None:
            return
        for s in list(stats.values()):
            total = s.rows + s.errors
            if total and s.errors / total > self.max_error_ratio:
                raise ErrorBudgetExceededError(
                    f"feature {s.feature} failed on {s.errors} of {total} records of batch {s.batch} "
                    f"({s.errors / total:.3%} > {self.max_error_ratio:.3%}); nothing committed. "
                    f"See 'omni errors {self.state.table.identifier}'")

    # ---- commit and records ------------------------------------------------------------------
    def commit(self, ns: str, table: str, command: str) -> FamilyState:
        writers = {f: w for f, w in self.writers.items() if w.staged_snapshot_id is not None}

        def updates(latest: FamilyState):
            ups: list[Any] = [PinSnapshot(self.bindings[f].table_key, w.staged_snapshot_id, w.base_snapshot_id)
                              for f, w in writers.items()]
            if self.plan.only_ids:  # a retry adds values to units that are already computed
                return tuple(ups)
            ups.append(MarkComputed(tuple(
                ComputedUnit(feature=f, version=self.bindings[f].version, batch=b, run_id=self.report.run_id,
                             rows=s.rows, errors=s.errors, reused=s.reused, logical_version=latest.version + 1)
                for (f, b), s in sorted(self.stats.items()))))
            return tuple(ups)

        summary = {"omni.run-id": self.report.run_id,
                   "omni.features": ",".join(sorted({f for f, _ in self.stats}))}
        return self.store.commit(ns, table, updates, operation="backfill", command=command,
                                 summary=lambda _: summary, staged=list(writers.values()))

    def fail(self, error: BaseException) -> None:
        self.report.status = "failed"
        if isinstance(error, (FeatureDefinitionError, ErrorBudgetExceededError)):
            for w in self.writers.values():  # a definition bug or budget breach: do not resume this work
                try:
                    w.abandon()
                except Exception:  # noqa: BLE001
                    pass
        self._record_run("failed", None, f"{type(error).__name__}: {error}")

    def record(self, new_state: FamilyState) -> None:
        self.report.units = [asdict(s) for s in self.stats.values()]
        self.report.rows = sum(s.rows for s in self.stats.values())
        self.report.errors = sum(s.errors for s in self.stats.values())
        self.report.reused = sum(s.reused for s in self.stats.values())
        lineage = []
        for (f, batch), s in sorted(self.stats.items()):
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
                    "started_at": _ts(s.started_ms or self.started_ms), "finished_at": _ts(s.finished_ms or _now_ms()),
                    "rows": s.rows, "errors": s.errors, "reused": s.reused})
        system_tables.append_rows(self.store.catalog, system_tables.LINEAGE, lineage)
        self._record_run("succeeded", new_state.version, "")

    def _record_run(self, status: str, version: int | None, message: str) -> None:
        try:
            system_tables.append_rows(self.store.catalog, system_tables.RUNS, [{
                "run_id": self.report.run_id, "logical_table": self.state.table.identifier,
                "features": ",".join(sorted(self.bindings)), "batches": ",".join(self.plan.batches),
                "engine": self.report.engine, "status": status, "plan": json.dumps(self.report.plan, default=str),
                "rows": sum(s.rows for s in self.stats.values()), "errors": sum(s.errors for s in self.stats.values()),
                "reused": sum(s.reused for s in self.stats.values()), "logical_version": version,
                "started_at": _ts(self.started_ms), "finished_at": datetime.now(timezone.utc), "message": message}])
        except Exception:  # noqa: BLE001 - never hide the run's own outcome behind bookkeeping
            if status == "succeeded":
                raise


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
