"""The governance verbs: what ``omni compact``, ``regroup``, ``accelerate``, ``maintain`` ... do.

Each takes the catalog's :class:`~omni_iceberg.context.OmniContext`;
:class:`~omni_iceberg.api.Omni` only delegates to them (its methods carry the user
documentation), and the CLI renders what they return. The work itself lives in the
modules of this package, which take the family store; a verb adds what a user's call
needs around it - the query log flushed before reading it, a Spark session borrowed
for a rewrite that goes to Spark.
"""

from __future__ import annotations

from typing import Any, Callable

from catalog_ext.errors import ConfigError
from governance.advise import Advice
from governance.advise import advise as _advise
from governance.column_groups import regroup as _regroup
from governance.column_groups import split_columns as _split_columns
from governance.compaction import CompactionPlan
from governance.compaction import compact as _compact
from governance.compaction import plan_compaction as _plan_compaction
from governance.coread import coread_regroup as _coread_regroup
from governance.drop_batch import DropBatchPlan
from governance.drop_batch import drop_batch as _drop_batch
from governance.drop_batch import plan_drop_batch as _plan_drop_batch
from governance.maintenance import DEFAULT_KEEP_LAST, MaintainReport
from governance.maintenance import maintain as _maintain
from governance.materialize import MaterializePlan
from governance.materialize import materialize as _materialize
from governance.materialize import plan_materialization as _plan_materialization
from governance.materialize import refresh_materializations as _refresh_materializations
from governance.rebucket import rebucket as _rebucket
from governance.retention import RetentionPolicy, RetentionReport, apply_retention
from governance.rewrite import rewrite_engine, rewrite_unavailable
from omni_iceberg.context import OmniContext
from omni_iceberg.explore.query_log import flush_query_log
from omni_iceberg.hot.sync import set_hot_columns, sync


def plan_compaction(ctx: OmniContext, name: str, min_files: int = 2) -> CompactionPlan:
    """Which partitions of which physical tables :func:`compact` would rewrite (nothing runs)."""
    return _plan_compaction(ctx.store, name, min_files)


def compact(ctx: OmniContext, name: str, min_files: int = 2, dry_run: bool = False, progress: bool | None = None,
            *, engine: str = "local", spark_master: str | None = None, spark: Any = None) -> dict[str, Any]:
    """Merge the small files of partitions holding ``min_files`` of them; one logical commit."""
    return with_spark(ctx, engine, spark_master, spark, lambda session, blocker: _compact(
        ctx.store, name, min_files, dry_run=dry_run, progress=progress, engine=engine, spark=session,
        spark_blocker=blocker))


def regroup(ctx: OmniContext, name: str, *, tables: list[str] | None = None, dry_run: bool = False,
            progress: bool | None = None, command: str = "", engine: str = "local",
            spark_master: str | None = None, spark: Any = None) -> dict[str, Any]:
    """Merge narrow feature tables into column groups (:mod:`governance.column_groups`)."""
    return with_spark(ctx, engine, spark_master, spark, lambda session, blocker: _regroup(
        ctx.store, name, tables=tables, dry_run=dry_run, progress=progress, command=command, engine=engine,
        spark=session, spark_blocker=blocker))


def rebucket(ctx: OmniContext, name: str, buckets: int | None = None, *, dry_run: bool = False,
             progress: bool | None = None, command: str = "", engine: str = "local",
             spark_master: str | None = None, spark: Any = None) -> dict[str, Any]:
    """Change the family's id-bucket count by rewriting every physical table (:mod:`governance.rebucket`)."""
    return with_spark(ctx, engine, spark_master, spark, lambda session, blocker: _rebucket(
        ctx.store, name, buckets, dry_run=dry_run, progress=progress, command=command, engine=engine,
        spark=session, spark_blocker=blocker))


def coread_regroup(ctx: OmniContext, name: str, *, dry_run: bool = False, progress: bool | None = None,
                   command: str = "") -> dict[str, Any]:
    """Move the columns logged reads join across column groups into one table (:mod:`governance.coread`)."""
    flush_query_log(ctx)  # this process's queries count too
    return _coread_regroup(ctx.store, name, dry_run=dry_run, progress=progress, command=command)


def split_columns(ctx: OmniContext, name: str, columns: list[str], *, dry_run: bool = False,
                  progress: bool | None = None, command: str = "") -> dict[str, Any]:
    """Move ``columns`` out of their column groups into one table of their own."""
    return _split_columns(ctx.store, name, columns, dry_run=dry_run, progress=progress, command=command)


def accelerate(ctx: OmniContext, name: str, *, materialize: list[str] | None = None, refresh: bool = False,
               hot: list[str] | None = None, drop_hot: bool = False, sync: bool = False,
               sync_on_commit: bool = False, dry_run: bool = False, progress: bool | None = None,
               engine: str = "local", spark_master: str | None = None) -> Any:
    """One of: materialize columns, refresh stale copies, set or drop hot columns, sync the hot store."""
    chosen = [materialize is not None, refresh, hot is not None, drop_hot, sync]
    if sum(chosen) != 1:
        raise ValueError("accelerate: pass exactly one of materialize=[columns], refresh=True, hot=[columns], "
                         "drop_hot=True or sync=True")
    if engine != "local" and materialize is None and not refresh:
        raise ConfigError(f"engine {engine!r}: only a materialization (or its refresh) runs on another engine; "
                          "hot columns load in this process")
    if refresh:
        return refresh_materializations(ctx, name, dry_run=dry_run, progress=progress, engine=engine,
                                        spark_master=spark_master)
    if hot is not None or drop_hot:
        return set_hot_columns(ctx, name, hot, sync_on_commit=sync_on_commit, progress=progress)
    if sync:
        return sync_hot(ctx, name, dry_run=dry_run, progress=progress)
    return _materialize_on(ctx, name, materialize, dry_run=dry_run, progress=progress, engine=engine,
                           spark_master=spark_master)


