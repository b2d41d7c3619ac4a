"""Physical tables of a family: their schemas, layout, and staged writes.

Every physical table is partitioned ``identity(_ai_append_name_)`` plus
``bucket(N, _ai_unique_id_)`` with the same N across the family: batch pruning for
free, family joins co-partitioned (no shuffle in Spark), and an id lookup plans one
file per table.

Writers never write to ``main`` directly. A :class:`StagedWrite` writes data files,
commits them as one snapshot on a private branch that starts at the snapshot the
current logical version pins, and only the logical commit makes that snapshot
visible (by pinning it). A lost race is handled by re-committing the same files on
top of the winner's snapshot: nothing is recomputed or rewritten.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pyarrow as pa

from catalog_ext import iceberg_io
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from omni_iceberg.errors import SchemaConflictError

STAGING_BRANCH_PREFIX = "omni-stage-"


def iceberg_type(type_str: str) -> Any:
    """Iceberg type string -> pyiceberg type."""
    from pyiceberg import types as T

    simple = {
        "string": T.StringType(), "long": T.LongType(), "int": T.IntegerType(), "double": T.DoubleType(),
        "float": T.FloatType(), "boolean": T.BooleanType(), "binary": T.BinaryType(), "date": T.DateType(),
        "timestamp": T.TimestampType(), "timestamptz": T.TimestamptzType(),
    }
    if type_str in simple:
        return simple[type_str]
    if type_str.startswith("list<") and type_str.endswith(">"):
        return T.ListType(element_id=0, element_type=iceberg_type(type_str[5:-1]), element_required=False)
    raise SchemaConflictError(f"unsupported column type {type_str!r}")


def arrow_type(type_str: str) -> pa.DataType:
    simple = {
        "string": pa.string(), "long": pa.int64(), "int": pa.int32(), "double": pa.float64(),
        "float": pa.float32(), "boolean": pa.bool_(), "binary": pa.binary(), "date": pa.date32(),
        "timestamp": pa.timestamp("us"), "timestamptz": pa.timestamp("us", tz="UTC"),
    }
    if type_str in simple:
        return simple[type_str]
    if type_str.startswith("list<"):
        return pa.list_(arrow_type(type_str[5:-1]))
    raise SchemaConflictError(f"unsupported column type {type_str!r}")


def key_arrow_fields() -> list[pa.Field]:
    return [pa.field(ID_COLUMN, pa.string(), nullable=False), pa.field(BATCH_COLUMN, pa.string(), nullable=False)]


def create_physical_table(
    catalog: Any,
    identifier: str,
    value_columns: dict[str, Any],
    bucket_count: int,
    properties: dict[str, str],
) -> tuple[Any, int]:
    """Create a family member with the key columns plus ``value_columns`` (name -> pyiceberg type).

    Returns the table and its first (empty) snapshot id, which the logical version pins.
    """
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, IdentityTransform
    from pyiceberg.types import NestedField, StringType

    fields = [
        NestedField(1, ID_COLUMN, StringType(), required=True),
        NestedField(2, BATCH_COLUMN, StringType(), required=True),
    ]
    fields += [NestedField(3 + i, name, typ, required=False) for i, (name, typ) in enumerate(value_columns.items())]
    # pyiceberg re-assigns nested ids on create; top-level ids 1 and 2 stay the keys
    schema = Schema(*fields)
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name=BATCH_COLUMN),
        PartitionField(source_id=1, field_id=1001, transform=BucketTransform(bucket_count), name="_ai_id_bucket"),
    )
    table_props = {
        "format-version": "2",
        "write.parquet.compression-codec": "zstd",
        "write.distribution-mode": "hash",
        **properties,
    }
    table = catalog.create_table(identifier, schema=schema, partition_spec=spec, properties=table_props)
    snapshot_id = iceberg_io.commit_empty_snapshot(table, {"omni.operation": "create"})
    return table, snapshot_id


class StagedWrite:
    """Data for one physical table, staged on a private branch until the logical commit."""

    def __init__(self, catalog: Any, identifier: str, base_snapshot_id: int, run_id: str, properties: dict[str, str]):
        self.catalog = catalog
        self.identifier = identifier
        self.base_snapshot_id = base_snapshot_id
        self.branch = f"{STAGING_BRANCH_PREFIX}{run_id}"
        self.properties = dict(properties)
        self.table = catalog.load_table(identifier)
        self.data_files: list[Any] = []
        self.rows = 0
        self.staged_snapshot_id: int | None = None
        self._uuid = uuid.uuid4()
        self._counter = itertools.count()

    def reload(self) -> None:
        """Pick up schema changes made since this write started."""
        self.table = self.catalog.load_table(self.identifier)

    def write(self, data: pa.Table) -> None:
        """Write one chunk as data files now (memory is released), commit later."""
        self.data_files += iceberg_io.write_data_files(self.table, data, self._uuid, self._counter)
        self.rows += data.num_rows

    def stage(self, onto_snapshot_id: int | None = None) -> int:
        """Commit the written files as one snapshot on the staging branch; return its id."""
        onto = self.base_snapshot_id if onto_snapshot_id is None else onto_snapshot_id

        def reset_branch(table):
            ops = table.manage_snapshots()
            if self.branch in table.metadata.refs:
                ops = ops.remove_branch(self.branch)
            ops.create_branch(onto, self.branch).commit()

        iceberg_io.with_table_retry(self.catalog, self.identifier, reset_branch)
        table = iceberg_io.with_table_retry(
            self.catalog, self.identifier,
            lambda t: iceberg_io.commit_data_files(t, self.data_files, self.branch, self.properties),
        )
        self.base_snapshot_id = onto
        self.staged_snapshot_id = table.metadata.refs[self.branch].snapshot_id
        return self.staged_snapshot_id

    def rebase(self, onto_snapshot_id: int) -> int:
        """Re-commit the same data files on top of another writer's snapshot."""
        return self.stage(onto_snapshot_id)

    def publish(self) -> None:
        """After the logical commit: move ``main`` forward to the pinned snapshot, drop the branch.

        Only fast-forwards: if ``main`` already moved past us (a later writer rebased
        on our snapshot), it is left alone. Failure here is harmless - pins, not
        ``main``, define what readers see - so it is best effort.
        """
        def fast_forward(table):
            ops = table.manage_snapshots()
            main = table.metadata.refs.get("main")
            if main is None or _is_ancestor(table, main.snapshot_id, self.staged_snapshot_id):
                ops = ops.set_current_snapshot(self.staged_snapshot_id)
            if self.branch in table.metadata.refs:
                ops = ops.remove_branch(self.branch)
            ops.commit()

        iceberg_io.with_table_retry(self.catalog, self.identifier, fast_forward)

    def abandon(self) -> None:
        """Drop the staging branch of a failed commit; its files become orphans for cleanup."""

        def drop(table):
            if self.branch in table.metadata.refs:
                table.manage_snapshots().remove_branch(self.branch).commit()

        iceberg_io.with_table_retry(self.catalog, self.identifier, drop)


def _is_ancestor(table: Any, ancestor_id: int, snapshot_id: int | None) -> bool:
    current = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    while current is not None:
        if current.snapshot_id == ancestor_id:
            return True
        current = table.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
    return False
