"""``lookup_rows``: logical rows of a loaded version for a list of ids, read through the index.

Per physical table the version needs (the base table, plus those holding the asked
columns): if the index is authoritative there (see :mod:`omni_iceberg.index.core`),
read exactly the rows it names - only those data files, only the row groups holding
the positions, only the asked columns - and check each row's id against the one asked
for; otherwise, or if any check fails, run a bucket-pruned scan of the pinned snapshot
for just these ids. The parts are joined on the keys like any logical read, so the
result has the same shape and types as :meth:`Omni.read`, plus ``_found``.

The common case - every table answered from the index's inline values - skips the
join: a few ids become Python rows (:func:`_rowwise`), many are decoded as arrays and
placed by their asked position (:func:`_inline_by_position`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES
from catalog_ext.family import FamilyState
from catalog_ext.physical import arrow_type
from omni_iceberg.index.backend import POSITION_BYTES
from omni_iceberg.index.core import EntryRows, IdIndex, IndexView, TableEntries
from omni_iceberg.index.inline import count_distinct, decode_column_arrays, decode_row, distinct_small
from omni_iceberg.index.keys import ID_BYTES, check_ids
from omni_iceberg.read.reader import coalesce_parts, logical_of

FOUND_COLUMN = "_found"
#: from this many rows of a table on, inline values are decoded as whole arrays
#: (:func:`_inline_part`, ~0.6 ms a table whatever the rows); below, row by row
#: (~17 us a row): a 1-id lookup stays ~2 ms, a 1,000-id one drops from ~55 to ~25 ms
ARRAY_DECODE_MIN_ROWS = 32
KEYS = [ID_COLUMN, BATCH_COLUMN]
ID_HEX = 2 * ID_BYTES  # characters of a checked id


@dataclass
class TableAccess:
    """How one physical table was read, for the explain info."""

    key: str
    identifier: str
    snapshot_id: int | None
    method: str  # "index" or "scan"
    reason: str = ""
    files_read: int = 0  # data files opened
    files_inline: int = 0  # data files whose rows were answered from the index's inline values
    rows: int = 0


@dataclass
class Lookup:
    """The rows of a lookup and how they were found."""

    rows: pa.Table
    logical_table: str
    version: int
    index: str
    not_found: list[str] = field(default_factory=list)
    tables: list[TableAccess] = field(default_factory=list)

    def explain(self) -> dict[str, Any]:
        return {
            "logical_table": self.logical_table, "version": self.version, "index": self.index,
            "ids": self.rows.num_rows, "not_found": self.not_found,
            "tables": [t.__dict__ for t in self.tables],
        }

    def explain_text(self) -> str:
        lines = [f"lookup of {self.rows.num_rows} id(s) in {self.logical_table} at version {self.version} "
                 f"(index: {self.index}); {len(self.not_found)} not found"]
        for t in self.tables:
            how = (f"index -> {t.files_read} data file(s) read, {t.files_inline} answered from inline values"
                   if t.method == "index" else f"bucket-pruned scan (fallback: {t.reason})")
            lines.append(f"  {t.key} = {t.identifier}@{t.snapshot_id}: {how}, {t.rows} row(s)")
        return "\n".join(lines)


def lookup_rows(catalog: Any, state: FamilyState, index: IdIndex, ids: Sequence[str],
                columns: list[str] | None = None, *, force_scan: bool = False) -> Lookup:
    """Logical rows of version ``state`` for ``ids`` (see :func:`omni_iceberg.explore.lookup.get_rows`,
    which loads the version by name; a service pinned to one version calls this directly).

    ``force_scan`` skips the index: the bucket-pruned scan the lookup falls back to,
    for comparisons (benchmarks) and for checking the index against the tables.
    """
    wanted = check_ids(ids)
    plan = _plan(state, columns)
    out_names, leaves, per_table = plan.out_names, plan.leaves, plan.per_table
    view = index.at(catalog, state)
    result = Lookup(pa.table({}), state.table.identifier, state.version, index.backend.location)
    indexed = [] if force_scan else [k for k in per_table if view.coverage(k).authoritative]
    if len(wanted) <= ROWWISE_MAX_IDS and indexed and len(indexed) == len(per_table):
        few = view.entry_rows_of(indexed, wanted)
        rows = _rowwise(state, plan, few, wanted, result)
        if rows is not None:
            result.rows = rows
            return result
        entries = few.as_entries(wanted)
    else:
        entries = view.entries_of(indexed, wanted) if indexed else {}
    # the asked ids as Arrow, made once: every table's entries hold the same list
    asked_ids = _string_array(next(iter(entries.values())).ids) if entries else None
    if entries and len(indexed) == len(per_table):
        rows = _inline_by_position(state, plan, entries, wanted, asked_ids, result)
        if rows is not None:
            result.rows = rows
            return result
    parts: list[tuple[pa.Table, np.ndarray | None]] = []
    for key, cols in per_table.items():
        inline = None
        if key in entries and len(entries[key].asked) >= ARRAY_DECODE_MIN_ROWS:
            inline = _inline_part(entries[key], cols, plan.types, asked_ids)
        if inline is not None:
            part, asked = inline
            identifier, snapshot_id = plan.snapshots[key]
            access = TableAccess(key, identifier, snapshot_id, "index",
                                 files_inline=count_distinct(entries[key].codes, len(entries[key].files)),
                                 rows=part.num_rows)
        else:  # some row needs its data file (or the index lags): rows located one by one
            located = entries[key].locations() if key in entries else None
            part, access, asked = _table_part(view, key, cols, wanted, state, force_scan, located)
        result.tables.append(access)
        parts.append((part, asked))
    # a left join keeps its left side's rows in order: the base part's asked positions,
    # when it has them, say where each joined row goes in the answer
    result.rows = _finish(state, coalesce_parts(_join_parts(parts, len(wanted))), out_names, leaves, wanted,
                          result, parts[0][1] if parts else None)
    return result


#: up to this many ids, a lookup wholly answered from inline values is built row by row:
#: the entries decoded straight to Python values and one Arrow table made at the end.
#: Per-table Arrow work (decode, join, assemble: ~0.2 ms a physical table) was most of a
#: one-id lookup; per row it costs ~15 us a table, so it loses to arrays past a few dozen ids
ROWWISE_MAX_IDS = 16


@dataclass(frozen=True)
class _LookupPlan:
    """What a lookup of some columns at one version reads and returns, made once per (state, columns)."""

    out_names: list[str]
    leaves: list[str]
    per_table: dict[str, list[tuple[str, str]]]
    #: the result's schema (as :func:`_finish` builds it): output columns, the id, ``_found``
    schema: pa.Schema
    #: per output column: a key, a stage struct (its fields' leaf names and paths) or a leaf path
    shapes: list[tuple[str, Any]]
    #: the Arrow type of every logical column (or column part) ``per_table`` reads
    types: dict[str, pa.DataType]
    #: per table of ``per_table``: the distinct physical leaves it reads
    leaves_of: dict[str, tuple[str, ...]]
    #: ``schema`` as one struct type (a result built row by row is one struct array)
    row_type: pa.StructType
    #: per table of ``per_table``: its identifier and the snapshot the version pins
    snapshots: dict[str, tuple[str, int | None]]


_PLANS: "OrderedDict[tuple[int, tuple[str, ...] | None], tuple[FamilyState, _LookupPlan]]" = OrderedDict()
_PLANS_MAX = 64


def _plan(state: FamilyState, columns: list[str] | None) -> _LookupPlan:
    """The lookup plan, cached by the state's identity (a state is immutable) and the columns."""
    from omni_iceberg.read.reader import expand_columns, plan_columns

    key = (id(state), tuple(columns) if columns is not None else None)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is state:
        return hit[1]
    out_names, leaves = expand_columns(state, columns)
    fields, shapes = [], []
    for name in out_names:
        if name in KEYS:
            fields.append(pa.field(name, pa.string()))
            shapes.append(("key", name))
        elif name in STAGES:
            stage = state.stage_fields(name)
            fields.append(pa.field(name, pa.struct([pa.field(f.leaf, arrow_type(f.type)) for f in stage])))
            shapes.append(("stage", [(f.leaf, f.path) for f in stage]))
        else:
            fields.append(pa.field(name, arrow_type(state.column(name).type)))
            shapes.append(("leaf", name))
    if ID_COLUMN not in out_names:
        fields.append(pa.field(ID_COLUMN, pa.string()))
        shapes.append(("key", ID_COLUMN))
    fields.append(pa.field(FOUND_COLUMN, pa.bool_()))
    per_table = plan_columns(state, leaves)
    types = {lg: arrow_type(state.column(logical_of(lg)).type) for cols in per_table.values() for _, lg in cols}
    leaves_of = {key: tuple(dict.fromkeys(p for p, _ in cols)) for key, cols in per_table.items()}
    metas = {key: state.physical_table(key) for key in per_table}
    snapshots = {key: (meta.identifier, meta.snapshot_id) for key, meta in metas.items()}
    plan = _LookupPlan(out_names, leaves, per_table, pa.schema(fields), shapes, types, leaves_of,
                       pa.struct(fields), snapshots)
    _PLANS[key] = (state, plan)  # holding the state keeps its id from being reused
    while len(_PLANS) > _PLANS_MAX:
        _PLANS.popitem(last=False)
    return plan


