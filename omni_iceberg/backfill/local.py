"""The local backfill engine: a plan's units computed on this machine.

The run itself is the core's (:func:`omni_iceberg.backfill.run.run_plan`); this engine
supplies execution only. Per stage, one worker holds every feature of the stage
(models load once). Per batch of the stage, the inputs are read once, slice by slice
(:func:`~omni_iceberg.read.reader.iter_logical_slices`: a bucket, or an id range of a
bucket larger than a slice of ``OMNI_MEMORY_LIMIT_MB``), from the exact snapshots the run
sees: the pinned logical version plus the outputs of earlier stages of this same run.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.errors import ConfigError
from omni_iceberg.backfill.planner import Stage
from omni_iceberg.backfill.protocol import BackfillReport, Unit, UnitStats
from omni_iceberg.backfill.run import SLICE_ROWS, BackfillRun, now_ms
from omni_iceberg.backfill.tuning import Tuning
from omni_iceberg.backfill.worker import InlineWorker, ProcessWorker, SliceResult, WorkerCrashedError, holds_models
from omni_iceberg.features.registry import physical_column_name
from omni_iceberg.features.placement import device_of_route
from omni_iceberg.features.udf import get_udf
from omni_iceberg.read.reader import iter_logical_slices

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


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
            label, device = f"stage {stage.index}", device_of_route(stage.engine)  # the plan's device, to the UDFs
            if self._worker is not None:  # kept from the previous stage (see close_stage)
                self._worker.load(defs, specs, label, device)
            elif self.isolation == "process":
                self._worker = ProcessWorker(defs, specs, label, device)
            else:
                self._worker = InlineWorker(defs, specs, device)
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
    """The local engine (``backfill`` capability ``local`` of :mod:`omni_iceberg.engines`): UDFs in a
    worker process on this machine (``isolation="process"``), or in this one (``"inline"``)."""

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

    def has_gpu(self) -> bool | None:
        return None  # this machine's: what the planner probes

    def start(self, report: BackfillReport, tuning: Tuning) -> None:
        if tuning.parallelism > 1:
            report.tuning.append(f"parallelism {tuning.parallelism} asked: the local engine runs one worker per "
                                 "stage (the Spark engine uses it)")

    def executor(self, tuning: Tuning, shrink: int) -> LocalExecutor:
        return LocalExecutor(self.isolation, shrink, slice_rows=tuning.slice_rows)

    def reruns_smaller(self, error: BaseException) -> bool:
        # a worker process killed for memory; inline, the kill would have taken this process too
        return isinstance(error, WorkerCrashedError) and error.out_of_memory and self.isolation == "process"


def register() -> None:
    """Register the local engine's ``backfill`` capability (the core calls this before it looks one up)."""
    from omni_iceberg.engines import register as offer

    offer("backfill", "local", LocalBackfill)


def _rebatch(slices, size: int, only_ids: set[str] | None):
    """Regroup read slices into parts of about ``size`` rows: small buckets would starve
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
