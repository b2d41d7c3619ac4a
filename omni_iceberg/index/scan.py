"""The fallback: find ids by a bucket-pruned scan of one physical table's pinned snapshot.

Every family table is partitioned by ``bucket(N, _ai_unique_id_)``, so the files that can
hold an id are known from the id alone. The buckets of the asked ids are computed once
(Iceberg's own bucket transform, so they agree with what writers wrote), only the data
files of those buckets are read, and the ids are then matched in Arrow.

Why not ``table.scan(row_filter=In(id, ids))``: pyiceberg re-projects every literal of
an ``In`` through the bucket transform and re-binds it for every data file; with 1,000
ids that costs seconds per table before a byte is read (measured: 2.5 s for 17 files).
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext.contract import ID_COLUMN
from catalog_ext.family import FamilyState


def buckets_of(ids: Sequence[str], bucket_count: int) -> set[int]:
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import StringType

    fn = BucketTransform(bucket_count).transform(StringType())
    return {fn(i) for i in ids}


def bucket_scan(catalog: Any, state: FamilyState, table_key: str, ids: Sequence[str],
                columns: Sequence[str]) -> pa.Table:
    """Rows of ``table_key`` at its pinned snapshot whose id is in ``ids``.

    ``columns`` are physical names; a nested one (``RawData.url``) reads only that leaf.
    """
    from pyiceberg.expressions import AlwaysTrue

    from catalog_ext import iceberg_io

    meta = state.physical_table(table_key)
    selected = tuple(dict.fromkeys([ID_COLUMN, *columns]))
    table = catalog.load_table(meta.identifier)
    if meta.snapshot_id is None or not ids:
        return table.scan(selected_fields=selected, limit=0).to_arrow()
    scan, groups = iceberg_io.scan_tasks_by_bucket(table, meta.snapshot_id, selected, AlwaysTrue())
    tasks = [t for b in sorted(buckets_of(ids, state.table.bucket_count)) for t in groups.get(b, [])]
    data = iceberg_io.read_tasks(scan, tasks)
    if data.num_rows == 0:
        return data
    id_col = data.column(ID_COLUMN)
    return data.filter(pc.is_in(id_col, value_set=pa.array(list(ids), id_col.type)))
