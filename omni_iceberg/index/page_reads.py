"""Read single rows of a local Parquet file by decoding only the pages that hold them.

pyarrow decodes whole row groups (its reader ignores page indexes), so a point read
through the id index paid for every value of the group. Here a column chunk's page
headers are walked once (a small Thrift compact-protocol decoder of ``PageHeader``) and
where its pages lie is cached; then only the span of the data pages holding wanted rows
is read (one ``pread``), and each such page is decompressed and decoded once for all its
wanted rows, which come out as one Arrow array (numpy gathers, no Python object per
value) - plus the chunk's dictionary page when the page is dictionary-encoded, decoded
once and cached while it is small. A column's pages' arrays are concatenated once.

The reader answers exactly or not at all: anything it does not handle exactly
(repeated columns, encodings other than PLAIN / RLE / dictionary, codecs other than
zstd / snappy / gzip / none, Arrow types it does not build the same way pyarrow does,
a large dictionary, a malformed header) raises :class:`Unsupported`, and the caller
reads the row group with pyarrow as before. Values are compared with pyarrow's own
decode in tests/test_page_reads.py.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa


class Unsupported(Exception):
    """The page reader cannot answer this read exactly: read the row group instead."""


# Parquet's PageType and Encoding enums (parquet.thrift)
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3
PLAIN, PLAIN_DICTIONARY, RLE, RLE_DICTIONARY = 0, 2, 3, 8

#: dictionaries larger than this (uncompressed) are not decoded here: walking a big
#: PLAIN byte-array dictionary in Python costs more than pyarrow's whole-group decode
DICT_MAX_BYTES = 256 << 10
#: decoded dictionaries kept, in bytes (a point-lookup service re-reads hot groups)
DICT_CACHE_BYTES = 64 << 20

_DICTS: "OrderedDict[tuple, tuple[Any, int]]" = OrderedDict()
_DICT_BYTES = [0]
_LOCK = threading.Lock()
_LOCAL = threading.local()


# ---------------------------------------------------------------- Thrift compact protocol

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Unsupported("varint longer than 64 bits")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _value(buf: bytes, pos: int, ftype: int, depth: int) -> tuple[Any, int]:
    """One compact-protocol value of type ``ftype``: ints and structs are returned (structs
    as {field id: value}); strings, doubles, lists and maps are skipped (None)."""
    if ftype == 1:
        return True, pos
    if ftype == 2:
        return False, pos
    if ftype == 3:
        b = buf[pos]
        return (b - 256 if b > 127 else b), pos + 1
    if ftype in (4, 5, 6):
        n, pos = _varint(buf, pos)
        return _zigzag(n), pos
    if ftype == 7:
        return None, pos + 8
    if ftype == 8:
        n, pos = _varint(buf, pos)
        return None, pos + n
    if ftype in (9, 10):
        head = buf[pos]
        pos += 1
        size, etype = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        for _ in range(size):
            pos = pos + 1 if etype in (1, 2) else _value(buf, pos, etype, depth + 1)[1]
        return None, pos
    if ftype == 11:
        size, pos = _varint(buf, pos)
        if size:
            kv = buf[pos]
            pos += 1
            for _ in range(size):
                for t in (kv >> 4, kv & 0x0F):
                    pos = pos + 1 if t in (1, 2) else _value(buf, pos, t, depth + 1)[1]
        return None, pos
    if ftype == 12:
        return _struct(buf, pos, depth + 1)
    raise Unsupported(f"unknown Thrift compact type {ftype}")


def _struct(buf: bytes, pos: int, depth: int = 0) -> tuple[dict[int, Any], int]:
    if depth > 16:
        raise Unsupported("Thrift structs nested too deep")
    fields: dict[int, Any] = {}
    last = 0
    while True:
        head = buf[pos]
        pos += 1
        if head == 0:
            return fields, pos
        delta, ftype = head >> 4, head & 0x0F
        if delta:
            fid = last + delta
        else:
            raw, pos = _varint(buf, pos)
            fid = _zigzag(raw)
        last = fid
        fields[fid], pos = _value(buf, pos, ftype, depth)


def _int(fields: dict[int, Any], fid: int, what: str, default: int | None = None) -> int:
    v = fields.get(fid, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise Unsupported(f"page header field {what} missing or not an integer")
    return v


def page_header(buf: bytes, pos: int) -> tuple[dict[int, Any], int]:
    """The PageHeader struct at ``pos`` ({field id: value}) and where the page's data starts."""
    try:
        return _struct(buf, pos)
    except IndexError:
        raise Unsupported("page header runs past the column chunk") from None