def _rowwise(state: FamilyState, plan: _LookupPlan, few: EntryRows, wanted: list[str],
             result: Lookup) -> pa.Table | None:
    """A few ids' logical rows decoded from inline values row by row; None when any entry
    cannot be (a column not inlined, an id with several rows in a table, bytes that do not
    fit their layout, a value its logical type refuses): the caller then goes by arrays.
    """
    found, files = few.by_table, few.file_table.files
    per_id: list[dict[str, Any] | None] = [None] * len(wanted)  # the base table's row of each asked id
    accesses: list[TableAccess] = []  # kept only if every table is answered here
    for n, (key, cols) in enumerate(plan.per_table.items()):
        need = plan.leaves_of[key]
        seen: set[int] = set()
        for at, fid, value in found[key]:
            if at in seen:
                return None  # several rows of one id in one table: the general join decides
            seen.add(at)
            rec, layout = files[fid]
            if len(value) != POSITION_BYTES + layout.row_bytes or not all(p in layout.names for p in need):
                return None
            leaves = need if rec.batch else need + (BATCH_COLUMN,)
            if not rec.batch and BATCH_COLUMN not in layout.names:
                return None
            got = decode_row(layout, value, POSITION_BYTES, leaves)
            batch = rec.batch or got[BATCH_COLUMN]
            if n == 0:
                row = per_id[at] = {BATCH_COLUMN: batch}
            else:
                row = per_id[at]
                if row is None or row[BATCH_COLUMN] != batch:
                    continue  # a LEFT JOIN on (id, batch): no base row, or another batch's row
            for phys, logical in cols:
                path = logical_of(logical)
                if row.get(path) is None:  # a column's later parts fill what earlier ones left null
                    row[path] = got[phys]
        identifier, snapshot_id = plan.snapshots[key]
        accesses.append(TableAccess(key, identifier, snapshot_id, "index",
                                    files_inline=len({fid for _, fid, _ in found[key]}), rows=len(seen)))
    out: list[dict[str, Any]] = []
    for rid, row in zip(wanted, per_id):
        made: dict[str, Any] = {FOUND_COLUMN: row is not None}
        for name, (kind, what) in zip(plan.schema.names, plan.shapes):
            if kind == "key":
                made[name] = rid if what == ID_COLUMN else None if row is None else row[BATCH_COLUMN]
            elif row is None:
                made[name] = None
            elif kind == "stage":
                made[name] = {leaf: row.get(path) for leaf, path in what}
            else:
                made[name] = row.get(what)
        out.append(made)
    try:  # one conversion for the whole result, as one struct array (an Arrow array per
        # column measured ~4x slower, Table.from_pylist ~2.4x)
        table = pa.Table.from_struct_array(pa.array(out, plan.row_type))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        return None  # an inlined value its logical type refuses: the array path casts as Arrow would
    result.not_found = [rid for rid, row in zip(wanted, per_id) if row is None]
    result.tables.extend(accesses)
    return table


