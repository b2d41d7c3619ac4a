"""Regroup on Spark: the plan of :mod:`governance.column_groups`, executed by Spark on the staging branches.

The job (:class:`governance.rewrite.RegroupJob`) names the column group (the writer's table,
at its pinned snapshot) and the feature tables moving into it, each at its pinned snapshot
with the columns it brings. Spark reads them with Iceberg's reader and FULL OUTER JOINs
them on the keys (batch, id), a moved value winning over the group's own (COALESCE, the
member last read first) - the rows :func:`governance.column_groups._merge_by_keys` gives
bucket by bucket. Every family table is ``bucket(N, id)`` with one N, so the joins may run
storage-partitioned (:data:`spark_udfs.materialize.SPJ_CONF`, for the job only).

What is replaced: the group's partitions (id buckets) the members hold rows in, with a
dynamic partition overwrite (``overwritePartitions``) on the group's branch - the group's
rows there are read whole and written back with the moved values, so a bucket is either
untouched or rewritten with every row it had. The local engine replaces only the group
files of the moved batches; the rows are the same, the files differ. The members' files
are deleted on their own branches by ``job.empty_members()`` (catalog metadata, no data
read), as the local engine does. The id index learns the group's new files and retires
the members' at the logical commit (``index.staged``), as for compaction on Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.iceberg_io import PLANS, bucket_position
from spark_udfs.compaction import landed
from spark_udfs.materialize import SPJ_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from governance.rewrite import RegroupJob

KEYS = [ID_COLUMN, BATCH_COLUMN]


def regroup_on_spark(spark: "SparkSession", catalog_name: str, job: "RegroupJob", properties: dict[str, str]) -> int:
    """Write the group's merged buckets onto its branch and empty the members; returns the group's new head."""
    from pyspark.sql import functions as F

    from spark_udfs.engine import branch_writer, session_conf, table_name

    writer = job.writer
    writer.ensure_branch()
    before = writer.staged_snapshot_id or writer.base_snapshot_id
    found = [member_buckets(writer.catalog, m.identifier, m.snapshot_id, job.bucket_count) for m in job.members]
    # a member with files of another bucket count (none after a re-bucketing): every group bucket is rewritten
    buckets = None if any(b is None for b in found) else sorted(set().union(*found))
    group = writer.catalog.load_table(writer.identifier)  # after the plan added its new columns
    columns = [f.name for f in group.schema().fields]
    with session_conf(spark, SPJ_CONF):
        merged = spark.read.option("snapshot-id", str(job.snapshot_id)).table(table_name(catalog_name,
                                                                                         writer.identifier))
        if buckets is not None:
            merged = merged.where(F.expr(f"`{catalog_name}`.system.bucket({int(job.bucket_count)}, `{ID_COLUMN}`) "
                                         f"IN ({', '.join(str(int(b)) for b in buckets) or 'NULL'})"))
        # a time-travel read has the snapshot's schema: the columns this regroup adds are not there yet
        present = set(merged.columns)
        merged = merged.select(*[F.col(f"`{c}`") if c in present else F.lit(None).alias(c) for c in columns])
        for m in job.members:
            moved = dict(m.columns)  # physical -> group column
            frame = (spark.read.option("snapshot-id", str(m.snapshot_id)).table(table_name(catalog_name, m.identifier))
                     .select(*KEYS, *[F.col(".".join(f"`{p}`" for p in physical.split("."))).alias(f"_new_{col}")
                                      for physical, col in moved.items()]))
            merged = merged.join(frame, on=KEYS, how="full_outer")
            merged = merged.select(*KEYS, *[
                (F.coalesce(F.col(f"`_new_{c}`"), F.col(f"`{c}`")) if c in moved.values() else F.col(f"`{c}`")).alias(c)
                for c in columns if c not in KEYS])
        types = {f.name: f.dataType for f in spark.table(table_name(catalog_name, writer.identifier)).schema.fields}
        merged = merged.select(*[F.col(f"`{c}`").cast(types[c]).alias(c) for c in columns])
        bucket = F.expr(f"`{catalog_name}`.system.bucket({int(job.bucket_count)}, `{ID_COLUMN}`)")
        merged = (merged.repartition(min(len(buckets) if buckets is not None else int(job.bucket_count), 200), bucket)
                  .sortWithinPartitions(bucket, BATCH_COLUMN, ID_COLUMN))
        branch_writer(merged, catalog_name, writer, properties).overwritePartitions()
    head = landed(writer, before, "regroup")
    if job.empty_members is not None:
        job.empty_members()
    return head


def member_buckets(catalog: Any, identifier: str, snapshot_id: int | None, count: int) -> set[int] | None:
    """The ``bucket(count, id)`` buckets a table's files at ``snapshot_id`` are in (planning only);
    None when a file is bucketed by another count."""
    if snapshot_id is None:
        return set()
    table = catalog.load_table(identifier)
    specs = table.metadata.specs()
    out = set()
    for task in PLANS.tasks(table.scan(snapshot_id=snapshot_id)):
        spec = specs[task.file.spec_id]
        at = bucket_position(spec)
        if spec.fields[at].transform.num_buckets != count:
            return None
        out.add(task.file.partition[at])
    return out