# ---------------------------------------------------------------- values

def _hybrid(buf: bytes, pos: int, end: int, width: int, count: int) -> np.ndarray:
    """The first ``count`` values of an RLE / bit-packed hybrid run sequence."""
    out = np.empty(count, np.int64)
    if width == 0:
        out[:] = 0
        return out
    if width > 32:
        raise Unsupported(f"bit width {width}")
    weights = np.left_shift(np.int64(1), np.arange(width, dtype=np.int64))
    vbytes = (width + 7) // 8
    n = 0
    while n < count:
        if pos >= end:
            raise Unsupported("RLE / bit-packed data ends before its values")
        header, pos = _varint(buf, pos)
        if header & 1:
            groups = header >> 1
            nbytes = groups * width
            if pos + nbytes > end:
                raise Unsupported("bit-packed run past its page")
            bits = np.unpackbits(np.frombuffer(buf, np.uint8, nbytes, pos), bitorder="little")
            values = bits.reshape(-1, width) @ weights
            take = min(groups * 8, count - n)
            out[n:n + take] = values[:take]
            pos += nbytes
        else:
            run = header >> 1
            if pos + vbytes > end:
                raise Unsupported("RLE run past its page")
            value = int.from_bytes(buf[pos:pos + vbytes], "little")
            pos += vbytes
            take = min(run, count - n)
            out[n:n + take] = value
        n += take
    return out


_FIXED = {"INT32": ("<i4", 4), "INT64": ("<i8", 8), "FLOAT": ("<f4", 4), "DOUBLE": ("<f8", 8)}
_ARROW_FIXED = {"INT32": pa.int32(), "INT64": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64()}
_U32 = struct.Struct("<I").unpack_from
_BYTE_WEIGHTS = np.array([1, 1 << 8, 1 << 16, 1 << 24], np.int64)


