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

    def __init__(self, store: FamilyStore, state: FamilyState):
        self.store, self.state = store, state
        self.base_key = state.base_table.key
        self._view: Any = None
        self._all: set[str] | None = None
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
            self._all = _all_ids(self.store, self.state)
        return self._all.intersection(ids)

    def release(self) -> None:
        self._all = None


def _all_ids(store: FamilyStore, state: FamilyState) -> set[str]:
    base = state.base_table
    table = store.catalog.load_table(base.identifier)
    ids: set[str] = set()
    scan = table.scan(snapshot_id=base.snapshot_id, selected_fields=(ID_COLUMN,))
    for rb in scan.to_arrow_batch_reader():
        ids.update(rb.column(0).to_pylist())
    return ids


class BatchIds:
    """The md5 ids one batch has taken, 17 bytes an id (a Python set of the hex strings
    took ~100): each id's 128 bits as two 64-bit halves in sorted runs, merged as they
    grow, with a live flag so that :meth:`discard` needs no rewrite.

    Runs are sorted by the first half only; ids sharing it (never seen in practice, but
    possible) are told apart by the second half.
    """

    def __init__(self) -> None:
        #: (hi sorted, lo, live flags or None: all live)
        self._runs: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
        self._live = 0

    def __len__(self) -> int:
        return self._live

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
        if new_s.any():
            self._push(hi_s[new_s], lo_s[new_s])
        new = np.empty(len(hi), dtype=bool)
        new[order] = new_s
        return new

    def contains(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """True for each of ``ids`` this batch holds."""
        hi, lo = id_halves(ids)
        order = np.argsort(hi, kind="stable")
        found = np.empty(len(hi), dtype=bool)
        found[order] = self._found(hi[order], lo[order])
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

    def _push(self, hi: np.ndarray, lo: np.ndarray) -> None:
        """Add a run (``hi`` sorted); merge while the run before is at most twice as long, so
        there are log(n) runs and each id is merged log(n) times."""
        self._runs.append((hi, lo, None))
        self._live += len(hi)
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            (h1, l1, v1), (h2, l2, v2) = self._runs.pop(-2), self._runs.pop()
            h, lo_ = np.concatenate((h1, h2)), np.concatenate((l1, l2))
            if v1 is not None or v2 is not None:  # discarded ids go now
                keep = np.concatenate([np.ones(len(x), dtype=bool) if v is None else v for x, v in ((h1, v1), (h2, v2))])
                h, lo_ = h[keep], lo_[keep]
            order = np.argsort(h, kind="stable")  # two sorted runs: a linear merge
            self._runs.append((h[order], lo_[order], None))


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
