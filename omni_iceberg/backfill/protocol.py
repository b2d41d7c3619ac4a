"""The engine protocol of a backfill: what the core asks of an engine, and what it hands over.

The core plans once per command, tunes once and commits once
(:func:`omni_iceberg.backfill.run.run_plan`); a :class:`BackfillEngine` - what the
registry's ``backfill`` capability builds (:mod:`omni_iceberg.engines`) - supplies
execution only, and never plans. The shared :class:`~omni_iceberg.backfill.run.BackfillRun`
owns staging writers, resume from checkpoints, the error budget, the ONE logical
commit, lineage and run rows. It cuts the plan into :class:`Unit` values (one stage,
one batch, the features of the stage still to compute there) and hands each to the
engine's :class:`UnitExecutor`:

* the local engine's executor reads the unit's rows with pyarrow and computes them in
  a worker process (:mod:`omni_iceberg.backfill.local`, :mod:`omni_iceberg.backfill.worker`);
* Spark's (``spark_udfs.engine``) reads them with Spark and runs one fused
  ``mapInArrow`` (or ``pandas_udf``) job.

An executor computes the unit, writes its values through ``run.writers`` (or its own
writer onto the same staging branch) and ends it with :meth:`BackfillRun.finish_unit`,
which enforces the error budget, records failed records and checkpoints the unit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from catalog_ext.family import FamilyState
    from catalog_ext.physical import StagedWrite
    from catalog_ext.store import FamilyStore
    from omni_iceberg.backfill.phases import PhaseClock
    from omni_iceberg.backfill.planner import BackfillPlan, Stage
    from omni_iceberg.backfill.reuse import ReuseIndex
    from omni_iceberg.backfill.tuning import Tuning
    from omni_iceberg.features.spec import FeatureDefinition


@dataclass(frozen=True)
class Unit:
    """One (stage, batch) of work: ``features`` of ``stage`` on batch ``batch``.

    ``retry_ids`` is set for a retry run: only those records are recomputed.
    """

    stage: Stage
    batch: str
    features: tuple[str, ...]
    retry_ids: frozenset[str] | None = None

    @property
    def labels(self) -> list[str]:
        """The checkpoint labels (``feature/batch``) this unit finishes."""
        return [f"{f}/{self.batch}" for f in self.features]


@dataclass
class UnitStats:
    """What one feature did on one batch: the counts its checkpoint records."""

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
    """What a backfill did, or would do: the plan, its units and counts, the ONE commit's version."""

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


class Run(Protocol):
    """The run a unit executes in, as an executor sees it (:class:`~omni_iceberg.backfill.run.BackfillRun`).

    What an executor reads - the plan, the pinned state and the one its earlier stages
    left, definitions, writers, values to reuse - and the calls that record its work.
    """

    plan: BackfillPlan
    state: FamilyState
    store: FamilyStore
    report: BackfillReport
    #: current definition of every planned feature
    defs: dict[str, FeatureDefinition]
    #: the staged writer of each feature's table (its staging branch)
    writers: dict[str, StagedWrite]
    reuse: ReuseIndex
    #: phase timings; an executor adds its own (worker start, read, compute)
    clock: PhaseClock

    def working_state(self) -> FamilyState:
        """The pinned version plus this run's own staged outputs (earlier stages feed later ones)."""

    def append(self, feature: str, data: pa.Table) -> None:
        """Write rows (keys and physical output columns) of ``feature`` to its staged table."""

    def error_row(self, feature: str, record_id: str, batch: str, exception_class: str, message: str,
                  traceback_digest: str, failed_at: datetime | None = None) -> dict[str, Any]:
        """A row of ``omni_sys.errors`` for a record ``feature`` failed on in this run."""

    def finish_unit(self, unit: Unit, stats: dict[str, UnitStats], error_rows: list[dict[str, Any]],
                    checkpoint: Callable[[str, dict[str, str]], None] | None = None) -> None:
        """End ``unit``: record its failed records, enforce the budget, checkpoint each feature."""


@runtime_checkable
class UnitExecutor(Protocol):
    """How one engine computes units; the run calls it stage by stage."""

    #: the engine's name, recorded in the report, lineage and ``omni_sys.runs``
    name: str

    def open_stage(self, run: Run, stage: Stage) -> None:
        """Prepare a stage (start workers, load nothing yet); called before its first unit."""

    def run_unit(self, run: Run, unit: Unit, bar: Any) -> None:
        """Compute ``unit``, write its values, then call ``run.finish_unit``."""

    def close_stage(self, run: Run, stage: Stage) -> None:
        """Release what :meth:`open_stage` started; called even when a unit failed."""

    def before_commit(self, run: Run) -> None:
        """Last chance to sync writers with what the engine committed on the staging branches."""


@runtime_checkable
class BackfillEngine(Protocol):
    """The ``backfill`` capability of an engine: ``factory(ctx, **options)`` in :mod:`omni_iceberg.engines`.

    It receives a finished plan and supplies execution: :func:`~omni_iceberg.backfill.run.run_plan`
    asks it for its GPU view, lets it note what it runs with, and takes one executor per
    attempt. Use it as a context manager: :meth:`close` releases what it started (a Spark session).
    """

    #: the engine's name, recorded in the report, lineage and ``omni_sys.runs``
    name: str

    def has_gpu(self) -> bool | None:
        """Whether the engine's workers have a GPU (routes follow it); None: this machine's, as planned."""

    def start(self, report: BackfillReport, tuning: Tuning) -> None:
        """Once per run, before its first attempt: what the engine runs with, noted on ``report``."""

    def executor(self, tuning: Tuning, shrink: int) -> UnitExecutor:
        """The executor of one attempt, its batch sizes and slices divided by ``shrink``."""

    def reruns_smaller(self, error: BaseException) -> bool:
        """Whether an attempt that failed with ``error`` ran out of memory: the run is then tried
        again with sizes halved (finished units kept)."""

    def close(self) -> None:
        """Release the engine's resources."""

    def __enter__(self) -> BackfillEngine: ...

    def __exit__(self, *exc: object) -> None: ...


__all__ = ["BackfillEngine", "BackfillReport", "Run", "Unit", "UnitExecutor", "UnitStats"]
