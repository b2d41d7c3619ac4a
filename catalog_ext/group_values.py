"""Values of column groups that other writers must change: helpers shared by governance
(``governance/column_groups.py``: regroup, split) and the backfill core.

A backfill that recomputes stale batches of a grouped column must null the group's old
values of those batches in its own logical commit (:func:`null_recomputed`); that is a
core write path, so it lives here, under ``catalog_ext``, not in ``governance``.
"""

from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext.contract import BATCH_COLUMN
from catalog_ext.family import FamilyState, PhysicalTable
from catalog_ext.physical import file_batch_bounds
from catalog_ext.store import FamilyStore


def bucket_files(store: FamilyStore, t: PhysicalTable) -> tuple[Any, dict[int, list[Any]]]:
    """A physical table and its data files at its pinned snapshot, by id bucket."""
    from catalog_ext import iceberg_io
    from pyiceberg.expressions import AlwaysTrue

    ice = store.catalog.load_table(t.identifier)
    if t.snapshot_id is None:
        return ice, {}
    _, groups = iceberg_io.scan_tasks_by_bucket(ice, t.snapshot_id, ("*",), AlwaysTrue())
    return ice, {b: [task.file for task in tasks] for b, tasks in groups.items()}


def batches_in(table: Any, data_file: Any, batches: Iterable[str]) -> list[str]:
    """Those of ``batches`` a data file may hold rows of, in their order (its batch bounds,
    decoded once; no bounds: every one)."""
    lo, hi = file_batch_bounds(table, data_file)
    if lo is None or hi is None:
        return list(batches)
    return [b for b in batches if lo <= b <= hi]


def overlaps_batches(table: Any, data_file: Any, batches: Iterable[str]) -> bool:
    """Whether a data file may hold rows of ``batches`` (its batch bounds; no bounds: it may)."""
    return bool(batches_in(table, data_file, batches))


def null_recomputed(store: FamilyStore, state: FamilyState, recomputed: dict[str, set[str]], run_id: str
                    ) -> list[tuple[PhysicalTable, Any]]:
    """Null, in each column group, the values of logical columns recomputed for some batches.

    ``recomputed`` maps a logical column to the batches a backfill recomputes (stale
    units): their new values go to the feature table, so the group's old values must go,
    in the backfill's own logical commit, or COALESCE would return them for the records
    that now fail. Returns (group, staged writer) pairs to pin; rewrites only the group
    files of those batches.
    """
    from catalog_ext.iceberg_io import read_data_files

    by_group: dict[str, dict[str, set[str]]] = {}
    for path, batches in recomputed.items():
        for p in state.physical_columns_of(path):
            if state.physical_table(p.table).role == "column-group":
                by_group.setdefault(p.table, {}).setdefault(p.name, set()).update(batches)
    out = []
    for key, columns in by_group.items():
        group = state.physical_table(key)
        ice, files = bucket_files(store, group)
        w = store.staged_write(state, group.identifier, group.snapshot_id, run_id,
                               {"omni.operation": "backfill", "omni.run-id": run_id}, rebasable=False)
        w.abandon()  # a branch an earlier attempt of this run left: start again from the pinned snapshot
        schema = ice.schema().as_arrow()
        every = set().union(*columns.values())
        for _bucket, in_bucket in sorted(files.items()):
            touched = [f for f in in_bucket if overlaps_batches(ice, f, every)]
            if not touched:
                continue
            data = read_data_files(ice, touched).cast(schema)
            batch = data.column(BATCH_COLUMN)
            for col, batches in columns.items():
                hit = pc.is_in(batch, pa.array(sorted(batches), pa.string()))
                i = data.column_names.index(col)
                data = data.set_column(i, col, pc.if_else(hit, pa.nulls(data.num_rows, data.schema.field(col).type),
                                                          data.column(col)))
            w.write_replacement(touched, data)
        if w.replacing:
            w.commit_replacements({"omni.nulled": ",".join(sorted(columns))[:1000]})
            out.append((group, w))
    return out