def _u32_at(view: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The little-endian uint32 at each byte offset ``at`` of ``view`` (in bounds: the caller checks)."""
    return view[at[:, None] + np.arange(4)].astype(np.int64) @ _BYTE_WEIGHTS


def _plain(buf: bytes, pos: int, end: int, physical: str, width: int, wanted: np.ndarray) -> pa.Array:
    """PLAIN-encoded values number ``wanted`` (ascending) of the values starting at ``pos``,
    as an Arrow array of the physical type (byte arrays as binary): numpy gathers, no
    Python object per value."""
    n = len(wanted)
    last = int(wanted[-1]) if n else -1
    view = np.frombuffer(buf, np.uint8)
    if physical in _FIXED:
        dtype, size = _FIXED[physical]
        if pos + (last + 1) * size > end:
            raise Unsupported("PLAIN values past their page")
        return pa.array(np.frombuffer(buf, dtype, last + 1, pos)[wanted], _ARROW_FIXED[physical])
    if physical == "BOOLEAN":
        if n and pos + last // 8 >= end:
            raise Unsupported("PLAIN booleans past their page")
        bits = np.unpackbits(view[pos:pos + last // 8 + 1], bitorder="little") if n else view[:0]
        return pa.array(bits[wanted].astype(np.bool_), pa.bool_())
    if physical == "FIXED_LEN_BYTE_ARRAY":
        if width <= 0 or pos + (last + 1) * width > end:
            raise Unsupported("PLAIN fixed-length values past their page")
        data = view[(pos + wanted * width)[:, None] + np.arange(width)].tobytes()
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(data)])
    if physical == "BYTE_ARRAY":
        starts = _walk(buf, pos, end, last + 1)
        return _byte_arrays(view, starts[wanted], end)
    raise Unsupported(f"physical type {physical}")


def _byte_arrays(view: np.ndarray, starts: np.ndarray, end: int) -> pa.Array:
    """The PLAIN byte arrays whose length prefixes are at ``starts``, as one binary array
    (offsets from the lengths, the bytes in one gather)."""
    n = len(starts)
    lengths = _u32_at(view, starts) if n else np.zeros(0, np.int64)
    if n and int((starts + 4 + lengths).max()) > end:
        raise Unsupported("PLAIN byte arrays past their page")
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:
        raise Unsupported("byte arrays over 2 GiB in one page")
    if n > 1 and starts[-1] + 4 + lengths[-1] - starts[0] == total + 4 * n:
        # consecutive values (a dictionary: all of them): drop the length prefixes from their
        # span with one mask, far cheaper than a gather index per byte
        keep = np.ones(total + 4 * n, np.bool_)
        keep[(starts - starts[0])[:, None] + np.arange(4)] = False
        data = view[starts[0]:starts[0] + total + 4 * n][keep]
    else:
        data = view[np.repeat(starts + 4 - offsets[:-1], lengths) + np.arange(total)] if total else view[:0]
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(data.tobytes())])


#: values walked one by one between checks for a run of equal lengths
_WALK_BLOCK = 16


def _walk(buf: bytes, pos: int, end: int, count: int) -> np.ndarray:
    """Where each of the first ``count`` PLAIN byte arrays from ``pos`` starts (its length
    prefix). Lengths chain the values, so in general this is a loop; but runs of equal
    lengths (ids, most urls: every value of a fixed-width column) are found with numpy:
    after a block walked one by one whose lengths all look equal, guess the next values
    start one length apart, check every guessed prefix at once (a strided view, no
    gather), and keep the run up to the first wrong guess. Text of varying lengths costs
    one subtraction a block more than the plain loop."""
    pieces: list[np.ndarray] = []
    walked: list[int] = []
    append, unpack = walked.append, _U32
    view = np.frombuffer(buf, np.uint8)
    n, window = 0, count
    try:
        while n < count:
            block, m = pos, min(_WALK_BLOCK, count - n)
            for _ in range(m):
                append(pos)
                step = 4 + unpack(buf, pos)[0]
                pos += step
            n += m
            if n == count or pos - block != m * step:
                continue
            pieces.append(np.asarray(walked, np.int64))
            walked.clear()
            while n < count:  # the block's lengths were equal: guess runs of them
                step = 4 + unpack(buf, pos)[0]
                fit = min(count - n, window, (end - pos) // step)  # values of this length that fit the page
                if fit < 2:
                    break
                prefixes = np.lib.stride_tricks.as_strided(view[pos:], (fit, 4), (step, 1))
                same = np.ascontiguousarray(prefixes).view("<u4").ravel() == step - 4
                run = fit if same.all() else int(np.argmin(same))
                pieces.append(np.arange(pos, pos + run * step, step, dtype=np.int64))
                n, pos = n + run, pos + run * step
                if run < fit:
                    window = max(2 * run, _WALK_BLOCK)
                    break
                window *= 4
    except struct.error:
        raise Unsupported("PLAIN byte arrays past their page") from None
    if pos > end:
        raise Unsupported("PLAIN byte arrays past their page")
    if walked or not pieces:
        pieces.append(np.asarray(walked, np.int64))
    return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]


class _Dictionary:
    """A decoded dictionary page as an Arrow array of the physical type: values by index."""

    def __init__(self, buf: bytes, count: int, physical: str, width: int):
        self.count = count
        self.values = _plain(buf, 0, len(buf), physical, width, np.arange(count))
        self.nbytes = self.values.nbytes

    def get(self, indices: np.ndarray) -> pa.Array:
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= self.count):
            raise Unsupported("dictionary index out of range")
        return self.values.take(pa.array(indices, pa.int64()))


# ---------------------------------------------------------------- codecs

def _decompress(codec: str, data: bytes, size: int) -> bytes:
    if codec == "UNCOMPRESSED":
        out = bytes(data)
    elif codec == "ZSTD":
        try:
            import zstandard
        except ImportError:  # pyarrow's codec does the same, a little slower
            out = pa.Codec("zstd").decompress(data, decompressed_size=size, asbytes=True)
        else:
            dec = getattr(_LOCAL, "zstd", None)
            if dec is None:  # a decompressor is not safe to share between threads
                dec = _LOCAL.zstd = zstandard.ZstdDecompressor()
            try:
                out = dec.decompress(data, max_output_size=size)
            except zstandard.ZstdError as e:
                raise Unsupported(f"zstd: {e}") from None
    elif codec in ("SNAPPY", "GZIP"):
        out = pa.Codec(codec.lower()).decompress(data, decompressed_size=size, asbytes=True)
    else:
        raise Unsupported(f"codec {codec}")
    if len(out) != size:
        raise Unsupported(f"page decompressed to {len(out)} bytes, its header says {size}")
    return out


# ---------------------------------------------------------------- Arrow types

def _check_type(physical: str, descr: Any, arrow_type: pa.DataType) -> None:
    """Raise unless values of ``physical`` build ``arrow_type`` exactly as pyarrow reads them."""
    import json

    t = arrow_type
    logical = json.loads(descr.logical_type.to_json()) if descr.logical_type is not None else {"Type": "None"}
    kind = logical.get("Type")

    def plain_int(bits):
        return kind == "None" or kind == "Int" and logical.get("bitWidth") == bits and logical.get("isSigned") is True

    ok = False
    if physical == "BOOLEAN":
        ok = pa.types.is_boolean(t) and kind == "None"
    elif physical == "INT32":
        ok = pa.types.is_int32(t) and plain_int(32) or pa.types.is_date32(t) and kind == "Date"
    elif physical == "INT64":
        if pa.types.is_int64(t):
            ok = plain_int(64)
        elif pa.types.is_timestamp(t) and kind == "Timestamp":
            unit = {"us": "microseconds", "ms": "milliseconds", "ns": "nanoseconds"}.get(t.unit)
            utc = logical.get("isAdjustedToUTC")
            ok = unit == logical.get("timeUnit") and (t.tz is None and utc is False or
                                                      t.tz is not None and utc is True)
    elif physical == "FLOAT":
        ok = pa.types.is_float32(t) and kind == "None"
    elif physical == "DOUBLE":
        ok = pa.types.is_float64(t) and kind == "None"
    elif physical == "BYTE_ARRAY":
        ok = (pa.types.is_string(t) or pa.types.is_large_string(t)) and kind == "String" or \
             (pa.types.is_binary(t) or pa.types.is_large_binary(t)) and kind == "None"
    elif physical == "FIXED_LEN_BYTE_ARRAY":
        ok = pa.types.is_fixed_size_binary(t) and t.byte_width == descr.length and kind == "None"
    if not ok:
        raise Unsupported(f"{physical} ({kind}) as Arrow {t}")


def _physical_arrow(physical: str, width: int) -> pa.DataType:
    """The Arrow type :func:`_plain` builds for ``physical``."""
    if physical in _ARROW_FIXED:
        return _ARROW_FIXED[physical]
    return {"BOOLEAN": pa.bool_(), "BYTE_ARRAY": pa.binary()}.get(physical) or pa.binary(width)


def _to_type(values: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """Physical values (see :func:`_plain`) as ``arrow_type``, built as pyarrow's reader builds it."""
    t = arrow_type
    if pa.types.is_timestamp(t) or pa.types.is_date32(t):
        return values.view(t)
    if values.type == t:
        return values
    # binary -> string validates UTF-8, as pyarrow's reader does: invalid bytes raise, never pass
    return values.cast(t)


# ---------------------------------------------------------------- one column chunk

class _Chunk(NamedTuple):
    """Where a column chunk's pages are, walked from its page headers as far as reads needed,
    then cached (a first read of one row does not pay for walking the rest)."""

    start: int  # file offset of the chunk's first page
    #: per data page walked: (offset of its data in the chunk, compressed size, uncompressed size, page type, sub-header)
    pages: list[tuple[int, int, int, int, dict]]
    #: the first row of each data page walked, then the first row after them
    first_rows: np.ndarray
    dict_at: tuple[int, dict, int] | None  # the dictionary page: (offset of its data, header, uncompressed size)
    walked: int  # offset in the chunk of the first header not walked yet (the chunk's size: all walked)
    complete: bool


#: column chunks whose page layout is kept (a few hundred bytes each; a service re-reads hot groups)
LAYOUT_CACHE_CHUNKS = 1 << 16
_LAYOUTS: "OrderedDict[tuple, _Chunk]" = OrderedDict()
#: (path, leaf column, Arrow type) already checked by :func:`_check_type`
_CHECKED: "OrderedDict[tuple, bool]" = OrderedDict()


def _layout(buf: bytes, start: int, row: int, known: _Chunk | None = None) -> _Chunk:
    """The pages of the column chunk ``buf`` (read from file offset ``start``), from its headers:
    those ``known`` already, then walked on until the page holding ``row`` is in."""
    size = len(buf)
    if known is None:
        pos, first_row, pages, first_rows, dict_at = 0, 0, [], [], None
    else:
        pos, first_row = known.walked, int(known.first_rows[-1])
        pages, first_rows, dict_at = list(known.pages), known.first_rows[:-1].tolist(), known.dict_at
    while pos < size and first_row <= row:
        head, data = page_header(buf, pos)
        ptype = _int(head, 1, "type")
        usize, csize = _int(head, 2, "uncompressed_page_size"), _int(head, 3, "compressed_page_size")
        if csize < 0 or usize < 0 or data + csize > size:
            raise Unsupported("page sizes past the column chunk")
        pos = data + csize
        if ptype == DICTIONARY_PAGE:
            dict_at = (data, head, usize)
            continue
        if ptype == INDEX_PAGE:
            continue
        if ptype == DATA_PAGE:
            sub = head.get(5)
            if not isinstance(sub, dict):
                raise Unsupported("data page without its header")
            page_rows = _int(sub, 1, "num_values")
        elif ptype == DATA_PAGE_V2:
            sub = head.get(8)
            if not isinstance(sub, dict):
                raise Unsupported("v2 data page without its header")
            page_rows = _int(sub, 3, "num_rows")
            if _int(sub, 1, "num_values") != page_rows:
                raise Unsupported("v2 page values != rows in a non-repeated column")
        else:
            raise Unsupported(f"page type {ptype}")
        if page_rows < 0:
            raise Unsupported("negative row count")
        pages.append((data, csize, usize, ptype, sub))
        first_rows.append(first_row)
        first_row += page_rows
    first_rows.append(first_row)
    return _Chunk(start, pages, np.asarray(first_rows, np.int64), dict_at, pos, pos >= size)


def _column_rows(fd: int, path: str, group: int, col: int, chunk: Any, descr: Any, arrow_type: pa.DataType,
                 rows: np.ndarray) -> pa.Array:
    """Values of leaf column ``col`` at ``rows`` (ascending, distinct, within the group).

    Each data page holding a wanted row is read and decoded once, its rows taken out as
    one array; the pages' arrays are concatenated once.
    """
    physical = chunk.physical_type
    if descr.max_repetition_level:
        raise Unsupported("repeated column")
    checked = (path, col, arrow_type)
    with _LOCK:
        known = checked in _CHECKED
    if not known:  # a file's column types never change: checked once (the logical type is JSON to parse)
        _check_type(physical, descr, arrow_type)
        with _LOCK:
            _CHECKED[checked] = True
            while len(_CHECKED) > LAYOUT_CACHE_CHUNKS:
                _CHECKED.popitem(last=False)
    max_def = descr.max_definition_level
    codec = chunk.compression
    key = (path, group, col)
    with _LOCK:
        layout = _LAYOUTS.get(key)
        if layout is not None:
            _LAYOUTS.move_to_end(key)
    buf = None
    if not len(rows):
        return _to_type(pa.array([], _physical_arrow(physical, descr.length)), arrow_type)
    last_row = int(rows[-1])
    if layout is None or not layout.complete and last_row >= int(layout.first_rows[-1]):
        # pages not walked yet: read the whole chunk, walk its headers on to the last row
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        if start is None or start < 0:
            raise Unsupported("column chunk without page offsets")
        size = chunk.total_compressed_size
        buf = os.pread(fd, size, start)
        if len(buf) != size:
            raise Unsupported("column chunk past the end of the file")
        layout = _layout(buf, start, last_row, layout)
        with _LOCK:
            _LAYOUTS[key] = layout
            while len(_LAYOUTS) > LAYOUT_CACHE_CHUNKS:
                _LAYOUTS.popitem(last=False)
    first_rows = layout.first_rows
    if last_row >= int(first_rows[-1]):
        raise Unsupported("rows past the column chunk's pages")
    page_of = np.searchsorted(first_rows, rows, side="right") - 1
    # rows ascend, so each page's rows are one slice
    cuts = np.flatnonzero(page_of[1:] != page_of[:-1]) + 1
    needed = page_of[np.concatenate([[0], cuts])]
    bounds = [0, *cuts.tolist(), len(rows)]
    if buf is None:  # the layout is known: read only the span of the needed pages
        lo = layout.pages[int(needed[0])][0]
        last = layout.pages[int(needed[-1])]
        span = os.pread(fd, last[0] + last[1] - lo, layout.start + lo)
        if len(span) != last[0] + last[1] - lo:
            raise Unsupported("column chunk past the end of the file")
    else:
        lo, span = 0, buf

    def dictionary() -> _Dictionary:
        def page_bytes() -> bytes:
            if layout.dict_at is None:
                raise Unsupported("dictionary-encoded page without a dictionary page")
            data, head, _ = layout.dict_at
            csize = _int(head, 3, "compressed_page_size")
            got = buf[data:data + csize] if buf is not None else os.pread(fd, csize, layout.start + data)
            if len(got) != csize:
                raise Unsupported("dictionary page past the end of the file")
            return got
        return _dictionary(page_bytes, layout.dict_at, codec, physical, descr, key)

    pieces = []
    for n, p in enumerate(needed.tolist()):
        data, csize, usize, ptype, sub = layout.pages[p]
        at = rows[bounds[n]:bounds[n + 1]] - int(first_rows[p])
        pieces.append(_page_values(span[data - lo:data - lo + csize], csize, usize, ptype, sub, codec, physical,
                                   descr, max_def, at, int(first_rows[p + 1] - first_rows[p]), dictionary))
    return _to_type(pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0], arrow_type)


