"""Read a logical table at one version straight from its pinned physical snapshots.

Only the physical tables holding the requested columns are scanned (column pruning),
only the requested batches are planned (partition pruning on ``_ai_append_name_``),
and every scan reads the exact snapshot the version pins.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES, check_batch_name
from catalog_ext.family import FamilyState
from catalog_ext.physical import arrow_type

KEYS = [ID_COLUMN, BATCH_COLUMN]


def expand_columns(state: FamilyState, columns: list[str] | None) -> tuple[list[str], list[str]]:
    """Requested names -> (output names, leaf logical paths). ``RawData`` expands to its fields."""
    from catalog_ext.errors import SchemaConflictError

    requested = columns or state.top_level_columns()
    leaves: list[str] = []
    for name in requested:
        if name in KEYS:
            continue
        if name in STAGES:
            leaves += [c.path for c in state.stage_fields(name)]
        elif state.has_column(name):
            leaves.append(name)
        else:
            from catalog_ext.suggest import did_you_mean

            known = [c.path for c in state.columns] + list(STAGES)
            raise SchemaConflictError(f"no column {name!r} in {state.table.identifier}{did_you_mean(name, known)}")
    return list(requested), list(dict.fromkeys(leaves))


def leaf_paths(state: FamilyState, columns: list[str]) -> list[str]:
    """Logical paths of the values read: stage structs expand to their fields, keys are left out."""
    out = []
    for c in columns:
        if c in STAGES:
            out += [f.path for f in state.stage_fields(c)]
        elif c not in KEYS:
            out.append(c)
    return out


def read_logical(catalog: Any, state: FamilyState, columns: list[str] | None = None,
                 batches: list[str] | None = None) -> pa.Table:
    out_names, leaves = expand_columns(state, columns)
    for b in batches or ():
        check_batch_name(b)
    per_table = plan_columns(state, leaves)
    joined: pa.Table | None = None
    for key, cols in per_table.items():
        part = _scan(catalog, state, key, cols, batches)
        joined = part if joined is None else left_join(joined, part)
    assert joined is not None
    return assemble(state, coalesce_parts(joined), out_names, leaves)


def left_join(left: pa.Table, right: pa.Table) -> pa.Table:
    """``left`` LEFT JOIN ``right`` ON the keys, left's rows in order, payloads of any type.

    Arrow's hash join carries no list, struct or map payload ("not supported in join
    non-key field"): a feature with a ``list<string>`` output could not be read with
    another table's columns. So only the keys and row numbers are joined, and every
    payload column is taken by row number.
    """
    import numpy as np

    rows = lambda n: pa.array(np.arange(n, dtype=np.int64))  # noqa: E731
    lk = pa.table({ID_COLUMN: left.column(ID_COLUMN), BATCH_COLUMN: left.column(BATCH_COLUMN),
                   "__left": rows(left.num_rows)})
    rk = pa.table({ID_COLUMN: right.column(ID_COLUMN), BATCH_COLUMN: right.column(BATCH_COLUMN),
                   "__right": rows(right.num_rows)})
    pairs = lk.join(rk, keys=KEYS, join_type="left outer").sort_by("__left")
    out = left.take(pairs.column("__left"))
    taken = right.take(pairs.column("__right"))
    for name in right.column_names:
        if name not in KEYS:
            out = out.append_column(name, taken.column(name))
    return out


#: marks the second and later part of a column read from several tables (column groups):
#: ``quality`` from the group, ``quality\x1fpart1`` from the feature table, until coalesced
PART_MARK = "\x1fpart"


def logical_of(name: str) -> str:
    """The logical path a planned column name reads (``path`` or a part of it)."""
    return name.split(PART_MARK, 1)[0]


def plan_columns(state: FamilyState, leaves: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Physical table key -> [(physical column, name in the joined result)], base table first.

    A column with several parts (:meth:`FamilyState.read_parts`) is read from each of
    its tables; :func:`coalesce_parts` folds them into one column after the join.
    """
    per_table: dict[str, list[tuple[str, str]]] = {state.base_table.key: []}
    for path in leaves:
        for i, pc in enumerate(state.read_parts(path)):
            per_table.setdefault(pc.table, []).append((pc.name, path if i == 0 else f"{path}{PART_MARK}{i}"))
    return per_table


