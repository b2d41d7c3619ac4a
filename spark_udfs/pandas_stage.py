"""A stage of pandas-form features (Series in, Series out) as Spark pandas UDFs.

Each feature becomes one scalar ``pandas_udf`` over its own input columns; Spark
evaluates all of them in one Arrow-evaluated Python node, so the stage still reads
its inputs once. Inside, the feature runs through the same
:func:`~omni_iceberg.backfill.worker.compute_slice` as on the local engine - the
null/filter mask, the batch size, and record isolation by bisection - so a batch
that raises keeps its good records and reports the bad ones. The UDF returns, per
input row, a struct: what happened to the record (``row``, ``error``, or
``filtered``), its values, and the error's class/message/digest. One ``explode``
turns those structs into the tagged stream :mod:`spark_udfs.arrow_stage` defines, so
the engine splits, counts and writes it exactly as for ``mapInArrow``.

GPU stages on a cluster whose executors declare GPUs request them per task with a
stage-level resource profile. pyspark 3.5 attaches profiles to RDDs only, so the
tagged frame goes through ``RDD.withResources``: the profile covers the whole stage,
pandas UDF included (the scan, the co-partitioned join and ``coalesce`` are narrow).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.types import to_spark
from omni_iceberg.features.placement import CPU, CUDA
from omni_iceberg.features.spec import FeatureDefinition
from spark_udfs import arrow_stage as A

if TYPE_CHECKING:  # pragma: no cover - pyspark stays an optional extra
    from pyspark.sql import DataFrame

#: fields of the struct one feature's pandas UDF returns per record
KIND, ERROR_CLASS, ERROR_MESSAGE, ERROR_DIGEST = "kind", "error_class", "error_message", "error_digest"


def value_field(j: int) -> str:
    return f"v{j}"


def result_type(d: FeatureDefinition) -> Any:
    """The Spark struct a feature's pandas UDF returns for each record."""
    from pyspark.sql import types as T

    return T.StructType(
        [T.StructField(KIND, T.StringType())]
        + [T.StructField(value_field(j), to_spark(o.type)) for j, o in enumerate(d.outputs)]
        + [T.StructField(c, T.StringType()) for c in (ERROR_CLASS, ERROR_MESSAGE, ERROR_DIGEST)])


def evaluate(d: FeatureDefinition, spec: Any, ids: Any, batches: Any, inputs: list[Any], device: str = CPU) -> Any:
    """One Arrow batch of one feature, as Spark hands it to a pandas UDF (pandas Series) -> a DataFrame
    of :func:`result_type` rows, in input order; the UDF placed on ``device``. Runs on the executors."""
    import pandas as pd

    from omni_iceberg.backfill.worker import compute_slice

    runner = A.runners_for([d], {d.name: spec}, device)[d.name]
    data = pa.Table.from_arrays(
        [pa.Array.from_pandas(ids, type=pa.string()), pa.Array.from_pandas(batches, type=pa.string())]
        + [pa.Array.from_pandas(s) for s in inputs],
        names=[ID_COLUMN, BATCH_COLUMN] + list(d.inputs))
    result = compute_slice({d.name: runner}, [d.name], data)
    n = len(ids)
    at = {rid: k for k, rid in enumerate(ids.tolist())}
    kind: list[str] = [A.FILTERED] * n  # neither computed nor failed: null input or filtered out
    values: list[list[Any]] = [[None] * n for _ in d.outputs]
    errors: list[list[Any]] = [[None] * n for _ in range(3)]
    out = result.outputs.get(d.name)
    if out is not None and out.num_rows:
        rows = [at[rid] for rid in out.column(ID_COLUMN).to_pylist()]
        for k in rows:
            kind[k] = A.ROW
        for j in range(len(d.outputs)):
            for k, v in zip(rows, out.column(2 + j).to_pylist()):
                values[j][k] = v
    for rid, failure in result.failures.get(d.name) or []:
        k = at[rid]
        kind[k] = A.ERROR
        errors[0][k], errors[1][k], errors[2][k] = failure.exception_class, failure.message, failure.traceback_digest
    columns: dict[str, Any] = {KIND: kind}
    for j, vals in enumerate(values):
        columns[value_field(j)] = pd.Series(vals, dtype=object)  # object: ints with nulls stay ints
    for name, vals in zip((ERROR_CLASS, ERROR_MESSAGE, ERROR_DIGEST), errors):
        columns[name] = vals
    return pd.DataFrame(columns)


def feature_udf(d: FeatureDefinition, spec: Any, gpu: bool) -> Any:
    """The scalar pandas UDF of feature ``d``: ``(id, batch, *inputs) -> result_type(d)``."""
    from pyspark.sql.functions import pandas_udf

    device = CUDA if gpu else CPU  # the stage's route, as the plan made it

    def run(ids, batches, *inputs):  # pandas Series in, a DataFrame (the struct) out
        A.claim_task_gpus(gpu)  # every call: a reused Python worker may run a task holding other GPUs
        return evaluate(d, spec, ids, batches, list(inputs), device)

    return pandas_udf(run, result_type(d))  # type: ignore[call-overload]


def run_stage(frame: DataFrame, defs: list[FeatureDefinition], specs: dict[str, Any], leaves: list[str], *,
              gpu: bool = False, gpus_per_task: float | None = None) -> DataFrame:
    """The tagged stream (:func:`spark_udfs.arrow_stage.spark_output_schema`) of ``defs`` over ``frame``."""
    from pyspark.sql import functions as F

    A.ship_user_modules()  # before feature_udf: Spark pickles each UDF when it is built

    results = frame.select(ID_COLUMN, BATCH_COLUMN, *[
        feature_udf(d, specs[d.name], gpu)(
            F.col(ID_COLUMN), F.col(BATCH_COLUMN), *[F.col(A.input_column(leaves.index(p))) for p in d.inputs]
        ).alias(f"_r{i}") for i, d in enumerate(defs)])
    tagged_rows = []
    for i, d in enumerate(defs):
        r = F.col(f"_r{i}")
        fields = [F.lit(d.name).alias(A.FEATURE_TAG), r[KIND].alias(A.KIND_TAG),
                  F.col(ID_COLUMN).alias(ID_COLUMN), F.col(BATCH_COLUMN).alias(BATCH_COLUMN)]
        for i2, d2 in enumerate(defs):
            for j, o in enumerate(d2.outputs):
                value = r[value_field(j)] if i2 == i else F.lit(None).cast(to_spark(o.type))
                fields.append(value.alias(A.output_column(i2, j)))
        fields += [r[ERROR_CLASS].alias(A.ERROR_CLASS), r[ERROR_MESSAGE].alias(A.ERROR_MESSAGE),
                   r[ERROR_DIGEST].alias(A.ERROR_DIGEST),
                   F.when(r[KIND] == A.FILTERED, F.lit(1)).cast("long").alias(A.COUNT)]
        tagged_rows.append(F.struct(*fields))
    tagged = results.select(F.explode(F.array(*tagged_rows)).alias("_t")).select("_t.*")
    if not gpus_per_task:
        return tagged
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    profile = ResourceProfileBuilder().require(TaskResourceRequests().cpus(1).resource("gpu", gpus_per_task)).build
    schema = A.spark_output_schema(defs)
    return frame.sparkSession.createDataFrame(tagged.rdd.withResources(profile), schema, verifySchema=False)