@dataclass
class _InlineColumns:
    """One table's rows decoded from inline values as arrays (see :func:`_inline_columns`)."""

    values: dict[str, pa.Array]  # per logical name of the table's columns, cast to its logical type
    decoded_batch: pa.Array | None  # each row's batch name, where rows carry theirs (compacted files)
    batch_codes: np.ndarray | None  # else each row's batch as a file-table code

    def batch(self, found: TableEntries) -> pa.Array:
        """Each row's batch name."""
        if self.decoded_batch is not None:
            return self.decoded_batch
        return found.file_table.batches().take(pa.array(found.codes, pa.int64()))


def _inline_columns(found: TableEntries, cols: list[tuple[str, str]], types: dict[str, pa.DataType]
                    ) -> _InlineColumns | None:
    """One table's rows (entry order) answered from inline values as whole arrays.

    None when a row needs its data file (a column not inlined, no batch in the file's
    record) or an id has several rows: the caller then locates rows one by one.
    """
    n = len(found.asked)
    if count_distinct(found.asked, len(found.ids)) != n:
        return None
    need = list(dict.fromkeys(p for p, _ in cols))
    table = found.file_table
    used = distinct_small(found.codes, len(found.files))
    # per-file facts come from the index's file table as arrays (no Python per file)
    if not table.leaves(need)[0][used].all():
        return None  # a file that does not inline a wanted leaf: its rows are read from it
    batchless = table.batchless()[used]
    decode_batch = bool(batchless.any())  # a compacted file holds several batches: its rows carry theirs
    if decode_batch and not table.leaves([BATCH_COLUMN])[0][used[batchless]].all():
        return None
    leaves = need + ([BATCH_COLUMN] if decode_batch else [])
    decoded: dict[str, pa.Array] | None = {}
    if n and leaves:
        if not np.array_equal(found.read.lengths, table.value_width()[found.codes]):
            return None  # an entry whose bytes do not fit its file's layout: the row reader checks it
        decoded = decode_column_arrays(found.read.buf, found.read.starts + POSITION_BYTES, found.layouts,
                                       found.codes, leaves, used.tolist(), table)
        if decoded is None:
            return None
    if BATCH_COLUMN in decoded:
        batch, codes = decoded[BATCH_COLUMN].cast(pa.string()), None
    else:
        batch, codes = None, table.batch_codes()[found.codes]
    values = {}
    for phys, logical in cols:
        typ = types[logical]
        values[logical] = decoded[phys].cast(typ) if n else pa.array([], typ)
    return _InlineColumns(values, batch, codes)


