"""Materialization on Spark: the plan of :mod:`governance.materialize`, executed by Spark on the staging branch.

The job (:class:`governance.rewrite.MaterializeJob`) names every physical table the copy
reads, at the snapshot the logical version pins, with the columns taken from each. Spark
reads each with Iceberg's reader at that snapshot (``snapshot-id``; only the job's
batches, a filter on the exact batch bounds every family file carries), LEFT JOINs them
onto the base table on the keys (batch, id) and COALESCEs a column's parts - the rows
and values of :func:`governance.slices.iter_logical_slices`, which the local engine runs.

Every family table is partitioned by ``bucket(N, id)`` with the family's one N, so the
join needs no shuffle when Spark may use the tables' own grouping (a storage-partitioned
join): :data:`SPJ_CONF` turns that on for the job only - the session's settings are put
back after - and Spark falls back to a shuffle join where it cannot (a table whose
history holds another bucket count's spec).

The rows are then written like a re-bucketing's (:mod:`spark_udfs.rebucket`): clustered
by the copy's bucket (Iceberg's ``system.bucket``, the spec's own hash), sorted by (batch,
id) within each task, in the family's bucket spec, onto the copy's staging branch - an
append for a build or an append of new batches, ``overwrite(true)`` for a rebuild (one
snapshot replacing every file the copy held, as the local engine's clear + write does in
two). The id index learns the new files at the logical commit (``index.staged`` reads
what the branch's snapshot added), as for Spark compaction and re-bucketing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from spark_udfs.compaction import landed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from governance.rewrite import MaterializeJob, MaterializeSource

KEYS = [ID_COLUMN, BATCH_COLUMN]

#: what lets Spark join co-bucketed Iceberg tables without a shuffle (Spark 3.4+, Iceberg's
#: ``preserve-data-grouping``): the join keys (batch, id) need only hold the partition key (id),
#: and a bucket one table lacks is filled in rather than giving up the grouping
SPJ_CONF = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.iceberg.planning.preserve-data-grouping": "true",
    "spark.sql.sources.v2.bucketing.pushPartValues.enabled": "true",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
}


def materialize_on_spark(spark: "SparkSession", catalog_name: str, job: "MaterializeJob",
                         properties: dict[str, str]) -> int:
    """Write ``job``'s rows onto its writer's branch; returns the branch's new head."""
    from pyspark.sql import functions as F

    from spark_udfs.engine import branch_writer, session_conf, table_name

    writer = job.writer
    writer.ensure_branch()
    before = writer.staged_snapshot_id or writer.base_snapshot_id
    target = table_name(catalog_name, writer.identifier)
    with session_conf(spark, SPJ_CONF):
        rows = logical_rows(spark, catalog_name, job)
        types = {f.name: f.dataType for f in spark.table(target).schema.fields}
        rows = rows.select(*[F.col(f"`{k}`").cast(types[k]).alias(k) for k in KEYS],
                           *[F.col(f"`{path}`").cast(types[name]).alias(name)
                             for path, name in zip(job.columns, job.targets)])
        bucket = F.expr(f"`{catalog_name}`.system.bucket({int(job.bucket_count)}, `{ID_COLUMN}`)")
        rows = (rows.repartition(min(int(job.bucket_count), 200), bucket)
                .sortWithinPartitions(bucket, BATCH_COLUMN, ID_COLUMN))
        out = branch_writer(rows, catalog_name, writer, properties)
        if job.clear:
            out.overwrite(F.lit(True))  # a rebuild: every row the copy held goes, in the same snapshot
        else:
            out.append()
    return landed(writer, before, "materialization")


def logical_rows(spark: "SparkSession", catalog_name: str, job: "MaterializeJob") -> "DataFrame":
    """The keys, then one column per logical path of ``job.columns``: the base table's rows of the
    job's batches, every other source LEFT JOINed on the keys, a column's parts COALESCEd."""
    from pyspark.sql import functions as F

    from omni_iceberg.read.reader import logical_of

    parts: dict[str, list[tuple[int, str]]] = {}  # logical path -> (part number, alias in the join)
    joined = None
    for s, source in enumerate(job.sources):
        frame = _read(spark, catalog_name, source, list(job.batches))
        names = []
        for c, (physical, name) in enumerate(source.columns):
            alias = f"_m{s}_{c}"
            path = logical_of(name)
            number = 0 if name == path else int(name[len(path):].split("part", 1)[1])
            parts.setdefault(path, []).append((number, alias))
            names.append(F.col(".".join(f"`{p}`" for p in physical.split("."))).alias(alias) if frame is not None
                         else F.lit(None).alias(alias))
        if frame is None:  # a table without rows yet: its columns are all NULL
            if joined is None:
                raise ValueError(f"the base table {source.identifier} of the materialization has no snapshot")
            joined = joined.select("*", *names)
            continue
        frame = frame.select(*KEYS, *names)
        joined = frame if joined is None else joined.join(frame, on=KEYS, how="left")
    assert joined is not None  # the job names the base table first
    columns = []
    for path in job.columns:
        found = [alias for _, alias in sorted(parts.get(path, []))]
        if not found:
            columns.append(F.lit(None).alias(path))  # computed nowhere yet: NULLs, as assemble_flat gives
        else:
            columns.append((F.coalesce(*[F.col(a) for a in found]) if len(found) > 1 else F.col(found[0])).alias(path))
    return joined.select(*KEYS, *columns)


def _read(spark: "SparkSession", catalog_name: str, source: "MaterializeSource", batches: list[str]) -> Any:
    """``source`` at its pinned snapshot, the job's batches only; None for a table without one."""
    from pyspark.sql import functions as F

    from spark_udfs.engine import table_name

    if source.snapshot_id is None:
        return None
    frame = spark.read.option("snapshot-id", str(source.snapshot_id)).table(table_name(catalog_name,
                                                                                        source.identifier))
    return frame.where(F.col(BATCH_COLUMN).isin(batches))