def _page_values(page_data: bytes, csize: int, usize: int, ptype: int, sub: dict, codec: str, physical: str,
                 descr: Any, max_def: int, at: np.ndarray, page_rows: int, dictionary: Any) -> pa.Array:
    """Values (null for null) at rows ``at`` (ascending) of one data page (``page_data``: its
    bytes after the header), as an array of the physical type."""
    encoding = _int(sub, 2 if ptype == DATA_PAGE else 4, "encoding")
    if ptype == DATA_PAGE:
        page = _decompress(codec, page_data, usize)
        pos, end = 0, len(page)
        if max_def:
            if _int(sub, 3, "definition_level_encoding") != RLE:
                raise Unsupported("definition levels not RLE")
            if pos + 4 > end:
                raise Unsupported("definition levels past their page")
            n = int.from_bytes(page[pos:pos + 4], "little")
            levels_buf, levels_at, levels_end = page, pos + 4, pos + 4 + n
            if levels_end > end:
                raise Unsupported("definition levels past their page")
            pos = levels_end
    else:
        dlen, rlen = _int(sub, 5, "definition_levels_byte_length"), _int(sub, 6, "repetition_levels_byte_length")
        if rlen != 0 or dlen < 0 or dlen + rlen > csize:
            raise Unsupported("v2 level lengths")
        compressed = sub.get(7, True)
        body = page_data[dlen:csize]
        page = _decompress(codec, body, usize - dlen) if compressed is True else bytes(body)
        if compressed is not True and compressed is not False:
            raise Unsupported("v2 is_compressed not a boolean")
        levels_buf, levels_at, levels_end = page_data, 0, dlen
        pos, end = 0, len(page)
    last = int(at[-1])
    if last >= page_rows:
        raise Unsupported("row past its page")
    if max_def:
        width = max_def.bit_length()
        levels = _hybrid(levels_buf, levels_at, levels_end, width, last + 1)
        if int(levels.max()) > max_def or int(levels.min()) < 0:
            raise Unsupported("definition level above the column's maximum")
        present = levels == max_def
        # index of each wanted row among the page's non-null values
        before = np.cumsum(present) - present
        valid = present[at]
        k = before[at][valid]
    else:
        valid = None
        k = at
    if encoding == PLAIN:
        got = _plain(page, pos, end, physical, descr.length, k)
    elif encoding in (RLE_DICTIONARY, PLAIN_DICTIONARY):
        if pos >= end:
            raise Unsupported("dictionary indices missing")
        width = page[pos]
        idx = _hybrid(page, pos + 1, end, width, int(k[-1]) + 1) if len(k) else np.empty(0, np.int64)
        got = dictionary().get(idx[k])
    elif encoding == RLE and physical == "BOOLEAN":  # v2 pages' booleans: length-prefixed, width 1
        if pos + 4 > end:
            raise Unsupported("boolean RLE past its page")
        n = int.from_bytes(page[pos:pos + 4], "little")
        if pos + 4 + n > end:
            raise Unsupported("boolean RLE past its page")
        bits = _hybrid(page, pos + 4, pos + 4 + n, 1, int(k[-1]) + 1) if len(k) else np.empty(0, np.int64)
        got = pa.array(bits[k].astype(np.bool_), pa.bool_())
    else:
        raise Unsupported(f"encoding {encoding}")
    if valid is None or valid.all():
        return got
    # nulls where a wanted row has none: a take through null indices
    where = np.zeros(len(at), np.int64)
    where[valid] = np.arange(len(got))
    return got.take(pa.array(where, pa.int64(), mask=~valid))


