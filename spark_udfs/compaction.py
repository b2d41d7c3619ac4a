"""Compaction on Spark: the plan of :mod:`governance.compaction`, executed by Spark on the staging branch.

Why not Iceberg's ``rewrite_data_files`` procedure: with the runtime this project pins
(Iceberg 1.10.2) the procedure and its action read and commit the table's ``main``
branch only (apache/iceberg#14813). omni's ``main`` is not what readers see - a logical
version pins a snapshot - so a rewrite must happen on the run's private branch and be
published by ONE logical commit like every other governance operation. Branch support
for the procedure arrived later (apache/iceberg#15067, in the 1.11.0 runtime); moving to
it needs the runtime bumped together with the interop tests (see ``spark_udfs.jars``).

What runs instead is Iceberg's own Spark write path: the rows of every partition the
plan chose are read at the pinned snapshot, clustered by partition and sorted by (batch,
id) like the local engine's merged files, and written to the branch with a dynamic
partition overwrite (``overwritePartitions``, Iceberg's ReplacePartitions). An overwrite
replaces whole partitions, so a chosen partition's big files are read and rewritten too -
nothing else is touched, and the rows are the same rows: only their files change. The id
index learns the new files at the logical commit (``index.staged``), as for Spark backfills.

Which rows: a predicate on the partitions themselves, ``<catalog>.system.bucket(N, id) = b``
(and ``batch = 'x'`` for the older (batch, bucket) spec). Iceberg pushes the bucket system
function into scan planning, so only the chosen partitions' files are opened, and a
partition predicate reads whole partitions by construction - what an overwrite needs. A
partition it cannot express (another transform, an unusual batch name) falls back to the
``_file`` metadata column, exact but not pushed down (the scan lists every file).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.errors import OmniError
from catalog_ext.iceberg_io import PLANS
from catalog_ext.physical import StagedWrite

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkCompactionError(OmniError):
    """The Spark rewrite did not land on the staging branch as planned."""


def rewrite_partitions_on_spark(spark: "SparkSession", catalog_name: str, writer: StagedWrite,
                                snapshot_id: int, partition_paths: list[str], properties: dict[str, str]) -> int:
    """Rewrite every partition holding one of ``partition_paths`` on ``writer``'s branch; returns the new head.

    ``partition_paths``: EVERY live file (at ``snapshot_id``) of the partitions to rewrite -
    the overwrite replaces those partitions whole, so a file left out would lose its rows.
    """
    from pyspark.sql import functions as F

    from spark_udfs.engine import branch_writer, table_name

    writer.ensure_branch()
    before = writer.staged_snapshot_id or writer.base_snapshot_id
    table = writer.catalog.load_table(writer.identifier)
    columns = [f.name for f in table.schema().fields]
    predicate = partition_predicate(table, snapshot_id, partition_paths, catalog_name)
    rows = (spark.read.option("snapshot-id", str(snapshot_id)).table(table_name(catalog_name, writer.identifier))
            .select(*columns, "_file", "_partition"))
    rows = rows.where(F.expr(predicate) if predicate else F.col("_file").isin(list(partition_paths)))
    # one task per partition-cluster, each writing its partitions' rows in (batch, id) order:
    # a merged file then covers a narrow batch range, so batch pruning by file statistics stays sharp
    rows = (rows.repartition(F.col("_partition"))
            .sortWithinPartitions("_partition", BATCH_COLUMN, ID_COLUMN)
            .select(*columns))
    branch_writer(rows, catalog_name, writer, properties).overwritePartitions()
    return landed(writer, before, "compaction")


def landed(writer: StagedWrite, before: int | None, operation: str) -> int:
    """The snapshot a Spark rewrite just added to ``writer``'s branch, checked to sit right on ``before``.

    Spark commits to the branch itself; anything else there means another writer shares
    the branch, and the rewrite must not be published.
    """
    head = writer.catalog.load_table(writer.identifier)
    ref = head.metadata.refs.get(writer.branch)
    snap = head.snapshot_by_id(ref.snapshot_id) if ref is not None else None
    if snap is None or snap.parent_snapshot_id != before:
        raise SparkCompactionError(
            f"the Spark rewrite of {writer.identifier} did not land on branch {writer.branch} on top of snapshot "
            f"{before} (head: {getattr(snap, 'snapshot_id', None)}); another writer is using the branch - nothing "
            f"was committed, run the {operation} again")
    writer.staged_snapshot_id = snap.snapshot_id
    return snap.snapshot_id


_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


def partition_predicate(table: Any, snapshot_id: int, paths: list[str], catalog_name: str) -> str | None:
    """Spark SQL selecting exactly the partitions of ``paths`` at ``snapshot_id``; None if one cannot be said.

    Bucket partitions become ``<catalog>.system.bucket(N, col) = b`` (pushed into Iceberg's
    scan planning), identity ones ``col = 'v'`` for plain values only (no quoting to get
    wrong); any other transform gives None and the caller filters by file instead.
    """
    from pyiceberg.transforms import BucketTransform, IdentityTransform

    wanted = set(paths)
    schema = table.schema()
    clauses: set[str] = set()
    for task in PLANS.tasks(table.scan(snapshot_id=snapshot_id)):  # the compaction plan's own planning
        f = task.file
        if f.file_path not in wanted:
            continue
        spec = table.specs()[f.spec_id]
        parts = []
        for i, field in enumerate(spec.fields):
            column = schema.find_column_name(field.source_id)
            value = f.partition[i]
            if column is None or "." in column or value is None:
                return None
            if isinstance(field.transform, BucketTransform):
                parts.append(f"`{catalog_name}`.system.bucket({field.transform.num_buckets}, `{column}`) = {int(value)}")
            elif isinstance(field.transform, IdentityTransform) and _PLAIN_VALUE.match(str(value)):
                parts.append(f"`{column}` = '{value}'")
            else:
                return None
        if not parts:
            return None  # an unpartitioned table: the overwrite would replace it whole
        clauses.add("(" + " AND ".join(parts) + ")")
    return " OR ".join(sorted(clauses)) if clauses else None
