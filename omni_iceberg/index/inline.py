"""Inline values: the small columns of an indexed row, stored in its index entry.

Why: the index names a data file and a row, but pyarrow can only decode whole row
groups, so a point read cost a row-group decode per physical table (~1 ms each), and
a 1,000-id lookup touched nearly every row group of every table - little better than
a scan. Most of a logical row without its raw content is small: the batch name, a
URL, feature scores, labels. Those values are copied into the entry when the file is
indexed, so a lookup of them is a key-value read and a decode, no data file opened.
Large values (raw content, parsed text) stay in Parquet; a lookup that asks for them
reads the row group as before.

Per data file, a :class:`Layout` fixes which leaves are inlined and how wide each is,
so every row of the file encodes to the same number of bytes: a null bitmap, then per
leaf either the fixed-width little-endian value or a 2-byte length and the bytes padded
to the file's widest value. Fixed widths make both directions whole-array numpy
operations - no per-row Python beyond slicing the bytes - which is what keeps the
ingest cost of indexing small. The layout is stored in the file's index record.

Which leaves: top-level columns and struct fields (not lists or maps) of integer,
floating, boolean, string and binary types; strings only when their average
size in the file (from the Parquet footer, before reading anything) is at most
:data:`STRING_AVG_MAX` and their longest value at most :data:`STRING_MAX`; leaves are
taken in schema order while the row fits in :data:`ROW_MAX` bytes.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext.contract import ID_COLUMN
from omni_iceberg.index.backend import rows_as_bytes
from omni_iceberg.index.file_input import open_input
from omni_iceberg.index.keys import ID_BYTES

#: a string leaf is a candidate when its average uncompressed size in the file is at most this
STRING_AVG_MAX = 64
#: ... and is inlined only when its longest value in the file fits this (a 2-byte length prefix)
STRING_MAX = 256
#: footer bytes per row group a column may have besides its values (headers, dictionary)
PAGE_OVERHEAD = 1024
#: bytes of inline values per row at most: bounds the index's size per row
ROW_MAX = 512

_FIXED: dict[str, str] = {  # kind -> numpy dtype of the stored value
    "i1": "<i1", "i2": "<i2", "i4": "<i4", "i8": "<i8",
    "u1": "<u1", "u2": "<u2", "u4": "<u4", "u8": "<u8",
    "f4": "<f4", "f8": "<f8", "b1": "<u1",
}


def distinct_small(codes: np.ndarray, size: int) -> np.ndarray:
    """The distinct values of ``codes``, sorted; every code is in ``[0, size)``.

    A lookup asks this of every table's file codes and asked positions: a mark per possible
    value is a linear pass, where ``np.unique`` sorts (7% of a 1,000-id lookup was its sorts).

    >>> distinct_small(np.array([3, 0, 3, 1]), 5).tolist()
    [0, 1, 3]
    """
    seen = np.zeros(max(size, 1), np.bool_)
    seen[codes] = True
    return np.flatnonzero(seen)


def count_distinct(codes: np.ndarray, size: int) -> int:
    """How many distinct values ``codes`` holds (each in ``[0, size)``); see :func:`distinct_small`.

    >>> count_distinct(np.array([], np.int64), 0)
    0
    """
    return len(distinct_small(codes, size))


@dataclass(frozen=True)
class Slot:
    """One inlined leaf: dotted name, kind (numpy code, or ``s`` string / ``y`` binary), bytes."""

    name: str
    kind: str
    width: int


@dataclass(frozen=True)
class Layout:
    """How the rows of one data file are inlined (see the module docstring)."""

    slots: tuple[Slot, ...] = ()

    @cached_property  # asked per entry by lookups; a frozen dataclass still has a __dict__ for it
    def names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.slots)

    @cached_property
    def row_bytes(self) -> int:
        return _bitmap_bytes(len(self.slots)) + sum(_stored(s) for s in self.slots)

    def to_json(self) -> list[list[Any]]:
        return [[s.name, s.kind, s.width] for s in self.slots]

    @classmethod
    def from_json(cls, data: Sequence[Sequence[Any]] | None) -> "Layout":
        return cls(tuple(Slot(str(n), str(k), int(w)) for n, k, w in (data or ())))


def _bitmap_bytes(n: int) -> int:
    return (n + 7) // 8 if n else 0


def _stored(slot: Slot) -> int:
    return slot.width + 2 if slot.kind in ("s", "y") else slot.width


def _fixed_kind(t: pa.DataType) -> str | None:
    if pa.types.is_boolean(t):
        return "b1"
    if pa.types.is_integer(t):
        return ("u" if pa.types.is_unsigned_integer(t) else "i") + str(t.bit_width // 8)
    if pa.types.is_float32(t):
        return "f4"
    if pa.types.is_float64(t):
        return "f8"
    return None  # temporal types too: their unit and zone would have to travel with the layout


def _leaves(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    """(dotted name, type) of every leaf reachable through structs only, in schema order."""
    out: list[tuple[str, pa.DataType]] = []

    def walk(prefix: str, t: pa.DataType) -> None:
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(f"{prefix}.{t.field(i).name}", t.field(i).type)
        else:
            out.append((prefix, t))

    for f in schema:
        if f.name != ID_COLUMN:
            walk(f.name, f.type)
    return out


def candidates(metadata: Any, schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    """Leaves worth reading for inlining, judged from the footer alone (no data read)."""
    sizes: dict[str, int] = {}
    for g in range(metadata.num_row_groups):
        rg = metadata.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            sizes[col.path_in_schema] = sizes.get(col.path_in_schema, 0) + col.total_uncompressed_size
    rows = max(1, metadata.num_rows)
    # page headers and dictionaries weigh on small files: allow them before judging values
    overhead = PAGE_OVERHEAD * max(1, metadata.num_row_groups)
    out = []
    for name, t in _leaves(schema):
        if _fixed_kind(t) is not None:
            out.append((name, t))
        elif (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
              or pa.types.is_large_binary(t)) and (sizes.get(name, 0) - overhead) / rows <= STRING_AVG_MAX:
            out.append((name, t))
    return out


def leaf(table: pa.Table, dotted: str) -> pa.Array:
    head, *rest = dotted.split(".")
    arr = table.column(head).combine_chunks()
    for sub in rest:
        arr = pc.struct_field(arr, sub)
    return arr


def plan(columns: Sequence[tuple[str, pa.Array]]) -> Layout:
    """The layout for these leaf values: strings within :data:`STRING_MAX`, rows within :data:`ROW_MAX`."""
    slots: list[Slot] = []
    used = 0
    for name, arr in columns:
        kind = _fixed_kind(arr.type)
        if kind is not None:
            slot = Slot(name, kind, int(np.dtype(_FIXED[kind]).itemsize))
        else:
            lengths = pc.binary_length(arr)
            longest = pc.max(lengths).as_py() or 0
            if longest > STRING_MAX:
                continue
            is_text = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
            slot = Slot(name, "s" if is_text else "y", int(longest))
        if used + _stored(slot) + _bitmap_bytes(len(slots) + 1) > ROW_MAX:
            continue
        slots.append(slot)
        used += _stored(slot)
    return Layout(tuple(slots))


def encode(layout: Layout, columns: dict[str, pa.Array], rows: int) -> np.ndarray:
    """A ``rows x layout.row_bytes`` uint8 matrix: row ``i`` is the inline value of row ``i``."""
    width = layout.row_bytes
    mat = np.zeros((rows, width), np.uint8)
    start = _bitmap_bytes(len(layout.slots))
    for j, slot in enumerate(layout.slots):
        arr = columns[slot.name]
        if arr.null_count:
            nulls = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), np.uint8)
            mat[:, j // 8] |= (nulls << (j % 8)).astype(np.uint8)
        if slot.kind in ("s", "y"):
            _put_bytes(mat, start, slot.width, arr)
        else:
            dtype = np.dtype(_FIXED[slot.kind])
            if slot.kind == "b1":
                arr = arr.cast(pa.uint8())
            values = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype)
            mat[:, start:start + slot.width] = values.view(np.uint8).reshape(rows, slot.width)
        start += _stored(slot)
    return mat


def _put_bytes(mat: np.ndarray, start: int, width: int, arr: pa.Array) -> None:
    """Length (2 bytes) and bytes of each value, padded to ``width``, without a per-row loop."""
    if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.string() if pa.types.is_large_string(arr.type) else pa.binary())
    rows = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + rows + 1]
    lengths = np.diff(offsets).astype(np.int64)
    if arr.null_count:  # a null's offsets may span bytes in some writers: store it as empty
        lengths[np.asarray(arr.is_null().to_numpy(zero_copy_only=False))] = 0
    mat[:, start:start + 2] = lengths.astype("<u2").view(np.uint8).reshape(rows, 2)
    total = int(lengths.sum())
    if not total:
        return
    if pa.types.is_string(arr.type) and pc.all(pc.string_is_ascii(arr)).as_py() is not False:
        # ASCII (URLs, names, labels): characters are bytes, so Arrow's padding gives the
        # fixed-width block directly - several times faster than scattering the bytes
        padded = pc.utf8_rpad(arr.fill_null(""), width=width, padding="\x00")
        first = np.frombuffer(padded.buffers()[1], np.int32)[padded.offset]
        body = np.frombuffer(padded.buffers()[2], np.uint8)[first:first + rows * width]
        mat[:, start + 2:start + 2 + width] = body.reshape(rows, width)
        return
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    row_of = np.repeat(np.arange(rows), lengths)
    within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    source = np.repeat(offsets[:-1].astype(np.int64), lengths) + within
    mat[row_of, start + 2 + within] = data[source]


#: each row of a 2-D uint8 matrix (:func:`encode`'s, or index keys) as one bytes value
split_rows = rows_as_bytes


def decode(layout: Layout, values: Sequence[bytes], names: Sequence[str]) -> dict[str, pa.Array]:
    """The leaves ``names`` of rows whose inline values are ``values`` (all from files of ``layout``)."""
    rows, width = len(values), layout.row_bytes
    mat = np.frombuffer(b"".join(values), np.uint8).reshape(rows, width) if rows else np.zeros((0, width), np.uint8)
    wanted = set(names)
    out: dict[str, pa.Array] = {}
    start = _bitmap_bytes(len(layout.slots))
    for j, slot in enumerate(layout.slots):
        if slot.name in wanted:
            nulls = ((mat[:, j // 8] >> (j % 8)) & 1).astype(bool)
            out[slot.name] = _column(mat, start, slot, nulls)
        start += _stored(slot)
    return out


def _column(mat: np.ndarray, start: int, slot: Slot, nulls: np.ndarray) -> pa.Array:
    rows = mat.shape[0]
    mask = pa.array(nulls) if nulls.any() else None
    if slot.kind in ("s", "y"):
        lengths = np.ascontiguousarray(mat[:, start:start + 2]).view("<u2").ravel().astype(np.int32)
        body = mat[:, start + 2:start + 2 + slot.width]
        data = body[np.arange(slot.width)[None, :] < lengths[:, None]]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        typ = pa.string() if slot.kind == "s" else pa.binary()
        arr = pa.Array.from_buffers(typ, rows, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())])
    else:
        values = np.ascontiguousarray(mat[:, start:start + slot.width]).view(_FIXED[slot.kind]).ravel()
        arr = pa.array(values.astype(bool) if slot.kind == "b1" else values)
    if mask is not None:
        arr = pc.if_else(mask, pa.scalar(None, arr.type), arr)
    return arr


_ARROW = {"i1": pa.int8(), "i2": pa.int16(), "i4": pa.int32(), "i8": pa.int64(), "u1": pa.uint8(),
          "u2": pa.uint16(), "u4": pa.uint32(), "u8": pa.uint64(), "f4": pa.float32(), "f8": pa.float64(),
          "b1": pa.bool_(), "s": pa.string(), "y": pa.binary()}
_STRUCT = {"i1": "<b", "i2": "<h", "i4": "<i", "i8": "<q", "u1": "<B", "u2": "<H", "u4": "<I", "u8": "<Q",
           "f4": "<f", "f8": "<d", "b1": "<?"}
_READERS: dict[tuple[int, tuple[str, ...]], tuple[Layout, list[tuple[int, int, str, Any, int]]]] = {}


def leaf_reader(layout: Layout, names: tuple[str, ...]) -> list[tuple[int, int, str, Any, int]]:
    """Per wanted leaf: (slot index, byte offset, kind, struct or None, width), cached per layout.

    Keyed by the layout object's identity (the index keeps one per file record), which
    is cheaper than hashing its slots per row; the entry holds the layout, so the
    identity cannot be reused by another object while cached.
    """
    import struct

    key = (id(layout), names)
    hit = _READERS.get(key)
    found = hit[1] if hit is not None and hit[0] is layout else None
    if found is None:
        at, offsets = _bitmap_bytes(len(layout.slots)), {}
        for j, slot in enumerate(layout.slots):
            offsets[slot.name] = (j, at, slot)
            at += _stored(slot)
        found = []
        for name in names:
            j, at, slot = offsets[name]
            found.append((j, at, slot.kind, struct.Struct(_STRUCT[slot.kind]) if slot.kind in _STRUCT else None,
                          slot.width))
        if len(_READERS) > 4096:
            _READERS.clear()
        _READERS[key] = (layout, found)
    return found


#: leaf kinds as small integers, for "one kind in every file" as an array test (FileTable)
_KIND_CODES: dict[str, int] = {}


def kind_code(kind: str) -> int:
    """A small integer for a leaf kind (``i8``, ``s``, ...), stable for the process."""
    return _KIND_CODES.setdefault(kind, len(_KIND_CODES))


def kind_of(code: int) -> str:
    """The leaf kind of a :func:`kind_code`."""
    for kind, c in _KIND_CODES.items():
        if c == code:
            return kind
    raise KeyError(code)


def decode_row(layout: Layout, value: bytes, skip: int, names: Sequence[str]) -> dict[str, Any]:
    """The leaves ``names`` of one row as Python values; its inline values are ``value[skip:]``.

    For point lookups: a dict per row, no Arrow array per leaf (every layout holds every name).
    """
    nulls = int.from_bytes(value[skip:skip + _bitmap_bytes(len(layout.slots))], "little")
    out: dict[str, Any] = {}
    for name, (j, at, kind, unpack, _) in zip(names, leaf_reader(layout, tuple(names))):
        at += skip
        if nulls >> j & 1:
            out[name] = None
        elif unpack is not None:
            out[name] = unpack.unpack_from(value, at)[0]
        else:
            raw = value[at + 2:at + 2 + (value[at] | value[at + 1] << 8)]
            out[name] = raw.decode("utf-8") if kind == "s" else bytes(raw)
    return out


def decode_rows(rows: Sequence[tuple[Layout, bytes]], names: Sequence[str]) -> dict[str, pa.Array]:
    """The leaves ``names`` of rows from files of any layouts, one Arrow array per leaf.

    For lookups, whose rows come a few per file from many files: a per-row decode of
    the few wanted fields costs far less than array work per file (:func:`decode`).
    Every layout must hold every name; the arrays take the type of the first row's slot.
    """
    names = tuple(names)
    columns: list[list[Any]] = [[] for _ in names]
    kinds: list[str | None] = [None] * len(names)
    for layout, value in rows:
        nulls = int.from_bytes(value[:_bitmap_bytes(len(layout.slots))], "little")
        for i, (j, at, kind, unpack, width) in enumerate(leaf_reader(layout, names)):
            if kinds[i] is None:
                kinds[i] = kind
            if nulls >> j & 1:
                columns[i].append(None)
            elif unpack is not None:
                columns[i].append(unpack.unpack_from(value, at)[0])
            else:
                length = value[at] | value[at + 1] << 8
                raw = value[at + 2:at + 2 + length]
                columns[i].append(raw.decode("utf-8") if kind == "s" else bytes(raw))
    return {name: pa.array(col, _ARROW[kinds[i] or "s"]) for i, (name, col) in enumerate(zip(names, columns))}


def decode_columns(values: Sequence[bytes], skip: int, layouts: Sequence[Layout], codes: np.ndarray,
                   names: Sequence[str]) -> dict[str, pa.Array] | None:
    """:func:`decode_column_arrays` of rows given as bytes: row ``i``'s inline values are ``values[i][skip:]``."""
    n = len(values)
    lengths = np.fromiter(map(len, values), np.int64, n)
    starts = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return decode_column_arrays(np.frombuffer(b"".join(values), np.uint8), starts + skip, layouts, codes, names)


