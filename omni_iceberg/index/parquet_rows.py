"""Read single rows out of data files by position: what the index points at.

Only the row groups holding the wanted positions are read, and only the wanted
columns (nested fields such as ``RawData.url`` read just that leaf). Parquet footers
are cached per path (data files are immutable; a footer read and parse was a large
part of a point lookup); files are opened per read, so the cache holds no handles.
A row group is the smallest unit pyarrow decodes, so its size bounds the cost of
reading one row: family tables hold row groups of about 1 MiB whatever their rows
(:mod:`catalog_ext.row_groups`), where pyiceberg's default made a file one group.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from omni_iceberg.index import page_reads
from omni_iceberg.index.file_input import is_local, open_input

_FOOTERS: "OrderedDict[str, tuple[Any, list[int], pa.Schema]]" = OrderedDict()
#: footers are a few KiB each and hold no file handle: many can stay cached
_FOOTERS_MAX = 4096
_LOCK = threading.Lock()
#: files the page reader could not answer (their layout): read by row group straight away
_NO_PAGES: "OrderedDict[str, bool]" = OrderedDict()


def _footer(path: str, io: Any = None) -> tuple[Any, list[int], pa.Schema]:
    """(Parquet FileMetaData, starting row of each row group, Arrow schema), cached."""
    with _LOCK:
        hit = _FOOTERS.get(path)
        if hit is not None:
            _FOOTERS.move_to_end(path)
            return hit
    import pyarrow.parquet as pq

    with open_input(path, io) as f:
        pf = pq.ParquetFile(f)
        meta, schema = pf.metadata, pf.schema_arrow
    starts, total = [], 0
    for i in range(meta.num_row_groups):
        starts.append(total)
        total += meta.row_group(i).num_rows
    entry = (meta, starts, schema)
    with _LOCK:
        _FOOTERS[path] = entry
        while len(_FOOTERS) > _FOOTERS_MAX:
            _FOOTERS.popitem(last=False)
    return entry


def _has_path(schema: pa.Schema, dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[0] not in schema.names:
        return False
    t = schema.field(parts[0]).type
    for sub in parts[1:]:
        if not pa.types.is_struct(t) or t.get_field_index(sub) < 0:
            return False
        t = t.field(sub).type
    return True


def read_positions(path: str, positions: list[int], columns: list[str], io: Any = None,
                   use_threads: bool = True) -> dict[str, pa.Array]:
    """Values of ``columns`` (top-level or dotted nested names) at ``positions``, in that order.

    Each row group holding a wanted position is decoded once, all of them in one read in
    file order (a 1,000-id lookup asks for several rows of many groups); the rows are
    then taken out of that read in one ``take`` per column. A column the file does not
    have (added to the table after the file was written) comes back missing from the
    dict; the caller fills nulls of the logical type.
    """
    import pyarrow.parquet as pq

    meta, starts, schema = _footer(path, io)
    present = [c for c in columns if _has_path(schema, c)]
    pos = np.asarray(positions, np.int64)
    group_of = np.searchsorted(np.asarray(starts, np.int64), pos, side="right") - 1
    groups = np.unique(group_of)  # sorted: file order
    # where each needed group starts in the concatenated read
    sizes = np.array([meta.row_group(int(g)).num_rows for g in groups], np.int64)
    read_start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    take = pa.array(read_start[np.searchsorted(groups, group_of)] + pos - np.asarray(starts, np.int64)[group_of],
                    pa.int64())
    local = io is None or is_local(path)
    if local and len(pos) <= PAGE_READ_MAX_ROWS and path not in _NO_PAGES:
        try:
            return _read_pages(path, meta, schema, starts, pos, group_of, groups, present)
        except page_reads.Unsupported:
            # read the row groups whole, below: the page reader answers exactly or not at all.
            # A file's layout decides that (big dictionaries, encodings): do not try it again
            with _LOCK:
                _NO_PAGES[path] = True
                while len(_NO_PAGES) > _FOOTERS_MAX:
                    _NO_PAGES.popitem(last=False)
    with open_input(path, io) as f:
        # the cached footer: no footer read or parse. Pre-buffering coalesces a row group's
        # column reads into a few large ones, which pays on an object store's latency; on a
        # local file it is one more copy (measured 7% of a one-group read), so only remote.
        # One group's few columns decode faster on this thread than handed to pyarrow's pool
        pf = pq.ParquetFile(f, metadata=meta, pre_buffer=not local)
        data = pf.read_row_groups(groups.tolist(), columns=present, use_threads=use_threads and len(groups) > 1)
    out = {}
    for c in present:
        head, *rest = c.split(".")
        arr = data.column(head)
        for sub in rest:
            arr = pc.struct_field(arr, sub)
        arr = pc.take(arr, take)
        arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        if pa.types.is_large_string(arr.type):
            arr = arr.cast(pa.string())
        out[c] = arr
    return out


#: up to this many rows of one file are read page by page (:mod:`omni_iceberg.index.page_reads`);
#: more rows touch most pages of their groups, which pyarrow decodes faster whole
PAGE_READ_MAX_ROWS = 64


def _read_pages(path: str, meta: Any, schema: pa.Schema, starts: list[int], pos: np.ndarray,
                group_of: np.ndarray, groups: np.ndarray, columns: list[str]) -> dict[str, pa.Array]:
    """``read_positions`` through the page reader: the distinct positions in file order,
    grouped by row group (each page decoded once for all its rows), then one ``take``
    per column back to the asked order (repeats included)."""
    from urllib.parse import urlparse

    local_path = urlparse(path).path if path.startswith("file:") else path
    distinct, back = np.unique(pos, return_inverse=True)  # sorted: file order, so group order too
    group_at = np.asarray(starts, np.int64)
    group_of_distinct = np.searchsorted(group_at, distinct, side="right") - 1
    cuts = np.flatnonzero(group_of_distinct[1:] != group_of_distinct[:-1]) + 1
    rows_by_group = [(int(g[0]), g_rows - group_at[g[0]])
                     for g, g_rows in zip(np.split(group_of_distinct, cuts), np.split(distinct, cuts))]
    got = page_reads.read_file_rows(local_path, meta, schema, rows_by_group, columns, page_reads.leaf_columns(meta))
    in_order = len(distinct) == len(pos) and bool(np.all(pos[:-1] < pos[1:]))
    back_arr = None if in_order else pa.array(back, pa.int64())
    out = {}
    for c in columns:
        arr = got[c] if back_arr is None else got[c].take(back_arr)
        if pa.types.is_large_string(arr.type):
            arr = arr.cast(pa.string())
        out[c] = arr
    return out


def by_file(locations: dict[str, list[Any]], *, unique: bool = True) -> tuple[dict[str, list[tuple[str, Any]]], str]:
    """``{path: [(id, Location)]}`` from ``IndexView.locations``; with ``unique``, ("", problem)
    when an id has several locations (the index cannot say which row is the id's)."""
    out: dict[str, list[tuple[str, Any]]] = {}
    for rid, locs in locations.items():
        if unique and len(locs) > 1:
            return {}, f"id {rid} has {len(locs)} locations in the index"
        for loc in locs:
            out.setdefault(loc.path, []).append((rid, loc))
    return out, ""


#: how ``read_located`` answered one file: from the entries' inline values, or by reading it
FROM_INLINE, FROM_FILE = "inline", "file"


def read_located(files: dict[str, list[tuple[str, Any]]], columns: list[str], io: Any = None
                 ) -> tuple[list[tuple[list[str], dict[str, pa.Array], str]], str]:
    """Read ``columns`` - and always the id and the batch (from the file's record when it
    names one; a compacted file holds several batches, read from it) - of the rows at
    ``{path: [(id, Location)]}``.

    A file whose inline values hold every wanted column is answered from them (no file
    opened; see :mod:`omni_iceberg.index.inline`). The others are read by position,
    checking each row holds its id. Returns per file (the ids, in the order read, their
    values, and ``FROM_INLINE`` or ``FROM_FILE``), or ([], problem) naming a file whose rows hold other ids: the caller
    then scans instead. Files are read in parallel (Parquet decoding releases the GIL)
    when there are more than two.
    """
    wanted_columns = list(dict.fromkeys([ID_COLUMN, BATCH_COLUMN, *columns]))
    out, to_read, few = [], [], []
    for path, wanted in files.items():
        need = _inline_need(wanted, wanted_columns)
        if need is None:
            to_read.append((path, wanted))
        elif len(wanted) < FEW_ROWS_PER_FILE:
            few.append((wanted, need))
        else:
            out.append(([rid for rid, _ in wanted], _from_inline(wanted, need), FROM_INLINE))
    for piece in _few_from_inline(few):
        out.append(piece)

    to_read.sort(key=lambda item: item[0])  # file order: a service reading many ids sees one order
    parallel = len(to_read) > 2

    without_batch = [c for c in wanted_columns if c != BATCH_COLUMN]

    def read(item):
        path, wanted = item
        # a file written by one batch names it in its record: its batch column is not read
        # (a column of one value, but a page read per row group all the same)
        batch = wanted[0][1].batch
        # in the pool, one thread per file: pyarrow's own threads per column would only contend
        values = read_positions(path, [loc.position for _, loc in wanted], without_batch if batch else wanted_columns,
                                io, use_threads=not parallel)
        if batch:
            values[BATCH_COLUMN] = pa.array([batch], pa.string()).take(pa.array(np.zeros(len(wanted), np.int64)))
        return path, wanted, values

    done = list(_pool().map(read, to_read)) if parallel else [read(i) for i in to_read]
    for path, wanted, values in done:
        ids = [rid for rid, _ in wanted]
        got = values.get(ID_COLUMN)
        if got is None or not got.equals(pa.array(ids, got.type)):
            return [], f"index entries for {path} point at rows holding other ids"
        out.append((ids, values, FROM_FILE))
    return out, ""


#: below this many rows of one file, inline values are decoded row by row with the other
#: files' rows (a point lookup touches many files a row or two each); above, per file as arrays
FEW_ROWS_PER_FILE = 64


def _inline_need(wanted: list[tuple[str, Any]], columns: list[str]) -> list[str] | None:
    """The leaves to decode from the rows' inline values, or None when they lack one."""
    layout = wanted[0][1].layout
    names = layout.names
    batch_known = bool(wanted[0][1].batch)  # one batch per file unless compacted: in its record
    need = [c for c in columns if c != ID_COLUMN and not (c == BATCH_COLUMN and batch_known)]
    if not all(c in names for c in need) or not all(loc.inline for _, loc in wanted):
        return None
    return need


def _from_inline(wanted: list[tuple[str, Any]], need: list[str]) -> dict[str, pa.Array]:
    """``need`` of one file's rows from their inline values, plus the id and the batch."""
    from omni_iceberg.index.inline import decode

    return _with_keys(decode(wanted[0][1].layout, [loc.inline for _, loc in wanted], need), wanted)


def _with_keys(values: dict[str, pa.Array], rows: list[tuple[str, Any]]) -> dict[str, pa.Array]:
    """Decoded leaves plus the id and, where not decoded, the batch from each file's record."""
    values[ID_COLUMN] = pa.array([rid for rid, _ in rows], pa.string())
    if BATCH_COLUMN not in values:
        values[BATCH_COLUMN] = pa.array([loc.batch for _, loc in rows], pa.string())
    return values


def _few_from_inline(groups: list[tuple[list[tuple[str, Any]], list[str]]]
                     ) -> list[tuple[list[str], dict[str, pa.Array], str]]:
    """Files with few wanted rows, decoded together: one piece per set of decoded leaves."""
    from omni_iceberg.index.inline import decode_rows

    by_need: dict[tuple[str, ...], list[tuple[str, Any]]] = {}
    for wanted, need in groups:
        by_need.setdefault(tuple(need), []).extend(wanted)
    pieces = []
    for need, rows in by_need.items():
        values = _with_keys(decode_rows([(loc.layout, loc.inline) for _, loc in rows], need), rows)
        pieces.append(([rid for rid, _ in rows], values, FROM_INLINE))
    return pieces


#: files read at once by one lookup
READ_THREADS = 8
_POOL: list[Any] = []


def _pool() -> Any:
    """One reader pool per process: starting threads per lookup cost more than a 1,000-id read."""
    from concurrent.futures import ThreadPoolExecutor

    with _LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="omni-index-read"))
        return _POOL[0]
