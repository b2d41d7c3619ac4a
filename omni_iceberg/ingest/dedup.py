"""Which ids of a chunk does the table already hold? (dedup against earlier batches)

Asked once per chunk, in bulk and sorted, so a submit's cost and memory follow the
rows it brings, not the rows the table has accumulated:

* through the id index (:mod:`omni_iceberg.index`) when it is authoritative for the
  base table at the version the submit started from: a sorted batch lookup per chunk;
* otherwise - no index configured, or an index that lags (a table written before the
  index existed, a writer that did not index) - by reading every id of the base table
  once, as before the index existed. That is the slow path whose cost grows with the
  table, so the submit report says why it was taken and how to leave it
  (``omni index rebuild``).

A table with no batch yet has nothing to ask about.

Within the batch, :class:`BatchIds` remembers the ids taken so far: the first row with
some content is kept and later ones are duplicates, and the race re-check
(:mod:`.recheck`) asks it which ids are this submit's.
"""

from __future__ import annotations

import binascii
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa

from catalog_ext.contract import ID_COLUMN
from catalog_ext.family import FamilyState
from catalog_ext.store import FamilyStore


class ExistingIds:
    """Dedup lookups for one submit, pinned to the version it started from."""

    def __init__(self, store: FamilyStore, state: FamilyState, spill_dir: str | None = None):
        self.store, self.state = store, state
        self.base_key = state.base_table.key
        self.spill_dir = spill_dir
        self._view: Any = None
        self._all: BatchIds | set[str] | None = None
        #: "none" (empty table), "index" or "scan"; ``reason`` says why a scan
        self.method = "none"
        self.reason = ""
        if not state.batches:
            return
        index = store.open_index(state)
        if index is None:
            self.method, self.reason = "scan", "no id index is configured (OMNI_INDEX=off)"
            return
        view = index.at(store.catalog, state)
        coverage = view.coverage(self.base_key)
        if coverage.authoritative:
            self.method, self._view = "index", view
        else:
            self.method, self.reason = "scan", "the id index lags: " + "; ".join(coverage.lag)

    def existing(self, ids: Sequence[str]) -> set[str]:
        """The ids among ``ids`` that the base table already holds."""
        if self.method == "none" or not ids:
            return set()
        if self.method == "index":
            return self._view.contains_many(self.base_key, sorted(ids))
        if self._all is None:
            self._all = _all_ids(self.store, self.state, self.spill_dir)
        if isinstance(self._all, set):
            return self._all.intersection(ids)
        asked = pa.array(list(ids), pa.string())
        return set(asked.filter(pa.array(self._all.contains(asked))).to_pylist())

    def release(self) -> None:
        if isinstance(self._all, BatchIds):
            self._all.close()
        self._all = None


def _all_ids(store: FamilyStore, state: FamilyState, spill_dir: str | None) -> "BatchIds | set[str]":
    """Every id of the base table: as a :class:`BatchIds` (bounded memory, spilled beyond the
    limit), or - for a table holding an id that is not an md5 (written by other means) - a set."""
    base = state.base_table
    table = store.catalog.load_table(base.identifier)
    ids = BatchIds(spill_dir=spill_dir)
    scan = table.scan(snapshot_id=base.snapshot_id, selected_fields=(ID_COLUMN,))
    batches = scan.to_arrow_batch_reader()
    for rb in batches:
        try:
            ids.add(rb.column(0).cast(pa.string()))
        except ValueError:
            ids.close()
            out: set[str] = set()
            for again in table.scan(snapshot_id=base.snapshot_id, selected_fields=(ID_COLUMN,)).to_arrow_batch_reader():
                out.update(again.column(0).to_pylist())
            return out
    return ids