def decode_column_arrays(buf: np.ndarray, starts: np.ndarray, layouts: Sequence[Layout], codes: np.ndarray,
                         names: Sequence[str], used: list[int] | None = None,
                         table: Any = None) -> dict[str, pa.Array] | None:
    """The leaves ``names`` of rows from files of many layouts, as whole-array work.

    Row ``i``'s inline values start at ``buf[starts[i]]``, in layout ``layouts[codes[i]]``.
    A 1,000-id lookup touches hundreds of files a row or two each: grouping rows by
    layout left groups too small for array work, and :func:`decode_rows` paid Python per
    row and field. Here the per-layout facts (slot, offset) become per-row arrays and
    every leaf is one gather over the bytes. None when a leaf's kind differs between the
    layouts (the caller decodes row by row instead).
    """
    if used is None:  # the layouts ``codes`` uses (callers that know them pass them)
        used = distinct_small(codes, len(layouts)).tolist()
    names = tuple(names)
    if table is not None:  # an index's FileTable: the slots of every layout, as arrays
        return _decode_with_table(buf, starts, codes, names, used, table)
    # one reader per layout for all leaves (its slot, offset, kind, struct, width per leaf),
    # then per leaf one (slot, offset) table over the layouts
    readers = [leaf_reader(layouts[c], names) for c in used]
    places = np.zeros((len(layouts), len(names), 2), np.int64)
    if used:
        places[used] = [[(r[0], r[1]) for r in reader] for reader in readers]
    out: dict[str, pa.Array] = {}
    for i, name in enumerate(names):
        kinds = {reader[i][2] for reader in readers}
        if len(kinds) != 1:
            return None
        kind = kinds.pop()
        j, at = places[codes, i, 0], places[codes, i, 1] + starts
        nulls = ((buf[starts + j // 8] >> (j % 8)) & 1).astype(bool)
        out[name] = _gather(buf, at, kind, nulls, max((reader[i][4] for reader in readers), default=0))
    return out


def _decode_with_table(buf: np.ndarray, starts: np.ndarray, codes: np.ndarray, names: tuple[str, ...],
                       used: list[int], table: Any) -> dict[str, pa.Array] | None:
    """:func:`decode_column_arrays` with the per-layout facts read from ``table`` (a
    :class:`~omni_iceberg.index.file_table.FileTable`, ``codes`` its fids)."""
    inlined, places, kinds, widths = table.leaves(names)
    out: dict[str, pa.Array] = {}
    for i, name in enumerate(names):
        found = kinds[used, i]
        if not len(found) or found[0] < 0 or not (found == found[0]).all():
            return None  # a leaf missing from a file, or of two kinds in two files
        kind = kind_of(int(found[0]))
        j, at = places[codes, i, 0], places[codes, i, 1] + starts
        nulls = ((buf[starts + j // 8] >> (j % 8)) & 1).astype(bool)
        # strings: the widest slot among the files (a file's slot is as wide as its longest value)
        out[name] = _gather(buf, at, kind, nulls, int(widths[used, i].max()))
    return out


def _gather(buf: np.ndarray, at: np.ndarray, kind: str, nulls: np.ndarray, width: int) -> pa.Array:
    """One leaf of every row: the bytes at ``at`` (per row) read as ``kind`` (fixed kinds:
    ``width`` bytes; strings and binaries: a 2-byte length, then at most ``width`` bytes)."""
    n = len(at)
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little").tobytes()) if nulls.any() else None
    null_count = int(nulls.sum())
    if kind in ("s", "y"):
        lengths = (buf[at].astype(np.int32) | buf[at + 1].astype(np.int32) << 8)
        lengths[nulls] = 0
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if width > 0:
            # each row's ``width`` bytes as one row of a strided view of the buffer (row k =
            # bytes k .. k + width - 1), then the first ``length`` of each kept in row order:
            # a row copy each instead of an index per byte (~3x faster on 1,000 URLs). The
            # buffer gets ``width`` bytes of padding so a row near its end stays inside.
            padded = np.concatenate([buf, np.zeros(width, np.uint8)])
            rows = np.lib.stride_tricks.as_strided(padded, shape=(len(buf) + 1, width), strides=(1, 1),
                                                   writeable=False)
            data = rows[at + 2][np.arange(width) < lengths[:, None]]
        else:
            data = buf[np.repeat(at + 2 - offsets[:-1], lengths) + np.arange(total)]
        return pa.Array.from_buffers(pa.string() if kind == "s" else pa.binary(), n,
                                     [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())],
                                     null_count=null_count)
    raw = buf[at[:, None] + np.arange(width)].reshape(-1).view(_FIXED[kind])
    data = raw.astype(np.uint8) if kind == "b1" else raw
    if kind == "b1":
        bits = np.packbits(data.astype(bool), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [validity, pa.py_buffer(bits.tobytes())], null_count=null_count)
    return pa.Array.from_buffers(_ARROW[kind], n, [validity, pa.py_buffer(np.ascontiguousarray(data).tobytes())],
                                 null_count=null_count)


class IndexedRows:
    """What indexing one data file needs: its ids in row order, and their inline values.

    ``ids`` may be given as a list of hex strings or as the file's Arrow column: then the
    binary id keys come from its bytes in one vectorised step (:meth:`id_keys`), and the
    Python strings are made only if someone asks for :attr:`ids` (verification does).
    """

    def __init__(self, ids: Sequence[str] | pa.Array | pa.ChunkedArray, layout: Layout, matrix: np.ndarray | None):
        self._arrow = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else None
        self._ids = None if self._arrow is not None else list(ids)
        self.layout, self.matrix = layout, matrix

    def __len__(self) -> int:
        return len(self._arrow) if self._arrow is not None else len(self._ids)

    @property
    def ids(self) -> list[str]:
        if self._ids is None:
            self._ids = self._arrow.to_pylist()
        return self._ids

    def id_keys(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo:hi``'s ids as binary keys, an (n, 16) uint8 matrix."""
        n = max(0, min(hi, len(self)) - lo)
        if self._arrow is not None:
            keys = _hex_matrix(self._arrow.slice(lo, n), ID_BYTES)
            if keys is not None:
                return keys
        return np.frombuffer(bytes.fromhex("".join(self.ids[lo:lo + n])), np.uint8).reshape(n, ID_BYTES)


def _hex_matrix(ids: pa.Array | pa.ChunkedArray, width: int) -> np.ndarray | None:
    """An Arrow string column of ``2 * width``-digit hex ids as an (n, width) uint8 matrix, or
    None when it is not exactly that (nulls, other lengths, other digits): the caller then
    decodes the strings with ``bytes.fromhex``, which raises on a bad one."""
    arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    if arr.null_count or not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return None
    n = len(arr)
    step = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], step, n + 1, arr.offset * np.dtype(step).itemsize)
    if n and not np.all(np.diff(offsets) == 2 * width):
        return None
    start = int(offsets[0])
    try:  # the digits are contiguous (every id the same length): one C call decodes them all
        raw = binascii.unhexlify(memoryview(arr.buffers()[2])[start:start + n * 2 * width])
    except (binascii.Error, ValueError):
        return None
    return np.frombuffer(raw, np.uint8).reshape(n, width)


def read_for_index(path: str, io: Any = None) -> IndexedRows:
    """Ids of a data file in row order, and the inline values of its small leaves."""
    import pyarrow.parquet as pq

    with open_input(path, io) as f:
        pf = pq.ParquetFile(f)
        wanted = candidates(pf.metadata, pf.schema_arrow)
        heads = list(dict.fromkeys([ID_COLUMN] + [name for name, _ in wanted]))
        table = pf.read(columns=heads)
    return index_rows(table.column(ID_COLUMN), [(name, leaf(table, name)) for name, _ in wanted])


def given_for_index(path: str, rows: pa.Table, io: Any = None) -> tuple[pa.Array, list[tuple[str, pa.Array]]] | None:
    """What :func:`read_for_index` reads of data file ``path`` - its ids and its candidate
    leaves - taken from ``rows``, the file's rows as its writer held them, in its row order.

    Only the footer is read: which leaves are candidates is judged from it, exactly as for
    a file read back, and each leaf takes the file's type (a writer may hold an int32 the
    table stores as a long), so the entries come out the same. Returns ``(ids, leaves)``
    for :func:`index_rows`; None when ``rows`` do not hold a leaf under the file's name
    or cannot take its type (pyiceberg renames columns that Avro cannot name): the caller
    reads the file back then.
    """
    import pyarrow.parquet as pq

    with open_input(path, io) as f:
        pf = pq.ParquetFile(f)
        wanted = candidates(pf.metadata, pf.schema_arrow)
        id_type = pf.schema_arrow.field(ID_COLUMN).type if ID_COLUMN in pf.schema_arrow.names else None
    if id_type is None or ID_COLUMN not in rows.column_names:
        return None
    values = []
    for name, typ in [(ID_COLUMN, id_type), *wanted]:
        try:
            arr = _given_leaf(rows, name)
            values.append((name, arr if arr.type == typ else arr.cast(typ)))
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
    return values[0][1], values[1:]


def _given_leaf(rows: pa.Table, dotted: str) -> pa.Array:
    """:func:`leaf` of an in-memory table, chunk by chunk: combining a struct column first
    would copy every child - the raw content too - for the few small leaves wanted."""
    head, *rest = dotted.split(".")
    parts = []
    for arr in rows.column(head).chunks:
        for sub in rest:
            arr = pc.struct_field(arr, sub)
        parts.append(arr)
    if not parts:  # no rows (pyiceberg writes no empty file): read it back
        raise KeyError(dotted)
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def index_rows(ids: pa.Array | pa.ChunkedArray, values: list[tuple[str, pa.Array]]) -> IndexedRows:
    """A file's ids and candidate leaves (row order) as :class:`IndexedRows`: the layout is planned here."""
    layout = plan(values)
    if not layout.slots:
        return IndexedRows(ids, layout, None)
    return IndexedRows(ids, layout, encode(layout, dict(values), len(ids)))
