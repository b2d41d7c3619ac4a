"""Read single rows of a local Parquet file by decoding only the pages that hold them.

pyarrow decodes whole row groups (its reader ignores page indexes), so a point read
through the id index paid for every value of the group. Here each wanted column chunk
is read with one ``pread``, its page headers are walked (a small Thrift compact-protocol
decoder of ``PageHeader``), and only the data page holding each wanted row is
decompressed and decoded - plus the chunk's dictionary page when the page is
dictionary-encoded, decoded once and cached while it is small.

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
from typing import Any

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


def _plain(buf: bytes, pos: int, end: int, physical: str, width: int, wanted: np.ndarray) -> list:
    """PLAIN-encoded values number ``wanted`` (ascending) of the values starting at ``pos``."""
    if physical in _FIXED:
        dtype, size = _FIXED[physical]
        if len(wanted) and pos + (int(wanted[-1]) + 1) * size > end:
            raise Unsupported("PLAIN values past their page")
        return np.frombuffer(buf, dtype, (int(wanted[-1]) + 1) if len(wanted) else 0, pos)[wanted].tolist()
    if physical == "BOOLEAN":
        if len(wanted) and pos + int(wanted[-1]) // 8 >= end:
            raise Unsupported("PLAIN booleans past their page")
        return [bool((buf[pos + int(k) // 8] >> (int(k) % 8)) & 1) for k in wanted]
    if physical == "FIXED_LEN_BYTE_ARRAY":
        if width <= 0 or (len(wanted) and pos + (int(wanted[-1]) + 1) * width > end):
            raise Unsupported("PLAIN fixed-length values past their page")
        return [bytes(buf[pos + int(k) * width:pos + (int(k) + 1) * width]) for k in wanted]
    if physical == "BYTE_ARRAY":
        if not len(wanted):
            return []
        starts = _walk(buf, pos, end, int(wanted[-1]) + 1)
        out = []
        for k in wanted.tolist():
            at = starts[k]
            out.append(bytes(buf[at + 4:at + 4 + _U32(buf, at)[0]]))
        return out
    raise Unsupported(f"physical type {physical}")


_U32 = struct.Struct("<I").unpack_from


def _walk(buf: bytes, pos: int, end: int, count: int) -> list[int]:
    """Where each of the first ``count`` PLAIN byte arrays from ``pos`` starts (its length
    prefix). Lengths chain the values, so this is one tight loop; pages are small."""
    starts = []
    append, unpack = starts.append, _U32
    try:
        for _ in range(count):
            append(pos)
            pos += 4 + unpack(buf, pos)[0]
    except struct.error:
        raise Unsupported("PLAIN byte arrays past their page") from None
    if pos > end:
        raise Unsupported("PLAIN byte arrays past their page")
    return starts


class _Dictionary:
    """A decoded dictionary page: values looked up by index."""

    def __init__(self, buf: bytes, count: int, physical: str, width: int):
        self.count = count
        self.physical = physical
        if physical == "BYTE_ARRAY":
            self.buf, self.starts = buf, _walk(buf, 0, len(buf), count)
        else:
            self.values = _plain(buf, 0, len(buf), physical, width, np.arange(count))
        self.nbytes = len(buf) + 8 * (count + 1)

    def get(self, indices: np.ndarray) -> list:
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= self.count):
            raise Unsupported("dictionary index out of range")
        if self.physical == "BYTE_ARRAY":
            s, b = self.starts, self.buf
            return [bytes(b[s[i] + 4:s[i] + 4 + _U32(b, s[i])[0]]) for i in indices.tolist()]
        return [self.values[i] for i in indices.tolist()]


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


def _build(values: list, arrow_type: pa.DataType) -> pa.Array:
    t = arrow_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        # the cast validates UTF-8, as pyarrow's reader does: invalid bytes raise, never pass
        return pa.array(values, pa.binary()).cast(t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.array(values, t)
    if pa.types.is_timestamp(t) or pa.types.is_date32(t):
        physical = pa.int64() if pa.types.is_timestamp(t) else pa.int32()
        return pa.array(values, physical).view(t)
    return pa.array(values, t)


# ---------------------------------------------------------------- one column chunk

def _column_rows(fd: int, path: str, group: int, col: int, chunk: Any, descr: Any, arrow_type: pa.DataType,
                 rows: np.ndarray) -> pa.Array:
    """Values of leaf column ``col`` at ``rows`` (ascending, distinct, within the group)."""
    physical = chunk.physical_type
    if descr.max_repetition_level:
        raise Unsupported("repeated column")
    _check_type(physical, descr, arrow_type)
    max_def = descr.max_definition_level
    codec = chunk.compression
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    if start is None or start < 0:
        raise Unsupported("column chunk without page offsets")
    size = chunk.total_compressed_size
    buf = os.pread(fd, size, start)
    if len(buf) != size:
        raise Unsupported("column chunk past the end of the file")
    dict_at: tuple[int, dict, int] | None = None
    pos, first_row, r = 0, 0, 0
    values: list = [None] * len(rows)
    while r < len(rows):
        if pos >= size:
            raise Unsupported("rows past the column chunk's pages")
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
        end_row = first_row + page_rows
        take = []
        while r < len(rows) and rows[r] < end_row:
            take.append(r)
            r += 1
        if take:
            got = _page_values(buf, data, csize, usize, ptype, sub, codec, physical, descr, max_def,
                               (rows[take] - first_row).astype(np.int64), page_rows,
                               lambda: _dictionary(buf, dict_at, codec, physical, descr, (path, group, col)))
            for i, v in zip(take, got):
                values[i] = v
        first_row = end_row
    return _build(values, arrow_type)


def _page_values(buf: bytes, data: int, csize: int, usize: int, ptype: int, sub: dict, codec: str,
                 physical: str, descr: Any, max_def: int, at: np.ndarray, page_rows: int, dictionary: Any) -> list:
    """Values (None for null) at rows ``at`` (ascending) of one data page."""
    encoding = _int(sub, 2 if ptype == DATA_PAGE else 4, "encoding")
    if ptype == DATA_PAGE:
        page = _decompress(codec, buf[data:data + csize], usize)
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
        body = buf[data + dlen:data + csize]
        page = _decompress(codec, body, usize - dlen) if compressed is True else bytes(body)
        if compressed is not True and compressed is not False:
            raise Unsupported("v2 is_compressed not a boolean")
        levels_buf, levels_at, levels_end = buf, data, data + dlen
        pos, end = 0, len(page)
    last = int(at[-1])
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
        valid = np.ones(len(at), bool)
        k = at
    if encoding == PLAIN:
        got = _plain(page, pos, end, physical, descr.length, k)
    elif encoding in (RLE_DICTIONARY, PLAIN_DICTIONARY):
        if pos >= end:
            raise Unsupported("dictionary indices missing")
        width = page[pos]
        idx = _hybrid(page, pos + 1, end, width, int(k[-1]) + 1) if len(k) else np.empty(0, np.int64)
        got = dictionary().get(idx[k]) if len(k) else []
    elif encoding == RLE and physical == "BOOLEAN":  # v2 pages' booleans: length-prefixed, width 1
        if pos + 4 > end:
            raise Unsupported("boolean RLE past its page")
        n = int.from_bytes(page[pos:pos + 4], "little")
        if pos + 4 + n > end:
            raise Unsupported("boolean RLE past its page")
        bits = _hybrid(page, pos + 4, pos + 4 + n, 1, int(k[-1]) + 1) if len(k) else np.empty(0, np.int64)
        got = [bool(v) for v in bits[k].tolist()]
    else:
        raise Unsupported(f"encoding {encoding}")
    out, it = [], iter(got)
    for ok in valid.tolist():
        out.append(next(it) if ok else None)
    return out


def _dictionary(buf: bytes, dict_at: Any, codec: str, physical: str, descr: Any, key: tuple) -> _Dictionary:
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
    decoded = _Dictionary(_decompress(codec, buf[data:data + _int(head, 3, "compressed_page_size")], usize),
                          count, physical, descr.length)
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
    rg = meta.row_group(group)
    if len(wanted) and (wanted[0] < 0 or wanted[-1] >= rg.num_rows):
        raise Unsupported("row outside its group")
    leaves = leaves if leaves is not None else leaf_columns(meta)
    out = {}
    fd = os.open(local_path, os.O_RDONLY)
    try:
        for c in columns:
            col = leaves.get(c)
            if col is None:
                raise Unsupported(f"{c} is not a leaf column of the file")
            arr = _column_rows(fd, local_path, group, col, rg.column(col), meta.schema.column(col),
                               arrow_type_at(schema, c), wanted)
            out[c] = arr if np.array_equal(wanted, rows) else arr.take(pa.array(back, pa.int64()))
    finally:
        os.close(fd)
    return out