def sync_hot(ctx: OmniContext, name: str, *, dry_run: bool = False, progress: bool | None = None) -> dict[str, Any]:
    """Load into the hot store the batches whose hot values changed since its last sync."""
    return sync(ctx, name, dry_run=dry_run, progress=progress)


def materialize(ctx: OmniContext, name: str, columns: list[str], *, dry_run: bool = False,
                progress: bool | None = None, command: str = "", engine: str = "local",
                spark_master: str | None = None, spark: Any = None) -> dict[str, Any]:
    """Pre-join ``columns`` into one physical table (:mod:`governance.materialize`)."""
    return _materialize_on(ctx, name, columns, dry_run=dry_run, progress=progress, command=command, engine=engine,
                           spark_master=spark_master, spark=spark)


def _materialize_on(ctx: OmniContext, name: str, columns: list[str], *, dry_run: bool = False,
                    progress: bool | None = None, command: str = "", engine: str = "local",
                    spark_master: str | None = None, spark: Any = None) -> dict[str, Any]:
    _plan_materialization(ctx.store, name, columns)  # a bad column fails here, before any Spark starts
    return with_spark(ctx, engine, spark_master, spark, lambda session, blocker: _materialize(
        ctx.store, name, columns, dry_run=dry_run, progress=progress, command=command, engine=engine,
        spark=session, spark_blocker=blocker))


def plan_materialization(ctx: OmniContext, name: str, columns: list[str]) -> MaterializePlan:
    """What :func:`materialize` would do."""
    return _plan_materialization(ctx.store, name, columns)


def refresh_materializations(ctx: OmniContext, name: str, *, dry_run: bool = False,
                             progress: bool | None = None, engine: str = "local",
                             spark_master: str | None = None, spark: Any = None) -> list[dict[str, Any]]:
    """Bring every stale materialization of ``name`` back to the latest version."""
    return with_spark(ctx, engine, spark_master, spark, lambda session, blocker: _refresh_materializations(
        ctx.store, name, dry_run=dry_run, progress=progress, engine=engine, spark=session, spark_blocker=blocker))


def drop_batch(ctx: OmniContext, name: str, batch: str, *, dry_run: bool = False, progress: bool | None = None,
               command: str = "") -> dict[str, Any]:
    """Remove batch ``batch`` from every physical table and the id index, in one logical commit."""
    return _drop_batch(ctx.store, name, batch, dry_run=dry_run, progress=progress, command=command)


def plan_drop_batch(ctx: OmniContext, name: str, batch: str) -> DropBatchPlan:
    """The files :func:`drop_batch` would delete or rewrite."""
    return _plan_drop_batch(ctx.store, name, batch)


def expire(ctx: OmniContext, name: str, keep_last: int, *, keep_tagged: bool = True, min_age_s: float | None = None,
           dry_run: bool = False, progress: bool | None = None, command: str = "") -> RetentionReport:
    """Retention alone: keep the last ``keep_last`` versions (plus tagged and manifest-pinned ones)."""
    policy = RetentionPolicy(keep_last=keep_last, keep_tagged=keep_tagged,
                             **({"min_age_s": min_age_s} if min_age_s is not None else {}))
    return apply_retention(ctx.store, name, policy, dry_run=dry_run, progress=progress, command=command)


def maintain(ctx: OmniContext, name: str, keep_last: int | None = None, *, min_age_s: float | None = None,
             compact_min_files: int | None = None, dry_run: bool = False, progress: bool | None = None,
             command: str = "", engine: str = "local", spark_master: str | None = None) -> MaintainReport:
    """Every due maintenance task of ``name`` (:func:`governance.maintenance.maintain`)."""
    flush_query_log(ctx)  # this process's queries count for the co-read groups too
    policy = RetentionPolicy(keep_last=keep_last or DEFAULT_KEEP_LAST,
                             **({"min_age_s": min_age_s} if min_age_s is not None else {}))

    def run(spark: Any = None, blocker: str | None = None) -> MaintainReport:
        return _maintain(ctx.store, name, policy=policy, compact_min_files=compact_min_files, dry_run=dry_run,
                         progress=progress, command=command, engine=engine, spark=spark, spark_blocker=blocker)

    return with_spark(ctx, engine, spark_master, None, run)


def advise(ctx: OmniContext, name: str, *, apply: bool = False, progress: bool | None = None) -> Advice:
    """What the query log says to accelerate, with benefits and storage costs (:mod:`governance.advise`)."""
    return _advise(ctx, name, apply=apply, progress=progress)


def with_spark(ctx: OmniContext, engine: str, master: str | None, session: Any, run: Callable[..., Any]) -> Any:
    """``run(spark=<session factory or None>, blocker=<why Spark cannot run or None>)`` for ``engine``.

    The Spark engine's ``rewrite`` capability owns starting, reusing and stopping a session
    on this catalog; the rewrites borrow it, started only if the plan goes to Spark.
    """
    blocker = rewrite_unavailable("spark", ctx.config) if engine == "auto" and session is None else None
    if engine == "local" or blocker:
        return run(None, blocker)
    with rewrite_engine("spark", ctx, master=master, spark=session) as spark_engine:
        return run(spark_engine.session, None)


__all__ = ["accelerate", "advise", "coread_regroup", "compact", "drop_batch", "expire", "maintain", "materialize",
           "plan_compaction", "plan_drop_batch", "plan_materialization", "rebucket", "refresh_materializations",
           "regroup", "set_hot_columns", "split_columns", "sync_hot", "with_spark"]
