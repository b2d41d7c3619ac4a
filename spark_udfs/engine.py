"""Backfill on Spark: same plan, same values, same bookkeeping as the local engine.

:class:`SparkBackfill` is the Spark engine's ``backfill`` capability: it receives the
core's finished plan and supplies execution only. The run is the core's
(:func:`omni_iceberg.backfill.run.run_plan`: placement, tuning, staging branches, resume
from checkpoints, error budget, the ONE logical commit, lineage and run rows); only the
per-unit work differs - :class:`SparkExecutor`, the Spark side of
:mod:`omni_iceberg.backfill.protocol`:

1. read the unit's inputs with Spark from the exact snapshots the run sees (the
   pinned version plus this run's earlier stages), one physical table per input
   group, joined on the keys - the family is co-partitioned, so the join is a
   storage-partitioned join with no shuffle;
2. ONE fused pass (:mod:`spark_udfs.arrow_stage`, or :mod:`spark_udfs.pandas_stage`
   when every feature of the stage is a pandas UDF) runs every feature of the unit on
   the same batches with the local engine's ``compute_slice``; its tagged
   output is persisted once and split into per-feature rows, error rows and counts;
3. error budget, then ``omni_sys.errors``, then one Iceberg append per feature to the
   run's staging branch with Spark's writer, labelled ``omni.unit`` - the checkpoint
   a resumed run finds. A Spark task that dies is retried by Spark; only the
   successful attempt's output is kept, so no row is written twice.

The final logical commit is ``BackfillRun.commit``: a lost race re-commits the same
files on the winner's snapshot, minus the units the winner already committed.

Example (what ``omni backfill web --features quality_score --engine spark`` runs)::

    from omni_iceberg.backfill.choose import run_backfill
    report = run_backfill(omni.context, "web", ["quality_score"], engine="spark",
                          spark_master="spark://127.0.0.1:7077")
"""

from __future__ import annotations

from catalog_ext import settings
from catalog_ext.redact import redact

import contextlib
import math
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.family import FamilyState
from catalog_ext.physical import StagedWrite, StagingBranchTakenError
from catalog_ext.types import to_spark
from omni_iceberg.backfill import bookkeeping
from omni_iceberg.backfill.planner import Stage
from omni_iceberg.backfill.protocol import BackfillReport, Unit, UnitStats
from omni_iceberg.backfill.run import SLICE_ROWS, BackfillRun, now_ms
from omni_iceberg.backfill.tuning import Tuning
from omni_iceberg.backfill.worker import WorkerCrashedError
from catalog_ext.errors import ConfigError, OmniError
from omni_iceberg.features.registry import physical_column_name
from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError
from omni_iceberg.features.udf import get_udf
from spark_udfs import arrow_stage as A

if TYPE_CHECKING:  # pragma: no cover - pyspark stays an optional extra
    from pyspark.sql import DataFrame, SparkSession

    from omni_iceberg.context import OmniContext

ENGINE = "spark"
#: seconds to wait for a cluster's first executor before giving up with a ConfigError
EXECUTOR_WAIT_S = float(settings.value("OMNI_SPARK_EXECUTOR_WAIT_S"))
#: Spark settings while a unit's inputs are read. Partially clustered distribution replicates one
#: side's partitions, which breaks the key grouping the NEXT join needs: a unit reading three physical
#: tables then shuffled twice; without it the whole family join has no Exchange (measured, Spark 3.5.9).
#: Dynamic partition pruning is off too: the batch is a data column now (not a partition), so
#: Spark takes the base side's batch filter as selective and re-scans the base table in a
#: broadcast subquery to prune the others by id - a second read of the biggest table, while
#: the batch filter already prunes every table's files by their statistics.
UNIT_READ_CONF = {"spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled": "false",
                  "spark.sql.optimizer.dynamicPartitionPruning.enabled": "false"}
#: A unit whose inputs all live in ONE physical table needs no join, so nothing needs its rows grouped
#: by bucket: its scan is planned by file and row group (Iceberg splits at row-group offsets; a split
#: this small never merges two files, whose open cost is 4 MiB), and ``coalesce`` then merges splits
#: down to the tasks the rows need. Grouped by bucket, such a unit had at most one task per bucket
#: holding data (16 on a new table), whatever its size.
SPLIT_READ_CONF = {"spark.sql.iceberg.planning.preserve-data-grouping": "false"}
SPLIT_BYTES = 1 << 20