def _dictionary(page_bytes: Any, dict_at: Any, codec: str, physical: str, descr: Any, key: tuple) -> _Dictionary:
    """The chunk's decoded dictionary, cached by ``key``; ``page_bytes()`` reads its page when not."""
    with _LOCK:
        hit = _DICTS.get(key)
        if hit is not None:
            _DICTS.move_to_end(key)
            return hit[0]
    if dict_at is None:
        raise Unsupported("dictionary-encoded page without a dictionary page")
    data, head, usize = dict_at
    sub = head.get(7)
    if not isinstance(sub, dict):
        raise Unsupported("dictionary page without its header")
    if _int(sub, 2, "encoding") not in (PLAIN, PLAIN_DICTIONARY):
        raise Unsupported("dictionary not PLAIN")
    count = _int(sub, 1, "num_values")
    if usize > DICT_MAX_BYTES:
        raise Unsupported(f"dictionary of {usize} bytes")
    decoded = _Dictionary(_decompress(codec, page_bytes(), usize), count, physical, descr.length)
    with _LOCK:
        _DICTS[key] = (decoded, decoded.nbytes)
        _DICT_BYTES[0] += decoded.nbytes
        while _DICT_BYTES[0] > DICT_CACHE_BYTES and len(_DICTS) > 1:
            _, (_, n) = _DICTS.popitem(last=False)
            _DICT_BYTES[0] -= n
    return decoded


