"""One fused stage of a backfill plan as ONE pass over Arrow batches in Spark.

Every feature of the stage runs on the same input batch through the local engine's
:func:`~omni_iceberg.backfill.worker.compute_slice` - the same record isolation,
bisection, filters and shared intermediate results - so values and failures are
identical on both engines. The UDF runners (a class UDF's ``setup()``, i.e. its model
load) are cached per Python worker process in :data:`_RUNNERS`, keyed by
``name@version``, code hash and planned device: with Spark's Python worker reuse (on by
default) a model loads once per worker process, not once per batch or task.

The pass emits one tagged stream (:func:`output_schema`): a ``row`` per computed record
of each feature (its outputs in that feature's own columns), an ``error`` row per
failed record, and one ``filtered`` row per batch counting the records a feature's
filter skipped. The engine persists it once and splits it into per-feature writes,
error rows and counts.

CPU stages use ``mapInArrow``. GPU stages size Arrow batches to the features'
``batch_size`` and, on a cluster whose executors declare GPUs, request them per task
through a stage-level resource profile (pyspark 3.5 attaches profiles to RDDs only,
so that path goes through ``RDD.withResources``); with no GPU in the cluster they run
like CPU stages. The stage's route reaches the UDFs as their planned device
(:mod:`omni_iceberg.features.placement`), and every task - not only a Python worker's
first - points CUDA at exactly the GPUs its profile assigned (:func:`claim_task_gpus`).

Column names in Spark are ``_in<k>`` (inputs) and ``_o<i>_<j>`` (outputs): Spark
cannot pass a column named ``RawData.raw_data`` to a Python function.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.errors import OmniError
from catalog_ext.types import to_arrow, to_spark
from omni_iceberg.features.placement import CPU, CUDA
from omni_iceberg.features.spec import FeatureDefinition

if TYPE_CHECKING:  # pragma: no cover - pyspark stays an optional extra
    from pyspark.sql import DataFrame

FEATURE_TAG = "_omni_feature"
KIND_TAG = "_omni_kind"
ERROR_CLASS = "_omni_error_class"
ERROR_MESSAGE = "_omni_error_message"
ERROR_DIGEST = "_omni_error_digest"
COUNT = "_omni_n"
ROW, ERROR, FILTERED = "row", "error", "filtered"

#: (name@version, code hash, device) -> FeatureRunner, per Python worker process: models load once
_RUNNERS: dict[tuple[str, str, str], Any] = {}
#: the executor's own CUDA_VISIBLE_DEVICES when this worker process started (None: unset), restored
#: for a GPU task without assigned GPUs (local mode: the driver's GPU) after a task narrowed it
_EXECUTOR_CUDA_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")


class GpuAssignmentError(OmniError):
    """A reused Spark Python worker's CUDA runtime is bound to other GPUs than its task was assigned."""

    exit_code = 5


def input_column(k: int) -> str:
    return f"_in{k}"


def output_column(i: int, j: int) -> str:
    """Column of output ``j`` of the ``i``-th feature of the unit."""
    return f"_o{i}_{j}"


def output_schema(defs: list[FeatureDefinition]) -> pa.Schema:
    """The tagged stream one fused pass emits for features ``defs`` (in unit order)."""
    fields = [pa.field(FEATURE_TAG, pa.string()), pa.field(KIND_TAG, pa.string()),
              pa.field(ID_COLUMN, pa.string()), pa.field(BATCH_COLUMN, pa.string())]
    for i, d in enumerate(defs):
        fields += [pa.field(output_column(i, j), to_arrow(o.type)) for j, o in enumerate(d.outputs)]
    fields += [pa.field(ERROR_CLASS, pa.string()), pa.field(ERROR_MESSAGE, pa.string()),
               pa.field(ERROR_DIGEST, pa.string()), pa.field(COUNT, pa.int64())]
    return pa.schema(fields)


def spark_output_schema(defs: list[FeatureDefinition]) -> Any:
    from pyspark.sql import types as T

    fields = [T.StructField(FEATURE_TAG, T.StringType()), T.StructField(KIND_TAG, T.StringType()),
              T.StructField(ID_COLUMN, T.StringType()), T.StructField(BATCH_COLUMN, T.StringType())]
    for i, d in enumerate(defs):
        fields += [T.StructField(output_column(i, j), to_spark(o.type)) for j, o in enumerate(d.outputs)]
    fields += [T.StructField(ERROR_CLASS, T.StringType()), T.StructField(ERROR_MESSAGE, T.StringType()),
               T.StructField(ERROR_DIGEST, T.StringType()), T.StructField(COUNT, T.LongType())]
    return T.StructType(fields)