class SparkStageFailedError(OmniError):
    """A Spark job of a backfill stage failed for a reason other than a record (which is isolated)."""

    exit_code = 5


# ---- session: start, check, translate ---------------------------------------------------------
def check_master_reachable(master: str, timeout_s: float = 3.0) -> None:
    """Fail fast, before starting a JVM, when a standalone master does not answer."""
    if not master.startswith("spark://"):
        return
    errors = []
    for hostport in master[len("spark://"):].split(","):
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"Spark master URL {master!r} is malformed: use spark://HOST:PORT")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return
        except OSError as e:
            errors.append(f"{hostport}: {e.strerror or e}")
    raise ConfigError(
        f"Spark master {master} is unreachable ({'; '.join(errors)}); start it "
        f"(python -m tests.services.spark_cluster) or fix --spark-master, or use --engine local")


def check_session(spark: SparkSession, config: Any) -> None:
    """The session can run omni backfills on ``config``'s catalog, or a ConfigError saying what to fix."""
    from spark_udfs.session import catalog_properties

    jvm = spark.sparkContext._jvm
    try:
        jvm.org.apache.spark.util.Utils.classForName("org.apache.iceberg.spark.SparkCatalog", False, False)
    except Exception as e:  # py4j raises its own error types
        raise ConfigError(
            "the Iceberg Spark runtime jar is not on this Spark session's classpath; build the session with "
            "spark_udfs.session.build_spark_session (it adds the jars) or add iceberg-spark-runtime-3.5_2.12 "
            "to spark.jars") from e
    name = config.catalog_name
    prefix = f"spark.sql.catalog.{name}"
    impl = spark.conf.get(prefix, None)
    from spark_udfs.extension import CATALOG_CLASS

    if impl is None or ("iceberg" not in impl and impl != CATALOG_CLASS):
        raise ConfigError(
            f"the Spark session has no Iceberg catalog named {name!r} ({prefix} is {impl!r}); omni's catalog "
            f"is named {name!r} (OMNI_CATALOG_NAME) and both sides must use the same name")
    want = catalog_properties(config).get("uri")
    have = spark.conf.get(f"{prefix}.uri", None)
    if want and have != want:
        raise ConfigError(
            f"the Spark session's catalog {name!r} points at {redact(have)!r} but omni's catalog is {redact(want)!r}; "
            f"set {prefix}.uri to the same catalog database (build_spark_session does this)")
    try:
        spark.sql(f"SHOW NAMESPACES IN `{name}`").collect()
    except Exception as e:  # any failure here is a configuration problem
        raise ConfigError(
            f"Spark cannot open Iceberg catalog {name!r} at {redact(have)}: {redact(_first_line(e))}; check {prefix}.uri, "
            f"jdbc.user/jdbc.password and that the catalog database is reachable from the Spark driver") from e


def open_session(config: Any, master: str = "local[2]", *, jar_cache_dir: Any = None,
                 overrides: dict[str, Any] | None = None, executor_wait_s: float = EXECUTOR_WAIT_S,
                 app_name: str = "omni-backfill") -> SparkSession:
    """A checked session on ``master`` (``local[N]`` or ``spark://HOST:PORT``) for ``config``'s catalog."""
    from spark_udfs.session import build_spark_session

    check_master_reachable(master)
    settings = driver_address_conf(master)
    settings.update(overrides or {})
    spark = build_spark_session(config, master=master, app_name=app_name, overrides=settings,
                                jar_cache_dir=jar_cache_dir)
    try:
        if not master.startswith("local"):
            _wait_for_executors(spark, master, executor_wait_s, settings)
        check_session(spark, config)
    except BaseException:
        spark.stop()
        raise
    return spark