def _inline_part(found: TableEntries, cols: list[tuple[str, str]], types: dict[str, pa.DataType],
                 asked_ids: pa.Array | None = None) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`_inline_columns` as a part to join (keys first), with each row's asked position."""
    got = _inline_columns(found, cols, types)
    if got is None:
        return None
    if asked_ids is None:
        asked_ids = pa.array(found.ids, pa.string())
    arrays = [asked_ids.take(pa.array(found.asked, pa.int64())), got.batch(found), *got.values.values()]
    return pa.Table.from_arrays(arrays, names=KEYS + [lg for _, lg in cols]), found.asked


def _inline_by_position(state: FamilyState, plan: _LookupPlan, entries: dict[str, TableEntries],
                        wanted: list[str], asked_ids: pa.Array, result: Lookup) -> pa.Table | None:
    """Many ids' logical rows wholly answered from inline values, placed by asked position.

    Every table's entries know their asked position, so each table's values go straight
    to their rows in the answer (one ``take``); a table's row joins the base row of the
    same id when their batches agree, compared as file-table codes. No per-table Arrow
    table, no join, no final sort: those were half of a 1,000-id lookup. None (the
    general path decides) when a table is not answerable from inline values, or its rows
    carry their own batches (compacted files).
    """
    n = len(wanted)
    columns: dict[str, pa.Array] = {}
    accesses: list[TableAccess] = []
    base_where = row_batch = None
    for key, cols in plan.per_table.items():
        found = entries[key]
        got = _inline_columns(found, cols, plan.types)
        if got is None or got.batch_codes is None:
            return None
        where = np.full(n, -1, np.int64)
        where[found.asked] = np.arange(len(found.asked))
        batch_at = _at_rows(got.batch_codes, where)  # each answer row's batch code here, -1: no row
        if base_where is None:  # the base table: its rows are the answer's rows
            base_where, row_batch = where, batch_at
            pick = where
        else:  # LEFT JOIN on (id, batch): a row of another batch is no match
            pick = np.where((batch_at == row_batch) & (row_batch >= 0), where, -1)
        mask = pick < 0
        picks = pa.array(pick, pa.int64(), mask=mask if mask.any() else None)
        for _, logical in cols:
            taken = got.values[logical].take(picks)
            path = logical_of(logical)
            # a column's later parts fill what earlier ones left null (the parts are disjoint)
            columns[path] = pc.coalesce(columns[path], taken) if path in columns else taken
        identifier, snapshot_id = plan.snapshots[key]
        accesses.append(TableAccess(key, identifier, snapshot_id, "index",
                                    files_inline=count_distinct(found.codes, len(found.files)),
                                    rows=len(found.asked)))
    found_rows = base_where >= 0
    missing = ~found_rows
    file_table = next(iter(entries.values())).file_table
    null_structs = pa.array(missing, pa.bool_()) if missing.any() else None  # a stage of an id not found
    arrays = []
    for out_field, (kind, what) in zip(plan.schema, plan.shapes):  # every field but the last, _found
        if kind == "key":  # the batch: its name by code (row_batch is -1 where no row was found)
            arrays.append(asked_ids if what == ID_COLUMN else
                          file_table.batch_names().take(pa.array(row_batch, pa.int64(), mask=missing)))
        elif kind == "stage":
            children = [columns.get(path, pa.nulls(n, f.type)) for (_, path), f in zip(what, out_field.type)]
            arrays.append(pa.StructArray.from_arrays(children, fields=list(out_field.type), mask=null_structs))
        else:
            arrays.append(columns.get(what, pa.nulls(n, out_field.type)))
    arrays.append(pa.array(found_rows, pa.bool_()))
    result.not_found = [wanted[i] for i in np.flatnonzero(missing).tolist()]
    result.tables.extend(accesses)
    return pa.Table.from_arrays(arrays, schema=plan.schema)