# ---- executor side ---------------------------------------------------------------------------
def runners_for(defs: list[FeatureDefinition], specs: dict[str, Any], device: str = CPU) -> dict[str, Any]:
    """The FeatureRunners of ``defs`` placed on ``device`` in this process, built on first use and then reused."""
    from omni_iceberg.backfill.evaluate import FeatureRunner

    out = {}
    for d in defs:
        key = (d.key, specs[d.name].code_hash, device)
        runner = _RUNNERS.get(key)
        if runner is None:
            runner = _RUNNERS[key] = FeatureRunner(d, specs[d.name], device)
        out[d.name] = runner
    return out


def encode(result: Any, defs: list[FeatureDefinition], batch: str, schema: pa.Schema) -> pa.Table:
    """A ``SliceResult`` as rows of the tagged stream."""
    blocks: list[pa.Table] = []

    def block(n: int, **columns: Any) -> None:
        arrays = []
        for f in schema:
            value = columns.get(f.name)
            if value is None:
                arrays.append(pa.nulls(n, f.type))
            elif isinstance(value, (pa.Array, pa.ChunkedArray)):
                arrays.append(value.cast(f.type) if value.type != f.type else value)
            else:
                arrays.append(pa.array(value if isinstance(value, list) else [value] * n, f.type))
        blocks.append(pa.Table.from_arrays(arrays, schema=schema))

    for i, d in enumerate(defs):
        out = result.outputs.get(d.name)
        if out is not None and out.num_rows:
            outs = {output_column(i, j): out.column(2 + j) for j in range(len(d.outputs))}
            block(out.num_rows, **{FEATURE_TAG: d.name, KIND_TAG: ROW, ID_COLUMN: out.column(ID_COLUMN),
                                   BATCH_COLUMN: out.column(BATCH_COLUMN)}, **outs)
        failures = result.failures.get(d.name) or []
        if failures:
            block(len(failures), **{
                FEATURE_TAG: d.name, KIND_TAG: ERROR, ID_COLUMN: [rid for rid, _ in failures], BATCH_COLUMN: batch,
                ERROR_CLASS: [f.exception_class for _, f in failures], ERROR_MESSAGE: [f.message for _, f in failures],
                ERROR_DIGEST: [f.traceback_digest for _, f in failures]})
        skipped = result.filtered.get(d.name, 0)
        if skipped:
            block(1, **{FEATURE_TAG: d.name, KIND_TAG: FILTERED, BATCH_COLUMN: batch, COUNT: skipped})
    return pa.concat_tables(blocks) if blocks else schema.empty_table()


def stage_function(defs: list[FeatureDefinition], specs: dict[str, Any], leaves: list[str],
                   gpu: bool = False) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function Spark runs on each partition: Arrow batches in, tagged batches out.

    Input batches hold the keys and ``_in<k>`` = ``leaves[k]`` (logical paths).
    """
    names = [d.name for d in defs]
    schema = output_schema(defs)
    device = CUDA if gpu else CPU  # the stage's route, as the plan made it

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from omni_iceberg.backfill.worker import compute_slice

        claim_task_gpus(gpu)
        runners = runners_for(defs, specs, device)
        for rb in batches:
            if rb.num_rows == 0:
                continue
            data = pa.Table.from_batches([rb])
            data = data.rename_columns([ID_COLUMN, BATCH_COLUMN] + list(leaves))
            result = compute_slice(runners, names, data)
            yield from encode(result, defs, data.column(BATCH_COLUMN)[0].as_py(), schema).to_batches()

    return run


def claim_task_gpus(gpu: bool) -> str | None:
    """Point CUDA at exactly the GPUs Spark assigned the running task; call it in every task.

    Spark reuses Python worker processes across tasks, and two tasks on one executor may
    hold different GPUs: the mask is set again for each task, not kept from the first.
    Returns the ``CUDA_VISIBLE_DEVICES`` the task runs with (None: unset).
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    gpus = ctx.resources().get("gpu") if ctx is not None else None
    addresses = list(gpus.addresses) if gpus is not None else []
    return bind_gpus(addresses, gpu, os.environ, cuda_started(), _EXECUTOR_CUDA_DEVICES)