def driver_address_conf(master: str) -> dict[str, str]:
    """Driver host settings executors can call back: the session builder binds the driver to
    127.0.0.1, which only executors on this machine reach. For a master elsewhere, use the
    address this machine reaches it from (override ``spark.driver.host`` when behind NAT)."""
    if not master.startswith("spark://"):
        return {}
    host = master[len("spark://"):].split(",")[0].rpartition(":")[0].strip("[]")
    try:
        if host in ("localhost", "127.0.0.1", "::1") or socket.gethostbyname(host).startswith("127."):
            return {}
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # no packet is sent
            probe.connect((host, 7077))
            address = probe.getsockname()[0]
    except OSError:
        return {}
    return {"spark.driver.host": address, "spark.driver.bindAddress": address}


def _wait_for_executors(spark: SparkSession, master: str, timeout_s: float, settings: dict[str, Any]) -> None:
    tracker = spark.sparkContext._jsc.sc()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if tracker.getExecutorMemoryStatus().size() > 1:  # the driver counts as one
            return
        time.sleep(0.5)
    raise ConfigError(
        f"no Spark executor registered with {master} within {timeout_s:.0f} s: the master accepted the "
        f"application, but no worker started an executor - check a worker is ALIVE on the master's web page "
        f"with at least spark.executor.memory={settings.get('spark.executor.memory', '1g')} and one core free")