class BatchIds:
    """The md5 ids one batch has taken, 17 bytes an id (a Python set of the hex strings
    took ~100): each id's 128 bits as two 64-bit halves in sorted runs, merged as they
    grow, with a live flag so that :meth:`discard` needs no rewrite.

    Runs are sorted by the first half only; ids sharing it (never seen in practice, but
    possible) are told apart by the second half.

    Memory is bounded by ``OMNI_MEMORY_LIMIT_MB``, not by the batch: once the runs in
    memory hold :attr:`memory_bytes` (a quarter of the limit; 16M ids at the default), they
    are merged into one sorted run written to a folder of their own under ``spill_dir``
    (the omni home's ``spill/``), and memory starts over. A spilled run keeps in memory
    only every :attr:`BLOCK`-th first half (its fences); one filter of fixed size - three
    bits an id, in a bitmap of another quarter of the limit - says which ids may be in
    some spilled run, and only those are looked up on disk, a block read each. The filter
    never says no to an id that is there; a false yes costs a read, not a wrong answer.
    Below the bound nothing changes: no file, no filter, the same arrays as before.
    """

    #: ids per block of a spilled run: one read answers every id that falls in it
    BLOCK = 4096
    #: bytes per id in memory (two halves; a live flag only once an id was discarded)
    ID_BYTES = 16

    def __init__(self, memory_bytes: int | None = None, spill_dir: str | None = None) -> None:
        #: (hi sorted, lo, live flags or None: all live)
        self._runs: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
        self._live = 0
        self._held = 0  # ids in the runs in memory, discarded ones included
        if memory_bytes is None:
            memory_bytes = memory_limit_bytes() // 4
        self.memory_bytes = max(int(memory_bytes), self.ID_BYTES)
        self.spill_dir = spill_dir
        self._spilled: list[_SpilledRun] = []
        self._filter: _IdFilter | None = None
        self._folder: str | None = None
        self._cleanup: Any = None

    def __len__(self) -> int:
        return self._live

    @property
    def spilled(self) -> int:
        """Ids written to disk so far (tests and reports)."""
        return sum(r.n for r in self._spilled)

    def add(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Take ``ids`` in order; True for each that is new: not taken before, nor earlier in ``ids``."""
        hi, lo = id_halves(ids)
        order = np.argsort(hi, kind="stable")
        if len(hi) > 1 and (hi[order][1:] == hi[order][:-1]).any():
            order = np.lexsort((lo, hi))  # repeats: equal ids side by side, in row order (stable)
        hi_s, lo_s = hi[order], lo[order]
        new_s = np.ones(len(hi), dtype=bool)
        new_s[1:] = (hi_s[1:] != hi_s[:-1]) | (lo_s[1:] != lo_s[:-1])
        new_s &= ~self._found(hi_s, lo_s)
        if self._spilled and new_s.any():
            at = np.flatnonzero(new_s)
            new_s[at[self._found_spilled(hi_s[at], lo_s[at])]] = False
        if new_s.any():
            self._push(hi_s[new_s], lo_s[new_s])
            if self._held * self.ID_BYTES > self.memory_bytes:
                self._spill()
        new = np.empty(len(hi), dtype=bool)
        new[order] = new_s
        return new

    def contains(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """True for each of ``ids`` this batch holds."""
        hi, lo = id_halves(ids)
        order = np.argsort(hi, kind="stable")
        hi_s, lo_s = hi[order], lo[order]
        found_s = self._found(hi_s, lo_s)
        if self._spilled:
            at = np.flatnonzero(~found_s)
            found_s[at[self._found_spilled(hi_s[at], lo_s[at])]] = True
        found = np.empty(len(hi), dtype=bool)
        found[order] = found_s
        return found

    def discard(self, ids: Iterable[str]) -> None:
        """Forget ``ids`` (rows dropped after all: an earlier batch or a concurrent submit has them)."""
        hi, lo = id_halves(pa.array(list(ids), pa.string()))
        for k, (run_hi, run_lo, live) in enumerate(self._runs):
            for at in _positions(run_hi, run_lo, hi, lo):
                if live is None:
                    live = np.ones(len(run_hi), dtype=bool)
                    self._runs[k] = (run_hi, run_lo, live)
                if live[at]:
                    live[at] = False
                    self._live -= 1
        if self._spilled and len(hi):
            order = np.argsort(hi, kind="stable")
            for run in self._spilled:
                self._live -= run.discard(hi[order], lo[order])

    def close(self) -> None:
        """Delete the spilled runs (also done when the object is collected)."""
        if self._cleanup is not None:
            self._cleanup()
        self._spilled, self._filter = [], None

    def _found(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """Which ids (``hi`` sorted: the searches then walk each run forward) are taken and live."""
        found = np.zeros(len(hi), dtype=bool)
        for run_hi, run_lo, live in self._runs:
            at = np.searchsorted(run_hi, hi)
            inside = at < len(run_hi)
            at_c = np.where(inside, at, 0)
            first = inside & (run_hi[at_c] == hi)
            hit = first & (run_lo[at_c] == lo)
            if live is not None:
                hit &= live[at_c]
            for i in np.flatnonzero(first & ~hit):  # other ids of the run with the same first half
                j = int(at[i]) + 1
                while j < len(run_hi) and run_hi[j] == hi[i] and not hit[i]:
                    hit[i] = run_lo[j] == lo[i] and (live is None or live[j])
                    j += 1
            found |= hit
        return found

    def _found_spilled(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """Which ids (``hi`` sorted) a spilled run holds live: the filter first, then the runs."""
        found = np.zeros(len(hi), dtype=bool)
        maybe = np.flatnonzero(self._filter.may_hold(hi, lo))
        if len(maybe):
            for run in self._spilled:
                found[maybe] |= run.holds(hi[maybe], lo[maybe])
        return found

    def _push(self, hi: np.ndarray, lo: np.ndarray) -> None:
        """Add a run (``hi`` sorted); merge while the run before is at most twice as long, so
        there are log(n) runs and each id is merged log(n) times."""
        self._runs.append((hi, lo, None))
        self._live += len(hi)
        self._held += len(hi)
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            (h1, l1, v1), (h2, l2, v2) = self._runs.pop(-2), self._runs.pop()
            h, lo_ = np.concatenate((h1, h2)), np.concatenate((l1, l2))
            if v1 is not None or v2 is not None:  # discarded ids go now
                keep = np.concatenate([np.ones(len(x), dtype=bool) if v is None else v for x, v in ((h1, v1), (h2, v2))])
                h, lo_ = h[keep], lo_[keep]
                self._held -= len(keep) - len(h)
            order = np.argsort(h, kind="stable")  # two sorted runs: a linear merge
            self._runs.append((h[order], lo_[order], None))

    def _spill(self) -> None:
        """Write every live id in memory as one sorted run on disk; memory starts over."""
        import os
        import shutil
        import tempfile
        import weakref

        his, los = [], []
        for run_hi, run_lo, live in self._runs:
            his.append(run_hi if live is None else run_hi[live])
            los.append(run_lo if live is None else run_lo[live])
        hi, lo = np.concatenate(his), np.concatenate(los)
        order = np.lexsort((lo, hi))
        hi, lo = hi[order], lo[order]
        if self._folder is None:
            root = self.spill_dir or tempfile.gettempdir()
            os.makedirs(root, exist_ok=True)
            self._folder = tempfile.mkdtemp(prefix="batch-ids-", dir=root)
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder, True)
            self._filter = _IdFilter(self.memory_bytes)
        self._filter.add(hi, lo)
        self._spilled.append(_SpilledRun.write(os.path.join(self._folder, f"run-{len(self._spilled)}"),
                                               hi, lo, self.BLOCK))
        self._runs, self._held = [], 0


def memory_limit_bytes() -> int:
    """``OMNI_MEMORY_LIMIT_MB`` in bytes: what one local operation may hold."""
    from catalog_ext import settings

    return int(float(settings.value("OMNI_MEMORY_LIMIT_MB")) * 2 ** 20)


class _IdFilter:
    """A bitmap of fixed size saying which ids may have been spilled (a Bloom filter with
    three bit positions an id, taken from the md5 bits mixed by odd multipliers)."""

    MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))

    def __init__(self, nbytes: int) -> None:
        bits = 1 << max(10, int(nbytes * 8).bit_length() - 1)  # a power of two, at most nbytes
        self.shift = np.uint64(64 - (bits.bit_length() - 1))
        self.words = np.zeros(bits // 64, dtype=np.uint64)

    def _positions(self, hi: np.ndarray, lo: np.ndarray) -> list[np.ndarray]:
        with np.errstate(over="ignore"):
            return [(hi * self.MIX[0]) >> self.shift, (lo * self.MIX[1]) >> self.shift,
                    ((hi ^ lo) * self.MIX[2]) >> self.shift]

    def add(self, hi: np.ndarray, lo: np.ndarray) -> None:
        one = np.uint64(1)
        for pos in self._positions(hi, lo):
            np.bitwise_or.at(self.words, pos >> np.uint64(6), one << (pos & np.uint64(63)))

    def may_hold(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        one = np.uint64(1)
        out = np.ones(len(hi), dtype=bool)
        for pos in self._positions(hi, lo):
            out &= ((self.words[pos >> np.uint64(6)] >> (pos & np.uint64(63))) & one).astype(bool)
        return out


_RECORD = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("live", "u1")])


class _SpilledRun:
    """One sorted run of ids on disk (hi, lo, live: 17 bytes an id, sorted by hi then lo).

    Read and changed a block at a time with pread/pwrite, never mapped: pages of a mapped
    file that a lookup touched would count as the process's memory."""

    def __init__(self, path: str, n: int, fences: np.ndarray, block: int) -> None:
        self.path, self.n, self.fences, self.block = path, n, fences, block

    @classmethod
    def write(cls, path: str, hi: np.ndarray, lo: np.ndarray, block: int) -> "_SpilledRun":
        rec = np.empty(len(hi), dtype=_RECORD)
        rec["hi"], rec["lo"], rec["live"] = hi, lo, 1
        rec.tofile(path)
        return cls(path, len(hi), hi[::block].copy(), block)

    def _blocks(self, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each first half (sorted): the first and last block that may hold it."""
        first = np.maximum(np.searchsorted(self.fences, hi, side="left") - 1, 0)
        last = np.maximum(np.searchsorted(self.fences, hi, side="right") - 1, 0)
        return first, last

    def _read(self, fd: int, first: int, last: int) -> np.ndarray:
        import os

        start, stop = first * self.block, min((last + 1) * self.block, self.n)
        raw = os.pread(fd, (stop - start) * _RECORD.itemsize, start * _RECORD.itemsize)
        return np.frombuffer(raw, dtype=_RECORD)

    def _walk(self, hi: np.ndarray, lo: np.ndarray, fd: int):
        """(query positions, record positions in the run, records read) for the ids the run holds."""
        first, last = self._blocks(hi)
        spans = np.unique(np.stack([first, last], axis=1), axis=0)
        for b0, b1 in spans.tolist():
            ask = np.flatnonzero((first == b0) & (last == b1))
            rec = self._read(fd, b0, b1)
            q_hi, q_lo = hi[ask], lo[ask]
            at = np.searchsorted(rec["hi"], q_hi, side="left")
            at_c = np.minimum(at, len(rec) - 1)
            same = (at < len(rec)) & (rec["hi"][at_c] == q_hi)
            hit = same & (rec["lo"][at_c] == q_lo)
            for i in np.flatnonzero(same & ~hit).tolist():  # the run is sorted by (hi, lo): look further
                j = int(at_c[i]) + 1
                while j < len(rec) and rec["hi"][j] == q_hi[i]:
                    if rec["lo"][j] == q_lo[i]:
                        hit[i], at_c[i] = True, j
                        break
                    j += 1
            yield ask[hit], b0 * self.block + at_c[hit], rec[at_c[hit]]

    def holds(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        import os

        found = np.zeros(len(hi), dtype=bool)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for q, _, rec in self._walk(hi, lo, fd):
                found[q] = rec["live"].astype(bool)
        finally:
            os.close(fd)
        return found

    def discard(self, hi: np.ndarray, lo: np.ndarray) -> int:
        """Mark the ids (``hi`` sorted) not live; how many were live."""
        import os

        gone = 0
        fd = os.open(self.path, os.O_RDWR)
        try:
            for _, at, rec in list(self._walk(hi, lo, fd)):
                for pos in at[rec["live"].astype(bool)].tolist():
                    os.pwrite(fd, b"\x00", pos * _RECORD.itemsize + 16)
                    gone += 1
        finally:
            os.close(fd)
        return gone


def _positions(run_hi: np.ndarray, run_lo: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> list[int]:
    """Where each of the ids (hi, lo) sits in a run, for those it holds."""
    out = []
    start = np.searchsorted(run_hi, hi, side="left")
    stop = np.searchsorted(run_hi, hi, side="right")
    for i in np.flatnonzero(stop > start):
        for j in range(int(start[i]), int(stop[i])):
            if run_lo[j] == lo[i]:
                out.append(j)
    return out


def id_halves(ids: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The 128 bits of each md5 id (32 lowercase hex digits) as two uint64 halves, in one pass."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.chunk(0) if ids.num_chunks == 1 else (ids.combine_chunks() if ids.num_chunks else
                                                        pa.array([], pa.string()))
    n = len(ids)
    if not n:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    if ids.null_count or not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)):
        raise ValueError("md5 ids must be strings without nulls")
    width = 8 if pa.types.is_large_string(ids.type) else 4
    offsets = np.frombuffer(ids.buffers()[1], f"<i{width}", n + 1, ids.offset * width)
    start, stop = int(offsets[0]), int(offsets[-1])
    digits = memoryview(ids.buffers()[2])[start:stop]
    if stop - start != 32 * n or not np.all(np.diff(offsets) == 32):
        raise ValueError("md5 ids must be 32 hex digits each")
    # unhexlify also reads A-F: two spellings of one id must not become one key
    if np.any(np.frombuffer(digits, np.uint8) - np.uint8(ord("A")) < 6):
        raise ValueError("md5 ids must be lowercase hex digits")
    try:
        halves = np.frombuffer(binascii.unhexlify(digits), ">u8").reshape(n, 2).astype(np.uint64)
    except binascii.Error:
        raise ValueError("md5 ids must be hex digits") from None
    return np.ascontiguousarray(halves[:, 0]), np.ascontiguousarray(halves[:, 1])