def coalesce_parts(joined: pa.Table) -> pa.Table:
    """Fold every ``path\x1fpartN`` column into ``path`` (COALESCE; the parts are disjoint)."""
    marked = [n for n in joined.column_names if PART_MARK in n]
    if not marked:
        return joined
    for name in marked:
        path = logical_of(name)
        extra = joined.column(name)
        if path in joined.column_names:
            i = joined.column_names.index(path)
            joined = joined.set_column(i, path, pc.coalesce(joined.column(path), extra))
        else:
            joined = joined.append_column(path, extra)
        joined = joined.drop_columns([name])
    return joined


def iter_logical_slices(catalog: Any, state: FamilyState, columns: list[str], batch: str):
    """Yield one batch of the logical table bucket by bucket (bounded memory), flat columns.

    Columns are named by logical path (``ProcessedData.parsed_text``), plus the keys.
    """
    from catalog_ext import iceberg_io
    from pyiceberg.expressions import EqualTo

    _, leaves = expand_columns(state, columns)
    check_batch_name(batch)
    per_table = plan_columns(state, leaves)
    planned = {}
    for key, cols in per_table.items():
        meta = state.physical_table(key)
        table = catalog.load_table(meta.identifier)
        # nested names (RawData.url) read only that field, not the whole struct
        top = tuple(KEYS + list(dict.fromkeys(n for n, _ in cols)))
        planned[key] = iceberg_io.scan_tasks_by_bucket(table, meta.snapshot_id, top, EqualTo(BATCH_COLUMN, batch))
    base_scan, base_groups = planned[state.base_table.key]
    for bucket in sorted(base_groups):
        joined = None
        for key, cols in per_table.items():
            scan, groups = planned[key]
            data = iceberg_io.read_tasks(scan, groups.get(bucket, []))
            part = flatten(data, cols)
            joined = part if joined is None else left_join(joined, part)
        yield _assemble_flat(state, coalesce_parts(joined), leaves)


def _assemble_flat(state: FamilyState, joined: pa.Table, leaves: list[str]) -> pa.Table:
    n = joined.num_rows
    arrays = [joined.column(ID_COLUMN), joined.column(BATCH_COLUMN)]
    for path in leaves:
        arrays.append(joined.column(path) if path in joined.column_names
                      else pa.chunked_array([pa.nulls(n, type=arrow_type(state.column(path).type))]))
    return pa.Table.from_arrays(arrays, names=KEYS + leaves)


def _scan(catalog, state: FamilyState, key: str, cols: list[tuple[str, str]], batches) -> pa.Table:
    from pyiceberg.expressions import AlwaysTrue, In

    table_meta = state.physical_table(key)
    table = catalog.load_table(table_meta.identifier)
    top = list(dict.fromkeys(name for name, _ in cols))  # nested names read only that field
    row_filter = In(BATCH_COLUMN, set(batches)) if batches else AlwaysTrue()
    data = table.scan(row_filter=row_filter, snapshot_id=table_meta.snapshot_id,
                      selected_fields=tuple(KEYS + top)).to_arrow()
    return flatten(data, cols)


def flatten(data: pa.Table, cols: list[tuple[str, str]]) -> pa.Table:
    """One column per logical path: joins cannot carry struct payloads."""
    # pyiceberg hands back string or large_string depending on the path; joins need one type
    arrays = [data.column(ID_COLUMN).cast(pa.string()), data.column(BATCH_COLUMN).cast(pa.string())]
    names = list(KEYS)
    for physical, logical in cols:
        parts = physical.split(".")
        arr = data.column(parts[0])
        for sub in parts[1:]:
            arr = pc.struct_field(arr, sub)
        if pa.types.is_large_string(arr.type):
            arr = arr.cast(pa.string())
        arrays.append(arr)
        names.append(logical)
    return pa.Table.from_arrays(arrays, names=names)


def assemble(state: FamilyState, joined: pa.Table, out_names: list[str], leaves: list[str]) -> pa.Table:
    """Logical rows from flat parts joined on the keys: columns ``out_names``, each stage a struct
    of its ``leaves``, a column computed nowhere yet all NULLs."""
    n = joined.num_rows
    present = set(joined.column_names)

    def leaf(path: str) -> pa.ChunkedArray | pa.Array:
        if path in present:
            return joined.column(path)
        return pa.nulls(n, type=arrow_type(state.column(path).type))  # not computed anywhere yet

    arrays, names = [], []
    for name in out_names:
        if name in KEYS:
            arrays.append(joined.column(name))
        elif name in STAGES:
            fields = state.stage_fields(name)
            children = [pa.chunked_array(leaf(f.path)).combine_chunks() if n else pa.array([], arrow_type(f.type))
                        for f in fields]
            arrays.append(pa.StructArray.from_arrays(children, names=[f.leaf for f in fields]))
        else:
            arrays.append(leaf(name))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)