# ---------------------------------------------------------------- entry point

def leaf_columns(meta: Any) -> dict[str, int]:
    """``{dotted leaf path: column index}`` of a file's Parquet schema."""
    return {meta.schema.column(i).path: i for i in range(meta.num_columns)}


def arrow_type_at(schema: pa.Schema, dotted: str) -> pa.DataType:
    head, *rest = dotted.split(".")
    t = schema.field(head).type
    for sub in rest:
        t = t.field(sub).type
    return t


def read_rows(local_path: str, meta: Any, schema: pa.Schema, group: int, rows: list[int] | np.ndarray,
              columns: list[str], leaves: dict[str, int] | None = None) -> dict[str, pa.Array]:
    """Values of leaf ``columns`` (dotted) of a local file's row ``group`` at ``rows``
    (positions within the group, any order, repeats allowed), in that order.

    Raises :class:`Unsupported` when any of them cannot be read exactly this way.
    """
    rows = np.asarray(rows, np.int64)
    wanted, back = np.unique(rows, return_inverse=True)
    got = read_file_rows(local_path, meta, schema, [(group, wanted)], columns, leaves)
    if np.array_equal(wanted, rows):
        return got
    back_arr = pa.array(back, pa.int64())
    return {c: arr.take(back_arr) for c, arr in got.items()}