def ship_python_path(spark: SparkSession) -> None:
    """Let Spark's Python workers import what the driver imports (omni, the UDFs' modules).

    Function environments are part of the Python worker pool's key, so this takes
    effect for the next job. On a remote cluster these folders do not exist and the
    packages must be installed on the executors.
    """
    prefixes = tuple(os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    paths = []
    for p in sys.path:
        p = os.path.realpath(p or os.getcwd())
        if os.path.isdir(p) and not p.startswith(prefixes) and p not in paths:
            paths.append(p)
    env = spark.sparkContext.environment
    have = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(have + [p for p in paths if p not in have])


def gpus_per_task(spark: SparkSession) -> float | None:
    """GPUs a GPU-stage task requests, or None when the cluster's executors declare none.

    Local mode has no stage-level scheduling: a GPU there is the driver's own and the
    UDF simply uses it.
    """
    conf = spark.sparkContext.getConf()
    if (conf.get("spark.master") or "local").startswith("local"):
        return None
    amount = float(conf.get("spark.executor.resource.gpu.amount") or 0)
    if amount <= 0:
        return None
    return min(amount, float(settings.value("OMNI_SPARK_GPUS_PER_TASK")))


def _first_line(e: BaseException) -> str:
    text = (getattr(e, "desc", None) or str(e) or type(e).__name__).strip()
    return text.splitlines()[0][:500] if text else type(e).__name__


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Apply SQL settings for the jobs run inside the block, then restore them."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def table_name(catalog_name: str, identifier: str, branch: str | None = None) -> str:
    ns, table = identifier.rsplit(".", 1)
    name = f"`{catalog_name}`.{'.'.join(f'`{p}`' for p in ns.split('.'))}.`{table}`"
    return f"{name}.`branch_{branch}`" if branch else name


def branch_writer(rows: DataFrame, catalog_name: str, writer: StagedWrite, properties: dict[str, str]) -> Any:
    """``rows`` as Iceberg's writer for ``writer``'s staging branch (append, overwrite... left to the caller).

    The rows are written where they are (one file per partition a task holds, no shuffle
    by Iceberg: callers cluster them by bucket first, or they already are), in the spec of
    the write's bucket count - the logical version's, not the table's default - and every
    snapshot carries the write's properties (run id, operation) and ``properties``.
    """
    out = (rows.writeTo(table_name(catalog_name, writer.identifier, writer.branch))
           .option("distribution-mode", "none").option("fanout-enabled", "true"))
    if writer.spec_id is not None:
        out = out.option("output-spec-id", str(writer.spec_id))
    for k, v in {**writer.properties, **properties}.items():
        out = out.option(f"snapshot-property.{k}", v)
    return out


# ---- reading a unit's inputs -----------------------------------------------------------------------
def read_unit(spark: SparkSession, catalog_name: str, state: FamilyState, leaves: list[str], batch: str,
              split_bytes: int | None = None) -> DataFrame:
    """Keys + ``_in<k>`` = logical column ``leaves[k]`` of one batch, at the snapshots ``state`` pins.

    ``split_bytes``: read splits of about this size (by file and row group) instead of Iceberg's
    default; for a unit reading one table (:data:`SPLIT_READ_CONF`)."""
    from pyspark.sql import functions as F

    from omni_iceberg.read.reader import PART_MARK, logical_of, plan_columns

    def alias(name: str) -> str:  # a later part of a column (column groups) keeps its part number
        column = A.input_column(leaves.index(logical_of(name)))
        return column if PART_MARK not in name else f"{column}__part{name.rsplit(PART_MARK, 1)[1]}"

    frames = []
    parts: dict[str, list[str]] = {}
    for key, cols in plan_columns(state, leaves).items():
        meta = state.physical_table(key)
        reader = spark.read.option("snapshot-id", str(meta.snapshot_id))
        if split_bytes:
            reader = reader.option("split-size", str(split_bytes))
        frame = reader.table(table_name(catalog_name, meta.identifier))
        frames.append(frame.where(F.col(BATCH_COLUMN) == F.lit(batch)).select(
            ID_COLUMN, BATCH_COLUMN, *[F.col(physical).alias(alias(logical)) for physical, logical in cols]))
        for _, logical in cols:
            parts.setdefault(A.input_column(leaves.index(logical_of(logical))), []).append(alias(logical))
    joined = frames[0]
    for frame in frames[1:]:  # base first: every row of the batch, NULL where a feature has no value
        joined = joined.join(frame, [ID_COLUMN, BATCH_COLUMN], "left")
    for column, names in parts.items():  # the parts of a column are disjoint: COALESCE is exact
        if len(names) > 1:
            joined = joined.withColumn(column, F.coalesce(*[F.col(n) for n in names])).drop(
                *[n for n in names if n != column])
    present = set(joined.columns)
    return joined.select(ID_COLUMN, BATCH_COLUMN, *[
        F.col(A.input_column(k)) if A.input_column(k) in present
        else F.lit(None).cast(to_spark(state.column(path).type)).alias(A.input_column(k))
        for k, path in enumerate(leaves)])


# ---- the run ---------------------------------------------------------------------------------------
class _SparkStage:
    """One stage of the plan on Spark: its definitions, UDFs, route and batch size."""

    def __init__(self, stage: Stage, defs: dict[str, FeatureDefinition], gpus: float | None):
        self.stage = stage
        self.defs = defs
        self.specs = {name: get_udf(d.udf) for name, d in defs.items()}
        self.gpu = stage.engine == "gpu"
        self.gpus_per_task = gpus if self.gpu else None

        # Series-in/Series-out UDFs run as Spark pandas UDFs when the whole stage is in that form;
        # a mixed stage stays one fused mapInArrow pass (the local engine converts per feature)
        self.pandas = all(spec.form == "pandas" for spec in self.specs.values())

    def describe(self) -> str:
        carrier = "pandas_udf" if self.pandas else "mapInArrow"
        if not self.gpu:
            return f"{carrier} (CPU)"
        if self.gpus_per_task:
            return (f"GPU route: {carrier}, {self.gpus_per_task:g} GPU per task through a stage-level "
                    f"resource profile")
        return f"GPU route, no GPU in the Spark cluster: {carrier} on CPU with the model's batch size"

    def run(self, frame: DataFrame, defs: list[FeatureDefinition], leaves: list[str], batch_rows: int
            ) -> DataFrame:
        """The tagged output of the stage's features over ``frame`` (lazy; the caller persists it)."""
        if self.pandas:
            from spark_udfs import pandas_stage

            return pandas_stage.run_stage(frame, defs, self.specs, leaves, gpu=self.gpu,
                                          gpus_per_task=self.gpus_per_task)
        return A.run_stage(frame, defs, self.specs, leaves, gpu=self.gpu, gpus_per_task=self.gpus_per_task,
                           batch_rows=batch_rows)

    def batch_rows(self, features: list[str], slice_rows: int = SLICE_ROWS, shrink: int = 1) -> int:
        if not self.gpu:
            return max(1, slice_rows // shrink)
        return max(1, max(self.defs[f].batch_size for f in features) // shrink)

    def close(self) -> None:
        pass  # models live in the Python workers, which Spark keeps for the next stage


class SparkExecutor:
    """Spark's :class:`~omni_iceberg.backfill.protocol.UnitExecutor`: each unit is one fused Spark job."""

    name = ENGINE

    def __init__(self, spark: SparkSession, catalog_name: str, tuning: Any = None,
                 stage_notes: dict[str, str] | None = None, unit_tasks: dict[str, int] | None = None):
        self.spark = spark
        self.catalog_name = catalog_name
        #: slice rows, shrink and parallelism chosen from history and hints (backfill/tuning.py)
        self.tuning = tuning
        self.gpus = gpus_per_task(spark)
        self.branches: set[str] = set()
        #: how each stage runs (stage index -> note), for the report's plan
        self.stage_notes: dict[str, str] = {} if stage_notes is None else stage_notes
        #: Spark tasks each unit's fused pass ran as ("stage/batch" -> tasks), for the report's plan
        self.unit_tasks: dict[str, int] = {} if unit_tasks is None else unit_tasks
        self._stage: _SparkStage | None = None

    def open_stage(self, run: BackfillRun, stage: Stage) -> None:
        self._stage = _SparkStage(stage, {f: run.defs[f] for f in stage.features}, self.gpus)
        self.stage_notes[str(stage.index)] = self._stage.describe()

    def close_stage(self, run: BackfillRun, stage: Stage) -> None:
        if self._stage is not None:
            self._stage.close()
            self._stage = None

    def before_commit(self, run: BackfillRun) -> None:
        for w in run.writers.values():
            if w.staged_snapshot_id is not None:  # learn the files Spark committed, for a rebase after a lost race
                w.attach(bookkeeping.UNIT_PROPERTY)

    def run_unit(self, run: BackfillRun, unit: Unit, bar: Any) -> None:
        from pyspark import StorageLevel

        stage = self._stage
        todo, batch = list(unit.features), unit.batch
        stats = {f: UnitStats(f, batch, started_ms=now_ms()) for f in todo}
        defs = [run.defs[f] for f in todo]
        leaves = list(dict.fromkeys(p for d in defs for p in d.inputs))
        retry_ids = unit.retry_ids
        cached: list[Any] = []
        try:
            from omni_iceberg.read.reader import plan_columns

            working = run.working_state()
            one_table = len(plan_columns(working, leaves)) == 1  # no join: split by file and row group
            frame = read_unit(self.spark, self.catalog_name, working, leaves, batch,
                              split_bytes=SPLIT_BYTES if one_table else None)
            if retry_ids is not None:
                from pyspark.sql import functions as F

                ids = self.spark.createDataFrame([(i,) for i in sorted(retry_ids)], f"{ID_COLUMN} string")
                frame = frame.join(F.broadcast(ids), ID_COLUMN, "left_semi")
            rows_hint = len(retry_ids) if retry_ids is not None else (run.state.batch(batch).rows
                                                                       if run.state.batch(batch) else SLICE_ROWS)
            slice_rows = self.tuning.slice_rows if self.tuning else SLICE_ROWS
            shrink = self.tuning.shrink if self.tuning else 1
            tasks = max(1, math.ceil(rows_hint * shrink / slice_rows))
            wanted = self.tuning.parallelism if self.tuning else 1
            if wanted > tasks:  # the definition asks for more tasks than the rows need: spread them
                frame = frame.repartition(min(wanted, max(1, rows_hint)), ID_COLUMN)
            else:
                frame = frame.coalesce(tasks)  # few tasks, full Arrow batches
            batch_rows = stage.batch_rows(todo, slice_rows, shrink)
            with session_conf(self.spark, {**UNIT_READ_CONF, **(SPLIT_READ_CONF if one_table else {}),
                                            "spark.sql.execution.arrow.maxRecordsPerBatch": str(batch_rows)}):
                tagged = stage.run(frame, defs, leaves, batch_rows)
                tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)
                cached.append(tagged)
                counts = self._counts(tagged)  # the one pass: computes and caches every partition
                self.unit_tasks[f"{stage.stage.index}/{batch}"] = tagged.rdd.getNumPartitions()
            reused = self._reuse_on_spark(run, todo, frame, batch, cached)
            outputs = {f: self._outputs(i, run.defs[f], tagged, reused.get(f)) for i, f in enumerate(todo)}
            failures = self._failures(tagged, reused) if any(k == A.ERROR for _, k in counts) else {}
            for f in todo:
                s = stats[f]
                s.filtered = counts.get((f, A.FILTERED), 0)
                s.reused = reused[f][1] if f in reused else 0
                s.rows = (outputs[f][1] if f in reused else counts.get((f, A.ROW), 0)) + s.reused
                s.errors = len(failures.get(f, ()))
            if bar is not None:
                bar.set_postfix_str(f"batch {batch}: {sum(s.rows for s in stats.values())} rows")
            now = datetime.now(UTC)
            error_rows = [run.error_row(f, r[ID_COLUMN], batch, r[A.ERROR_CLASS], r[A.ERROR_MESSAGE],
                                        r[A.ERROR_DIGEST], now)
                          for f in todo for r in failures.get(f, ())]

            def checkpoint(f: str, properties: dict[str, str]) -> None:
                self._checkpoint(run, f, outputs[f][0] if stats[f].rows else None, properties)

            run.finish_unit(unit, stats, error_rows, checkpoint)
        except Exception as e:  # only Spark's own errors are translated, the rest pass unchanged
            translated = _translate(e, stage, todo, batch)
            if translated is e:
                raise
            raise translated from e
        finally:
            for df in cached:
                df.unpersist()

    # ---- pieces of a unit ---------------------------------------------------------------------
    @staticmethod
    def _counts(tagged: DataFrame) -> dict[tuple[str, str], int]:
        from pyspark.sql import functions as F

        out = {}
        for r in tagged.groupBy(A.FEATURE_TAG, A.KIND_TAG).agg(
                F.count(F.lit(1)).alias("n"), F.sum(A.COUNT).alias("s")).collect():
            out[(r[A.FEATURE_TAG], r[A.KIND_TAG])] = int(r["s"] if r[A.KIND_TAG] == A.FILTERED else r["n"])
        return out

    def _outputs(self, i: int, d: FeatureDefinition, tagged: DataFrame, reused: Any) -> tuple[Any, int]:
        """(rows to append for feature ``d``, computed rows not replaced by reused values)."""
        from pyspark.sql import functions as F

        cols = [physical_column_name(o.name) for o in d.outputs]
        rows = tagged.where((F.col(A.FEATURE_TAG) == d.name) & (F.col(A.KIND_TAG) == A.ROW)).select(
            ID_COLUMN, BATCH_COLUMN, *[F.col(A.output_column(i, j)).alias(c) for j, c in enumerate(cols)])
        if reused is None:
            return rows, 0
        copies, _ = reused
        computed = rows.join(copies.select(ID_COLUMN), ID_COLUMN, "left_anti")
        return computed.unionByName(copies), computed.count()

    def _failures(self, tagged: DataFrame, reused: dict[str, Any]) -> dict[str, list[Any]]:
        from pyspark.sql import functions as F

        errors = tagged.where(F.col(A.KIND_TAG) == A.ERROR).select(
            A.FEATURE_TAG, ID_COLUMN, A.ERROR_CLASS, A.ERROR_MESSAGE, A.ERROR_DIGEST)
        out: dict[str, list[Any]] = {}
        for r in errors.collect():
            out.setdefault(r[A.FEATURE_TAG], []).append(r)
        for f, (copies, _) in reused.items():  # a value found elsewhere replaces the failure
            if out.get(f):
                found = {r[ID_COLUMN] for r in copies.join(
                    self.spark.createDataFrame([(r[ID_COLUMN],) for r in out[f]], f"{ID_COLUMN} string"),
                    ID_COLUMN, "left_semi").select(ID_COLUMN).collect()}
                out[f] = [r for r in out[f] if r[ID_COLUMN] not in found]
        return out

    def _reuse_on_spark(self, run: BackfillRun, todo: list[str], frame: DataFrame, batch: str,
                        cached: list[Any]) -> dict[str, tuple[Any, int]]:
        """Values of the same feature version computed elsewhere for the same ids (ReuseIndex's sources,
        first source first), as rows of this batch; and how many."""
        if not run.reuse.active:
            return {}
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        ids = frame.select(ID_COLUMN)
        found: dict[str, tuple[Any, int]] = {}
        for f in todo:
            sources = run.reuse.sources.get(f) or []
            if not sources:
                continue
            cols = [physical_column_name(o.name) for o in run.defs[f].outputs]
            union = None
            for k, src in enumerate(sources):
                part = (self.spark.read.option("snapshot-id", str(src.snapshot_id))
                        .table(table_name(self.catalog_name, src.identifier))
                        # only batches whose upstream chain matches hold reusable values
                        .where(F.col(BATCH_COLUMN).isin(list(src.batches)))
                        .select(ID_COLUMN, *cols, F.lit(k).alias("_omni_source")))
                union = part if union is None else union.unionByName(part)
            first = Window.partitionBy(ID_COLUMN).orderBy("_omni_source")
            copies = (union.join(ids, ID_COLUMN, "left_semi").withColumn("_omni_rank", F.row_number().over(first))
                      .where(F.col("_omni_rank") == 1)
                      .select(ID_COLUMN, F.lit(batch).alias(BATCH_COLUMN), *cols)
                      .persist(StorageLevel.MEMORY_AND_DISK))
            cached.append(copies)
            n = copies.count()
            if n:
                found[f] = (copies, n)
        return found

    def _checkpoint(self, run: BackfillRun, f: str, rows: Any, properties: dict[str, str]) -> None:
        """One snapshot on the staging branch finishing unit ``properties['omni.unit']``."""
        w: StagedWrite = run.writers[f]
        if rows is None:  # nothing to write: an empty labelled snapshot, exactly as the local engine
            w.checkpoint(properties)
            return
        self._ensure_branch(run, w)
        before = w.staged_snapshot_id
        # the rows are few per task and already grouped by bucket: write them where they are
        # (one file per partition a task holds) instead of shuffling them by partition first
        branch_writer(rows, self.catalog_name, w, properties).append()
        table = run.store.catalog.load_table(w.identifier)
        head = table.snapshot_by_id(table.metadata.refs[w.branch].snapshot_id)
        label = (head.summary.additional_properties if head.summary else {}).get(bookkeeping.UNIT_PROPERTY)
        if label != properties[bookkeeping.UNIT_PROPERTY] or head.parent_snapshot_id != (before or w.base_snapshot_id):
            # another process of the same plan writes this branch (a run id is the plan's hash);
            # Iceberg's own commit retry put this unit on top of its snapshot: take ours back off
            if label == properties[bookkeeping.UNIT_PROPERTY]:
                w.withdraw_misplaced(table, head)
            raise StagingBranchTakenError(
                f"another process is running the same plan (run {run.report.run_id}): the Spark write of unit "
                f"{properties[bookkeeping.UNIT_PROPERTY]} to {w.identifier} did not land on branch {w.branch} "
                f"where this run left it (head {head.snapshot_id}, label {label!r}). This run stops without "
                "committing and leaves the branch to the other; once that one finishes, rerun the command")
        w.staged_snapshot_id = head.snapshot_id

    def _ensure_branch(self, run: BackfillRun, w: StagedWrite) -> None:
        if w.identifier in self.branches:
            return
        w.ensure_branch()
        self.branches.add(w.identifier)


_PY_ERROR = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.*)$", re.MULTILINE)


def _translate(error: Exception, stage: _SparkStage, todo: list[str], batch: str) -> Exception:
    """Spark's job failures as omni errors that say what happened and what to do."""
    module = type(error).__module__
    if not module.startswith(("py4j", "pyspark")):
        return error
    text = str(error)
    found = _PY_ERROR.findall(text)
    definition_bug = [m for c, m in found if c.endswith("FeatureDefinitionError")]
    where = f"stage {stage.stage.index} (features {', '.join(todo)}), batch {batch}"
    if definition_bug:
        return FeatureDefinitionError(definition_bug[-1].strip())
    if "Python worker exited unexpectedly" in text or "crashed" in text.lower():
        return WorkerCrashedError(
            f"a Spark Python worker running {where} died and Spark gave up after its task retries "
            f"({_first_line(error)}); nothing was committed and finished units are kept - fix the UDF, "
            f"then rerun the same command to resume")
    cause = f"{found[-1][0]}: {found[-1][1].strip()}" if found else _first_line(error)
    return SparkStageFailedError(
        f"Spark failed on {where}: {cause[:800]}; nothing was committed and finished units are kept - "
        f"fix the cause, then rerun the same command to resume")


# ---- entry points ------------------------------------------------------------------------------------
class SparkSessionOwner:
    """The checked Spark session of one catalog that an engine's capabilities run on.

    Give it a session (``spark=``), or a ``master`` (``local[2]``, ``spark://HOST:PORT``)
    and it starts one on first use and stops it on :meth:`close`. Either way the
    session is checked first: Iceberg runtime present, the same catalog as omni's,
    reachable - otherwise a :class:`~catalog_ext.errors.ConfigError` says what to fix.
    """

    def __init__(self, config: Any, *, spark: SparkSession | None = None, master: str | None = None,
                 jar_cache_dir: Any = None, overrides: dict[str, Any] | None = None,
                 executor_wait_s: float = EXECUTOR_WAIT_S):
        self.config = config
        self.master = master or "local[2]"
        self._spark = spark
        self._owned = False
        self._checked = False
        self._session_args = {"jar_cache_dir": jar_cache_dir, "overrides": overrides,
                              "executor_wait_s": executor_wait_s}

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from pyspark.sql import SparkSession as _Session

            active = _Session.getActiveSession()
            if active is not None and self.master == "local[2]":
                # a session the caller already runs is used, never stopped by us
                self._spark = active
                return self.spark
            self._spark = open_session(self.config, self.master, **self._session_args)
            self._owned = self._checked = True
        elif not self._checked:
            check_session(self._spark, self.config)
            self._checked = True
        return self._spark

    def __enter__(self) -> SparkSessionOwner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the session if this object started it."""
        if self._owned and self._spark is not None:
            self._spark.stop()
            self._spark, self._owned, self._checked = None, False, False


class SparkBackfill(SparkSessionOwner):
    """The Spark engine's ``backfill`` capability: executes backfill plans on Spark for one catalog
    (:class:`~omni_iceberg.context.OmniContext`), on the session :class:`SparkSessionOwner` holds."""

    name = ENGINE

    def __init__(self, ctx: OmniContext, *, spark: SparkSession | None = None, master: str | None = None,
                 jar_cache_dir: Any = None, overrides: dict[str, Any] | None = None,
                 executor_wait_s: float = EXECUTOR_WAIT_S):
        super().__init__(ctx.config, spark=spark, master=master, jar_cache_dir=jar_cache_dir, overrides=overrides,
                         executor_wait_s=executor_wait_s)
        self.ctx = ctx

    def has_gpu(self) -> bool | None:
        """Whether GPU stages get GPUs: the cluster's executors declare them (GPU routes follow it).

        None in local mode: the executors are this process, so the plan's routes - made with
        this machine's GPU and its free memory - stand as they are.
        """
        if (self.spark.sparkContext.master or "local").startswith("local"):
            return None
        return gpus_per_task(self.spark) is not None

    def start(self, report: BackfillReport, tuning: Tuning) -> None:
        spark = self.spark
        ship_python_path(spark)
        # filled as stages start, saved with the run row
        self._stage_notes: dict[str, str] = {}
        self._unit_tasks: dict[str, int] = {}
        report.plan["spark"] = {"master": spark.sparkContext.master, "stages": self._stage_notes,
                                "tasks": self._unit_tasks}

    def executor(self, tuning: Tuning, shrink: int) -> SparkExecutor:
        # Spark sizes from the tuning itself and never reruns smaller: a task that dies is Spark's to retry
        return SparkExecutor(self.spark, self.ctx.config.catalog_name, tuning, stage_notes=self._stage_notes,
                             unit_tasks=self._unit_tasks)

    def reruns_smaller(self, error: BaseException) -> bool:
        return False