def _at_rows(per_entry: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``per_entry[where]`` where ``where >= 0``, else -1."""
    if not len(per_entry):
        return np.full(len(where), -1, np.int64)
    return np.where(where >= 0, per_entry[np.maximum(where, 0)], -1)


def _string_array(ids: list[str]) -> pa.Array:
    """Checked ids (32 ASCII characters each) as an Arrow string array, from one join
    (``pa.array`` of the list visits 1,000 string objects scattered over the heap)."""
    offsets = np.arange(0, ID_HEX * (len(ids) + 1), ID_HEX, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(ids), [None, pa.py_buffer(offsets),
                                                         pa.py_buffer("".join(ids).encode("ascii"))])


def _join_parts(parts: list[tuple[pa.Table, np.ndarray | None]], asked_count: int) -> pa.Table:
    """The base part LEFT JOIN every other part on the keys.

    Parts that know each row's asked position join by one ``take`` through those
    positions (no Python per row); others through :func:`_left_join`. A left join keeps
    the left side's rows in order, so the base's positions hold throughout.
    """
    joined, base_asked = parts[0]
    for part, asked in parts[1:]:
        fast = None
        # by takes from many rows on; for a few, the dicts of _left_join cost less than the
        # arrays' set-up (a 1-id lookup measured ~1 ms slower through takes)
        if base_asked is not None and asked is not None and asked_count >= ARRAY_DECODE_MIN_ROWS:
            fast = _take_join(joined, base_asked, part, asked, asked_count)
        joined = fast if fast is not None else _left_join(joined, part)
    return joined


def _take_join(left: pa.Table, left_asked: np.ndarray, right: pa.Table, right_asked: np.ndarray,
               asked_count: int) -> pa.Table | None:
    """:func:`_left_join` for parts with asked positions; None if a matched row's batch differs."""
    where = np.full(asked_count, -1, np.int64)
    where[right_asked] = np.arange(len(right_asked))
    picks = where[left_asked]
    taken = right.take(pa.array(picks, pa.int64(), mask=picks < 0))
    same = pc.equal(taken.column(BATCH_COLUMN), left.column(BATCH_COLUMN))
    if not pc.all(pc.fill_null(same, True)).as_py():
        return None  # the join is on both keys: let the general join decide
    out = left
    for name in right.column_names:
        if name not in KEYS:
            out = out.append_column(name, taken.column(name))
    return out


def data_file_io(catalog: Any, path: str) -> Any:
    """The catalog's FileIO for object-store paths (their settings live there); None for local files."""
    if not path or path.startswith("file:") or "://" not in path:
        return None
    from catalog_ext.iceberg_io import file_io

    return file_io(catalog, path)


def _table_part(view: IndexView, key: str, cols: list[tuple[str, str]], ids: list[str],
                state: FamilyState, force_scan: bool = False, located: dict[str, list[Any]] | None = None
                ) -> tuple[pa.Table, TableAccess, np.ndarray | None]:
    """One table's part of the answer, how it was read, and (read through the index) each
    row's position among ``ids`` (a scan's rows come in no known order: None)."""
    meta = state.physical_table(key)
    access = TableAccess(key, meta.identifier, meta.snapshot_id, "index")
    cov = view.coverage(key)
    if force_scan:
        access.reason = "scan forced by the caller"
    elif cov.authoritative:
        part, problem, asked = _read_indexed(view, key, cols, ids, state, access, located)
        if problem is None:
            access.rows = part.num_rows
            return part, access, asked
        access.reason = problem
    else:
        access.reason = "; ".join(cov.lag)
    access.method, access.files_read = "scan", 0
    part = _scan(view, key, cols, ids, state)
    access.rows = part.num_rows
    return part, access, None


def _read_indexed(view: IndexView, key: str, cols: list[tuple[str, str]], ids: list[str], state: FamilyState,
                  access: TableAccess, located: dict[str, list[Any]] | None = None
                  ) -> tuple[pa.Table, str | None, np.ndarray | None]:
    from omni_iceberg.index.parquet_rows import FROM_INLINE, by_file, read_located

    files, _ = by_file(view.locations(key, ids) if located is None else located, unique=False)
    done, problem = read_located(files, [p for p, _ in cols], data_file_io(view.catalog, next(iter(files), "")))
    if problem:
        return pa.table({}), f"{problem}; run `omni index verify {state.table.identifier}`", None
    # each row's asked position, so the parts join and the answer is ordered by array takes
    at = {rid: i for i, rid in enumerate(ids)}
    asked = np.fromiter((at[rid] for expected, _, _ in done for rid in expected), np.int64)
    pieces = []
    for expected, values, _ in done:
        arrays = [pa.array(expected, pa.string()), values[BATCH_COLUMN].cast(pa.string())]
        for phys, logical in cols:
            typ = arrow_type(state.column(logical_of(logical)).type)
            arr = values.get(phys)
            arrays.append(pa.nulls(len(expected), typ) if arr is None else arr.cast(typ))
        pieces.append(pa.Table.from_arrays(arrays, names=KEYS + [lg for _, lg in cols]))
    access.files_read = sum(1 for *_, how in done if how != FROM_INLINE)  # one piece per file read
    access.files_inline = len(files) - access.files_read  # inline pieces may merge several files
    if not pieces:
        return _empty(cols, state), None, asked
    return pa.concat_tables(pieces), None, asked


def _empty(cols: list[tuple[str, str]], state: FamilyState) -> pa.Table:
    fields = [pa.field(ID_COLUMN, pa.string()), pa.field(BATCH_COLUMN, pa.string())]
    fields += [pa.field(lg, arrow_type(state.column(logical_of(lg)).type)) for _, lg in cols]
    return pa.schema(fields).empty_table()


def _scan(view: IndexView, key: str, cols: list[tuple[str, str]], ids: list[str], state: FamilyState) -> pa.Table:
    from omni_iceberg.read.reader import flatten
    from omni_iceberg.index.scan import bucket_scan

    if state.physical_table(key).snapshot_id is None:
        return _empty(cols, state)
    top = list(dict.fromkeys(p for p, _ in cols))  # nested names read only that leaf
    data = bucket_scan(view.catalog, state, key, ids, KEYS + top)
    flat = flatten(data, cols)
    arrays = [flat.column(ID_COLUMN), flat.column(BATCH_COLUMN)]
    arrays += [flat.column(lg).cast(arrow_type(state.column(logical_of(lg)).type)) for _, lg in cols]
    return pa.Table.from_arrays(arrays, names=KEYS + [lg for _, lg in cols])


def _left_join(left: pa.Table, right: pa.Table) -> pa.Table:
    """``left`` LEFT JOIN ``right`` ON the keys, for the small tables a lookup handles.

    A dict of the right side's keys and one ``take`` beats a hash join's set-up cost by
    far at these sizes (a join per physical table was most of a one-id lookup). Keys
    are unique per table (one row per id and batch), so at most one match per row.
    """
    where = {k: i for i, k in enumerate(zip(right.column(ID_COLUMN).to_pylist(),
                                            right.column(BATCH_COLUMN).to_pylist()))}
    picks = pa.array([where.get(k) for k in zip(left.column(ID_COLUMN).to_pylist(),
                                                left.column(BATCH_COLUMN).to_pylist())], pa.int64())
    taken = right.take(picks)
    out = left
    for name in right.column_names:
        if name not in KEYS:
            out = out.append_column(name, taken.column(name))
    return out


def _finish(state: FamilyState, joined: pa.Table, out_names: list[str], leaves: list[str], wanted: list[str],
            result: Lookup, asked: np.ndarray | None = None) -> pa.Table:
    """The answer: ``joined``'s rows in the order asked, then a not-found row per missing id.

    ``asked`` (when known) is each joined row's position in ``wanted``; otherwise the
    positions are found by id (Python per row).
    """
    from omni_iceberg.read.reader import assemble

    found = assemble(state, joined, out_names, leaves)
    if ID_COLUMN not in found.column_names:  # the caller asked for other columns only: keep the key
        found = found.append_column(ID_COLUMN, joined.column(ID_COLUMN))
    if asked is not None and len(asked) == found.num_rows:
        seen = np.zeros(len(wanted), np.bool_)
        seen[asked] = True
        missing_at = np.flatnonzero(~seen)
        missing = [wanted[i] for i in missing_at.tolist()]
        rank = np.concatenate([asked, missing_at])
    else:
        present = set(joined.column(ID_COLUMN).to_pylist())
        missing = [i for i in wanted if i not in present]
        rank = None
    result.not_found = missing
    found = found.append_column(FOUND_COLUMN, pa.array([True] * found.num_rows, pa.bool_()))
    if missing:
        filler = [pa.array(missing, pa.string()) if f.name == ID_COLUMN else
                  pa.array([False] * len(missing), pa.bool_()) if f.name == FOUND_COLUMN else
                  pa.nulls(len(missing), f.type) for f in found.schema]
        found = pa.concat_tables([found, pa.Table.from_arrays(filler, schema=found.schema)])
    if rank is None:
        order = {rid: i for i, rid in enumerate(wanted)}
        rank = np.fromiter(map(order.__getitem__, found.column(ID_COLUMN).to_pylist()), np.int64, found.num_rows)
    return found.take(pa.array(np.argsort(rank, kind="stable"), pa.int64()))

