"""Re-bucketing on Spark: the plan of :mod:`governance.rebucket`, executed by Spark on the staging branch.

The table already has the new count's partition spec (the plan adds it first); what Spark
does is rewrite every row the pinned snapshot holds under that spec, onto the run's
private branch, so the ONE logical commit publishes it like the local engine's rewrite.

How: the rows are read at the pinned snapshot, repartitioned by the new bucket (Iceberg's
``system.bucket`` function, the same hash the spec applies, so each task writes whole
buckets), sorted by (batch, id) within each like the local engine's files - batch pruning
by file bounds stays sharp - and written with ``overwrite(true)``: one snapshot that
deletes every file of the old layout and adds the new ones. Why not
``rewrite_data_files`` with a new spec: with the runtime this project pins (Iceberg 1.10.2)
the procedure reads and commits ``main`` only (see :mod:`spark_udfs.compaction`).

The id index learns the new files and retires the old ones at the logical commit
(``index.staged`` reads what the branch's snapshot added and deleted), as for Spark
compaction and backfills.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.physical import StagedWrite
from spark_udfs.compaction import landed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def rebucket_table_on_spark(spark: "SparkSession", catalog_name: str, writer: StagedWrite, snapshot_id: int,
                            buckets: int, properties: dict[str, str]) -> int:
    """Rewrite every row of ``writer``'s table at ``snapshot_id`` into ``buckets`` id buckets on
    its branch (the writer carries the new count's spec); returns the branch's new head."""
    from pyspark.sql import functions as F

    from spark_udfs.engine import branch_writer, table_name

    writer.ensure_branch()
    before = writer.staged_snapshot_id or writer.base_snapshot_id
    table = writer.catalog.load_table(writer.identifier)
    columns = [f"`{f.name}`" for f in table.schema().fields]
    rows = spark.read.option("snapshot-id", str(snapshot_id)).table(table_name(catalog_name, writer.identifier))
    bucket = F.expr(f"`{catalog_name}`.system.bucket({int(buckets)}, `{ID_COLUMN}`)")
    rows = (rows.select(*columns).repartition(min(int(buckets), 200), bucket)
            .sortWithinPartitions(bucket, BATCH_COLUMN, ID_COLUMN))
    branch_writer(rows, catalog_name, writer, properties).overwrite(F.lit(True))
    return landed(writer, before, "re-bucketing")
