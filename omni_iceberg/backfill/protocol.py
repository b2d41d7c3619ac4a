"""The engine protocol of a backfill: a run, its units, and one commit.

A :class:`~omni_iceberg.backfill.engine.BackfillRun` owns everything engines share -
staging writers, resume from checkpoints, the error budget, the ONE logical commit,
lineage and run rows. It cuts the plan into :class:`Unit` values (one stage, one
batch, the features of the stage still to compute there) and hands each to a
:class:`UnitExecutor`, the only part an engine implements:

* the local engine's executor reads the unit's rows with pyarrow and computes them in
  a worker process (:mod:`omni_iceberg.backfill.worker`);
* Spark's (``spark_udfs.engine``) reads them with Spark and runs one fused
  ``mapInArrow`` (or ``pandas_udf``) job.

An executor computes the unit, writes its values through ``run.writers`` (or its own
writer onto the same staging branch) and ends it with :meth:`BackfillRun.finish_unit`,
which enforces the error budget, records failed records and checkpoints the unit.

A :class:`BackfillEngine` is what :mod:`omni_iceberg.engines` hands out by name: it
plans (with its own GPU view), builds the run with its executor, and runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from omni_iceberg.backfill.engine import BackfillReport, BackfillRun
    from omni_iceberg.backfill.planner import Stage


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


@runtime_checkable
class UnitExecutor(Protocol):
    """How one engine computes units; :class:`BackfillRun` calls it stage by stage."""

    #: the engine's name, recorded in the report, lineage and ``omni_sys.runs``
    name: str

    def open_stage(self, run: BackfillRun, stage: Stage) -> None:
        """Prepare a stage (start workers, load nothing yet); called before its first unit."""

    def run_unit(self, run: BackfillRun, unit: Unit, bar: Any) -> None:
        """Compute ``unit``, write its values, then call ``run.finish_unit``."""

    def close_stage(self, run: BackfillRun, stage: Stage) -> None:
        """Release what :meth:`open_stage` started; called even when a unit failed."""

    def before_commit(self, run: BackfillRun) -> None:
        """Last chance to sync writers with what the engine committed on the staging branches."""


@runtime_checkable
class BackfillEngine(Protocol):
    """A backfill engine as :func:`omni_iceberg.engines.backfill_engine` builds it: ``factory(omni, **options)``.

    Use it as a context manager: :meth:`close` releases what it started (a Spark session).
    """

    def run(self, name: str, features: list[str], batches: list[str] | None = None, *,
            dry_run: bool = False, max_error_ratio: float | None = None, progress: bool | None = None,
            command: str = "", has_gpu: bool | None = None, plan: Any = None,
            engine_reason: str = "") -> BackfillReport:
        """Plan (unless ``plan``) and run; ONE logical commit."""

    def retry_failed(self, name: str, features: list[str], error_classes: list[str] | None = None,
                     **kwargs: Any) -> BackfillReport:
        """Recompute only the records ``features`` failed on."""

    def close(self) -> None:
        """Release the engine's resources."""

    def __enter__(self) -> BackfillEngine: ...

    def __exit__(self, *exc: object) -> None: ...


__all__ = ["BackfillEngine", "Unit", "UnitExecutor"]
