"""Spark's ``rewrite`` capability: governance's rewrites as Spark jobs on the staging branch.

Governance plans, chooses the engine and makes the ONE logical commit
(:func:`governance.rewrite.run_rewrite`); :class:`SparkRewrite` writes each table's
files: a compaction's chosen partitions (:mod:`spark_udfs.compaction`), a re-bucketing's
whole table (:mod:`spark_udfs.rebucket`), a materialized copy joined from its sources
(:mod:`spark_udfs.materialize`), a column group joined from its members (:mod:`spark_udfs.regroup`). It also finds a family's orphan files with
Iceberg's ``remove_orphan_files`` (:mod:`spark_udfs.orphans`).

Importing this module imports no pyspark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from catalog_ext.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from catalog_ext.family import FamilyState
    from catalog_ext.staging import SweepReport
    from omni_iceberg.context import OmniContext
    from governance.rewrite import RewriteJob
    from spark_udfs.engine import SparkSessionOwner


class SparkRewrite:
    """Runs :class:`~governance.rewrite.RewriteJob` values on the session ``session`` gives.

    ``owner``, when given, holds that session (started on first use) and is closed with this
    engine; without it the session is the caller's. Without a session the engine can still
    say what it refuses (:meth:`orphan_sweep_blocker`).
    """

    name = "spark"
    operations = frozenset({"compact", "rebucket", "materialize", "regroup"})

    def __init__(self, session: Callable[[], SparkSession] | None = None, owner: SparkSessionOwner | None = None):
        self._session = session
        self._owner = owner

    def session(self) -> SparkSession:
        """The session the rewrites run on (started by the first call when this engine owns it)."""
        if self._session is None:
            raise ConfigError("the Spark rewrite engine was given no session: build it with session= or with the "
                              "catalog to start one on (omni_iceberg.engines.lookup('rewrite', 'spark')(ctx, ...))")
        return self._session()

    def __enter__(self) -> SparkRewrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owner is not None:
            self._owner.close()

    def rewrite(self, job: RewriteJob, bar: Any) -> None:
        from spark_udfs import compaction, materialize, rebucket, regroup

        properties = {**job.properties, "omni.engine": self.name}
        if job.operation == "compact":
            compaction.rewrite_partitions_on_spark(self.session(), job.store.catalog.name, job.writer, job.snapshot_id,
                                                   list(job.partition_files), properties)
        elif job.operation == "rebucket":
            rebucket.rebucket_table_on_spark(self.session(), job.store.catalog.name, job.writer, job.snapshot_id,
                                             job.target, properties)
        elif job.operation == "materialize":
            materialize.materialize_on_spark(self.session(), job.store.catalog.name, job, properties)
        elif job.operation == "regroup":
            regroup.regroup_on_spark(self.session(), job.store.catalog.name, job, properties)
        else:
            raise ConfigError(f"the Spark engine cannot run a {job.operation!r} rewrite "
                              f"(it runs: {', '.join(sorted(self.operations))})")
        if bar is not None:
            bar.update(job.work)

    def sweep_orphans(self, catalog: Any, state: FamilyState, *, older_than_s: float, dry_run: bool) -> SweepReport:
        """:func:`spark_udfs.orphans.sweep_on_spark`: Iceberg's procedure finds the files, omni deletes them."""
        from spark_udfs.orphans import sweep_on_spark

        return sweep_on_spark(self.session(), catalog, state, older_than_s=older_than_s, dry_run=dry_run)

    def orphan_sweep_blocker(self, older_than_s: float) -> str | None:
        from spark_udfs.orphans import spark_grace_blocker

        return spark_grace_blocker(older_than_s)


def spark_rewrite(ctx: OmniContext | None = None, *, session: Callable[[], SparkSession] | None = None,
                  master: str | None = None, spark: SparkSession | None = None, **options: Any) -> SparkRewrite:
    """The factory the plugin registers: on ``session()`` (a caller's session, borrowed), or on a
    session of its own for ``ctx``'s catalog - ``spark``, or one started on ``master`` - stopped on
    close; with neither, an engine that only answers what it refuses."""
    if session is not None or ctx is None:
        return SparkRewrite(session)
    from spark_udfs.engine import SparkSessionOwner

    owner = SparkSessionOwner(ctx.config, spark=spark, master=master, **options)
    return SparkRewrite(lambda: owner.spark, owner)