def read_file_rows(local_path: str, meta: Any, schema: pa.Schema, rows_by_group: list[tuple[int, np.ndarray]],
                   columns: list[str], leaves: dict[str, int] | None = None) -> dict[str, pa.Array]:
    """Values of leaf ``columns`` (dotted) of a local file at rows of several row groups:
    ``[(group, rows)]``, each group's rows ascending and distinct. Per column, the groups'
    values in the order given, concatenated once; the file is opened once.

    Raises :class:`Unsupported` when any of them cannot be read exactly this way.
    """
    leaves = leaves if leaves is not None else leaf_columns(meta)
    for group, rows in rows_by_group:
        if len(rows) and (rows[0] < 0 or rows[-1] >= meta.row_group(group).num_rows):
            raise Unsupported("row outside its group")
    out = {}
    fd = os.open(local_path, os.O_RDONLY)
    try:
        for c in columns:
            col = leaves.get(c)
            if col is None:
                raise Unsupported(f"{c} is not a leaf column of the file")
            typ, descr = arrow_type_at(schema, c), meta.schema.column(col)
            pieces = [_column_rows(fd, local_path, group, col, meta.row_group(group).column(col), descr, typ, rows)
                      for group, rows in rows_by_group]
            out[c] = pa.concat_arrays(pieces) if len(pieces) != 1 else pieces[0]
    finally:
        os.close(fd)
    return out
