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
from catalog_ext.errors import OmniError
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
    """Yield one batch of the logical table slice by slice, flat columns: memory follows
    ``OMNI_MEMORY_LIMIT_MB`` (:func:`slice_bytes`), not the table.

    Columns are named by logical path (``ProcessedData.parsed_text``), plus the keys.
    A bucket whose parts fit one slice is read whole, as one slice; a larger one is read
    in id ranges (:func:`read_ranges`): the same rows, each range's in the order a whole
    read has them, ranges in id order. A record larger than the limit on its own is a
    :class:`RecordTooLargeError`.
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
        reads = [(planned[key][0], planned[key][1].get(bucket, [])) for key in per_table]
        for datas in read_ranges(reads):
            joined = None
            for data, cols in zip(datas, per_table.values()):
                part = flatten(data, cols)
                joined = part if joined is None else left_join(joined, part)
            out = assemble_flat(state, coalesce_parts(joined), leaves)
            check_records_fit(out, f"batch {batch} of {state.table.identifier}")
            yield out


#: one slice of a read may take this share of ``OMNI_MEMORY_LIMIT_MB``: a slice is held a few
#: times over (the parts read, their join, the caller's copy and what it computes from it)
SLICE_SHARE = 16
#: id ranges are cut on the ids' first four characters (md5 and uuid ids are hex there)
RANGE_DIGITS = 4


class RecordTooLargeError(OmniError):
    """One record is larger than the memory one local operation may hold (``OMNI_MEMORY_LIMIT_MB``)."""

    exit_code = 2


def memory_limit_bytes() -> int:
    """``OMNI_MEMORY_LIMIT_MB`` in bytes."""
    from catalog_ext import settings

    return int(settings.value("OMNI_MEMORY_LIMIT_MB") * (1 << 20))


def slice_bytes() -> int:
    """Arrow bytes one slice of a bounded read aims at: the limit / :data:`SLICE_SHARE`."""
    return max(1 << 20, memory_limit_bytes() // SLICE_SHARE)


def id_ranges(count: int) -> list[tuple[str | None, str | None]]:
    """``count`` id ranges ``[lo, hi)`` (None: unbounded) covering every string, in id order.

    Cut evenly on the first :data:`RANGE_DIGITS` hex characters, where md5 and uuid ids
    are uniform; any other id still falls in exactly one range (the cuts are plain string
    comparisons), only the ranges may then be uneven.

    >>> id_ranges(1)
    [(None, None)]
    >>> id_ranges(4)
    [(None, '4000'), ('4000', '8000'), ('8000', 'c000'), ('c000', None)]
    """
    span = 16 ** RANGE_DIGITS
    count = max(1, min(count, span))
    cuts = [None] + [format(j * span // count, f"0{RANGE_DIGITS}x") for j in range(1, count)] + [None]
    return list(zip(cuts[:-1], cuts[1:]))


def range_filter(lo: str | None, hi: str | None) -> Any:
    """The Arrow filter of ids in ``[lo, hi)``; None for the unbounded range."""
    import pyarrow.dataset as ds

    out = None
    if lo is not None:
        out = ds.field(ID_COLUMN) >= lo
    if hi is not None:
        out = (ds.field(ID_COLUMN) < hi) if out is None else out & (ds.field(ID_COLUMN) < hi)
    return out


def ranges_for(reads: list[tuple[Any, list[Any]]], budget: int | None = None) -> tuple[int, int]:
    """(how many id ranges, rows read per record batch) for reading ``reads`` within ``budget`` bytes."""
    from catalog_ext import iceberg_io

    budget = budget or slice_bytes()
    sizes = [iceberg_io.estimate_arrow_bytes(scan, tasks) for scan, tasks in reads if tasks]
    count = max(1, -(-sum(sizes) // budget))
    # a record batch read before the range filter: a quarter of the budget, spread over the tables
    rows = max((sum(t.file.record_count for t in tasks) for _, tasks in reads), default=0)
    per_row = max(1, sum(sizes) // max(1, rows))
    return count, max(256, budget // 4 // per_row)


def read_ranges(reads: list[tuple[Any, list[Any]]], budget: int | None = None):
    """Yield, per id range, one Arrow table per ``(scan, tasks)`` of ``reads``: the tasks' rows in that range.

    Rows of one id-bucket sit in a different order in each physical table, so a slice of
    one table's rows would need every row of the others to join: a range of ids is the
    slice every table can read on its own. When the reads fit ``budget`` (default
    :func:`slice_bytes`) they are read whole, one "range", exactly as :func:`read_tasks`
    reads them; otherwise each range streams every file once through the range filter
    (record batches of a quarter of the budget), so a bucket of N budgets costs N reads
    of its files and holds one range.
    """
    from catalog_ext import iceberg_io

    count, batch_rows = ranges_for(reads, budget)
    if count == 1:
        yield [iceberg_io.read_tasks(scan, tasks) for scan, tasks in reads]
        return
    for lo, hi in id_ranges(count):
        where = range_filter(lo, hi)
        out = []
        for scan, tasks in reads:
            batches = list(iceberg_io.iter_task_batches(scan, tasks, where, batch_rows))
            out.append(pa.Table.from_batches(batches) if batches else iceberg_io.read_tasks(scan, []))
        yield out


def record_bytes(data: pa.Table) -> Any:
    """Bytes each row of ``data`` holds (variable-width values by their length, fixed ones by width)."""
    import numpy as np

    total = np.zeros(data.num_rows, dtype=np.int64)

    def add(arr: Any) -> None:
        nonlocal total
        t = arr.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                add(pc.struct_field(arr, [i]))
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
                or pa.types.is_large_binary(t):
            total += pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            total += pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64) * 8
        else:
            try:
                total += t.bit_width // 8
            except ValueError:
                pass

    for column in data.columns:
        add(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    return total


def check_records_fit(data: pa.Table, where: str, limit: int | None = None) -> None:
    """Raise :class:`RecordTooLargeError` when one row of ``data`` alone holds more than the limit.

    Only a slice larger than the limit can hold such a row, so others cost nothing.
    """
    limit = limit or memory_limit_bytes()
    if data.nbytes <= limit or not data.num_rows:
        return
    sizes = record_bytes(data)
    at = int(sizes.argmax())
    if int(sizes[at]) > limit:
        rid = data.column(ID_COLUMN)[at].as_py() if ID_COLUMN in data.column_names else f"row {at}"
        raise RecordTooLargeError(
            f"record {rid} of {where} holds {int(sizes[at]):,} bytes, more than OMNI_MEMORY_LIMIT_MB "
            f"({limit / (1 << 20):g} MiB) lets one operation hold; raise OMNI_MEMORY_LIMIT_MB to read it; "
            "nothing was committed")


def assemble_flat(state: FamilyState, joined: pa.Table, leaves: list[str]) -> pa.Table:
    """The keys, then one column per leaf path in ``leaves`` order; a leaf computed nowhere yet is all NULLs."""
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