def cuda_started() -> bool:
    """Whether this process's CUDA runtime is up (torch's): after that, a new mask has no effect."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch built without CUDA
        return False


def bind_gpus(addresses: list[str], gpu: bool, environ: Any, started: bool, executor_value: str | None
              ) -> str | None:
    """Set ``environ``'s ``CUDA_VISIBLE_DEVICES`` for a task assigned GPU ``addresses``.

    - a task with assigned GPUs sees exactly those;
    - a CPU-stage task assigned none sees no GPU (``""``);
    - a GPU-stage task assigned none (local mode, no stage-level scheduling: the driver's
      own GPU) sees what the executor saw (``executor_value``).

    Once CUDA has started in the process the mask cannot change. A GPU task whose
    assignment differs then raises :class:`GpuAssignmentError`: PySpark ends a worker whose
    task raised, so Spark's retry runs in a fresh process, bound to the retry's own GPUs.
    A CPU task there keeps the process's mask; its UDFs are placed on CPU by the plan.
    """
    wanted = ",".join(addresses) if addresses else ("" if not gpu else executor_value)
    have = environ.get("CUDA_VISIBLE_DEVICES")
    if have == wanted:
        return have
    if started:
        if gpu and addresses:
            raise GpuAssignmentError(
                f"this Spark Python worker's CUDA runtime started on GPU(s) {have!r} for an earlier task, and Spark "
                f"assigned this task GPU(s) {wanted!r}; CUDA cannot switch devices in a running process, so the "
                f"worker ends and Spark retries the task in a fresh one")
        return have
    if wanted is None:
        environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        environ["CUDA_VISIBLE_DEVICES"] = wanted
    return wanted


# ---- driver side -------------------------------------------------------------------------------
def ship_user_modules() -> list[str]:
    """Make the UDFs of users' .py files travel by value in Spark's pickles; returns their module names.

    Those modules exist only in the driver (imported from a file, under a generated
    name), so an executor cannot import them. The features package registers them with
    cloudpickle already, but PySpark pickles functions with its own vendored copy
    (``pyspark.cloudpickle``), which keeps its own registry. Call before a UDF is built:
    Spark pickles the function when the DataFrame operation is created.
    """
    from pyspark import cloudpickle

    from omni_iceberg.features import user_modules

    modules = user_modules()
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    return [m.__name__ for m in modules]


def run_stage(frame: DataFrame, defs: list[FeatureDefinition], specs: dict[str, Any], leaves: list[str], *,
              gpu: bool = False, gpus_per_task: float | None = None, batch_rows: int = 8192) -> DataFrame:
    """The tagged output of one fused pass over ``frame`` (lazy; the caller persists it).

    ``gpus_per_task``: request that many GPUs per task through a resource profile
    (only on clusters whose executors declare GPUs); ``batch_rows`` is the Arrow batch
    size the Python side receives on the resource-profile path (mapInArrow takes it
    from ``spark.sql.execution.arrow.maxRecordsPerBatch``, which the engine sets).
    """
    ship_user_modules()
    fn = stage_function(defs, specs, leaves, gpu=gpu)
    schema = spark_output_schema(defs)
    if not gpus_per_task:
        return frame.mapInArrow(fn, schema)
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests
    from pyspark.sql.pandas.types import to_arrow_schema

    in_schema = to_arrow_schema(frame.schema)
    out_names = schema.fieldNames()

    def partition(rows: Iterator[Any]) -> Iterator[tuple]:
        for out in fn(_row_batches(rows, in_schema, batch_rows)):
            columns = [out.column(i).to_pylist() for i in range(out.num_columns)]
            yield from zip(*columns) if columns else ()

    profile = ResourceProfileBuilder().require(TaskResourceRequests().cpus(1).resource("gpu", gpus_per_task)).build
    rdd = frame.rdd.mapPartitions(partition).withResources(profile)
    return frame.sparkSession.createDataFrame(rdd, schema, verifySchema=False).toDF(*out_names)


def _row_batches(rows: Iterator[Any], schema: pa.Schema, size: int) -> Iterator[pa.RecordBatch]:
    buffer: list[Any] = []
    for row in rows:
        buffer.append(tuple(row))
        if len(buffer) >= size:
            yield _to_batch(buffer, schema)
            buffer = []
    if buffer:
        yield _to_batch(buffer, schema)


def _to_batch(rows: list[tuple], schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, schema)], schema=schema)
