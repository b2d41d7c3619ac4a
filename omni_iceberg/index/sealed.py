"""Sealed segments: the LMDB index's entries frozen into sorted arrays and searched in bulk.

Why: at 10M rows (40M entries, a 3.4 GB B-tree) a 1,000-id lookup spent ~7 ms in 1,000
B-tree descents. Each descent is a chain of dependent cache and TLB misses, ~6-9 us
here, and nothing overlaps them. The same search over sorted arrays is one
``np.searchsorted`` call whose 1,000 searches are independent, so the CPU overlaps their
misses: ~1 ms cold, ~0.5 ms warm, on the same machine and size.

So the LMDB backend is a two-level store (an LSM tree with one sealed level):

* writers put entries into LMDB as before (the *delta*: cheap random inserts, readers never
  blocked, crash-safe);
* :meth:`LmdbBackend.seal <omni_iceberg.index.lmdb_backend.LmdbBackend.seal>` merges the
  delta into a new immutable segment and empties the delta, in one LMDB transaction that
  also names the segment, so a reader sees either the old segment and the full delta or the
  new segment and what was written since;
* a lookup searches the segment (vectorized) and walks the (small) delta.

A segment is a folder of flat files, memory-mapped read-only:

``hi.npy``
    the id's first 8 bytes as a big-endian ``uint64``, sorted: the search key;
``rec.npy``
    per entry one 32-byte record: the id's last 8 bytes (``lo``), the 8-byte file key
    (``fk``) and where its stored value (position and inline values) starts and ends in
    ``values.bin``. One record, not four arrays, because a lookup reads all of them for
    each entry it finds: one cache miss instead of four.

Entries are sorted by id; the entries of one id are adjacent, in no particular file-key
order. Segments are never modified: a seal writes a new one and the old one is deleted
once no transaction names it (open maps of it stay valid: Linux keeps unlinked files).
"""

from __future__ import annotations

import mmap
import os
import shutil
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from omni_iceberg.index.keys import FILE_KEY_BYTES, ID_BYTES

#: entries per chunk when a seal copies values: bounds the gather's index array
COPY_CHUNK = 200_000
FILES = ("hi.npy", "rec.npy", "values.bin")
RECORD = np.dtype([("lo", "<u8"), ("fk", "<u8"), ("start", "<i8"), ("end", "<i8")])
#: every FENCE-th id prefix is kept in memory: a search first finds its block there (1.25 MB
#: at 40M entries, so it stays in the CPU caches), then searches only that block (2 KB)
FENCE = 256
#: up to this many ids, a lookup probes id by id (:meth:`Segment.probe`): array set-up
#: costs more than a few scalar searches
FEW_IDS = 16
#: positions after an id's first candidate that :meth:`Segment.find` reads at once: one
#: entry per physical table holding the id (a compaction adds one more while old
#: versions keep theirs); ids with more step on one position at a time
RUN_WINDOW = 8
#: bulk reads copy values into rows as wide as the longest one (see :meth:`Segment.arrays`)
#: while that is at most this many bytes (inline values are small); longer, back to back
PADDED_MAX = 512
_NO_INT = np.zeros(0, np.int64)


def id_halves(keys: Sequence[bytes] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """16-byte id keys (bytes, or an ``n x >=16`` uint8 matrix) as (hi, lo) uint64 arrays.

    Big-endian, so the numeric order of (hi, lo) is the byte order of the keys.

    >>> hi, lo = id_halves([bytes(range(16))])
    >>> hex(int(hi[0])), hex(int(lo[0]))
    ('0x1020304050607', '0x8090a0b0c0d0e0f')
    """
    if isinstance(keys, np.ndarray):
        raw = np.ascontiguousarray(keys[:, :ID_BYTES])
    else:
        raw = np.frombuffer(b"".join(keys), np.uint8).reshape(-1, ID_BYTES) if len(keys) else \
            np.zeros((0, ID_BYTES), np.uint8)
    halves = raw.view(">u8").astype(np.uint64)
    return halves[:, 0].copy(), halves[:, 1].copy()


class Segment:
    """One sealed segment, memory-mapped. Immutable; safe to share between threads."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.hi = _load(folder / "hi.npy")
        self.rec = _load(folder / "rec.npy")
        self.lo, self.fk_u64, self.start, self.end = (self.rec[f] for f in RECORD.names)
        size = int(self.end[-1]) if len(self.end) else 0
        if size:
            with open(folder / "values.bin", "rb") as f:
                self.values = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        else:
            self.values = b""
        self.value_bytes = np.frombuffer(self.values, np.uint8) if size else np.zeros(0, np.uint8)
        self.fence = np.ascontiguousarray(self.hi[::FENCE])

    def __len__(self) -> int:
        return len(self.hi)

    def find(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(owner, at) of every entry of the ids (``hi``, ``lo``): ``at`` its position here,
        ``owner`` the index of its id in the query; in no particular order.

        One ``searchsorted`` finds each id's first candidate; the entries of an id are
        adjacent, so the rest are found by stepping every id forward at once, as many
        steps as the most entries one id has (a handful: one per physical table).
        """
        n = len(self.hi)
        if not n or not len(hi):
            return _NO_INT, _NO_INT
        at = self._first_at_least(hi)
        # the candidates of every id at once: a window of RUN_WINDOW positions from its first
        # (adjacent: the same cache lines); an id with more entries than that steps on below
        window = at[:, None] + np.arange(RUN_WINDOW)
        inside = window < n
        same = (self.hi[np.minimum(window, n - 1)] == hi[:, None]) & inside
        count = same.sum(axis=1)
        owners, found = [], []
        total = int(count.sum())
        if total:
            owner = np.repeat(np.arange(len(hi)), count)
            where = np.repeat(at - (np.cumsum(count) - count), count) + np.arange(total)
            match = self.lo[where] == lo[owner]  # a 64-bit prefix shared by two ids: the rest decides
            owners.append(owner[match])
            found.append(where[match])
        who = np.flatnonzero(count == RUN_WINDOW)
        at = at[who] + RUN_WINDOW
        while len(who):  # ids with more entries than the window (many files of one id): step on
            inside = at < n
            who, at = who[inside], at[inside]
            same = self.hi[at] == hi[who]
            who, at = who[same], at[same]
            match = self.lo[at] == lo[who]
            owners.append(who[match])
            found.append(at[match])
            at = at + 1
        if not owners:
            return _NO_INT, _NO_INT
        # grouped by asked id, not sorted by position: gathering the records in position
        # order measured no faster, and the sort was a tenth of the search
        return np.concatenate(owners), np.concatenate(found)

    def probe(self, keys: Sequence[bytes]) -> list[tuple[int, int, bytes]]:
        """(index in ``keys``, file key as uint64, stored value) of every entry of a few ids.

        A point lookup's path: scalar reads, no array set-up (which cost more than the search).
        """
        out: list[tuple[int, int, bytes]] = []
        n, hi_all, rec, values = len(self.hi), self.hi, self.rec, self.values
        for i, key in enumerate(keys):
            hi, lo = int.from_bytes(key[:8], "big"), int.from_bytes(key[8:16], "big")
            at = int(hi_all.searchsorted(np.uint64(hi)))  # a numpy scalar: a Python int > 2**63 would cast the array
            while at < n and int(hi_all[at]) == hi:
                entry = rec[at].item()  # (lo, fk, start, end)
                if entry[0] == lo:
                    out.append((i, entry[1], values[entry[2]:entry[3]]))
                at += 1
        return out

    def _first_at_least(self, hi: np.ndarray) -> np.ndarray:
        """``np.searchsorted(self.hi, hi, "left")``, through the fence.

        A plain search over a 320 MB array spends ~10 dependent cache misses per id in its
        last levels; the fence narrows each id to one 2 KB block, and the block searches
        of all ids advance together (one gather per halving), so their misses overlap.
        """
        n = len(self.hi)
        block = np.searchsorted(self.fence, hi, "left")  # fence[block - 1] < hi <= fence[block]
        pos = np.maximum(block - 1, 0) * FENCE  # the answer lies in [pos, pos + FENCE]
        # a branchless binary search of all blocks at once: each halving is one gather, a
        # compare and a conditional add (every element before ``pos`` stays < hi)
        clamp = int(pos.max(initial=0)) + FENCE > n  # only the last block can run past the end
        step = FENCE // 2
        while step:
            probe = pos + (step - 1)
            if clamp:
                np.minimum(probe, n - 1, out=probe)
            np.add(pos, step, out=pos, where=self.hi[probe] < hi)
            step //= 2
        np.add(pos, 1, out=pos, where=self.hi[np.minimum(pos, n - 1)] < hi)
        return np.minimum(pos, n)

    def arrays(self, owner: np.ndarray, at: np.ndarray) -> "tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]":
        """(file keys as uint64, value bytes, starts, lengths) of the entries ``at``: entry k's value
        is ``buf[starts[k]:starts[k] + lengths[k]]`` (back to back, or padded to one width)."""
        rec = self.rec[at]  # one gather: the entries' records, each one cache line or less
        begin, lengths = rec["start"], rec["end"] - rec["start"]
        starts = np.zeros(len(at), np.int64)
        if len(at) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        if len(at) <= FEW_IDS:  # a point lookup: slicing beats the array set-up
            buf = np.frombuffer(b"".join(self.values[b:b + n] for b, n in zip(begin.tolist(), lengths.tolist())),
                                np.uint8)
        else:
            width = int(lengths.max(initial=0))
            size = len(self.value_bytes)
            if 0 < width <= PADDED_MAX and width <= size:
                # every value copied as one row of ``width`` bytes through a strided view of
                # the file (row k = bytes k .. k + width - 1): one memcpy-like copy per entry,
                # where a byte-index array cost ~1.6x as much; the values then sit ``width``
                # apart, which is all ``starts`` promises. A value near the end of the file
                # is read from an earlier row, at an offset into it.
                rows = np.lib.stride_tricks.as_strided(self.value_bytes, shape=(size - width + 1, width),
                                                       strides=(1, 1), writeable=False)
                row_at = np.minimum(begin, size - width)
                buf = rows[row_at].reshape(-1)
                starts = np.arange(len(at), dtype=np.int64) * width + (begin - row_at)
            else:
                total = int(lengths.sum())
                buf = self.value_bytes[np.repeat(begin - starts, lengths) + np.arange(total)] if total else \
                    np.zeros(0, np.uint8)
        return np.ascontiguousarray(rec["fk"]), buf, starts, lengths

    def entries(self, chunk: int = 65_536) -> Iterator[tuple[bytes, bytes, bytes]]:
        """Every (id key, file key, value), in id order."""
        for lo_at in range(0, len(self.hi), chunk):
            hi_at = min(lo_at + chunk, len(self.hi))
            ids = np.stack([self.hi[lo_at:hi_at], self.lo[lo_at:hi_at]], axis=1).astype(">u8")
            fkeys = np.ascontiguousarray(self.fk_u64[lo_at:hi_at]).view(f"V{FILE_KEY_BYTES}").tolist()
            spans = zip(self.start[lo_at:hi_at].tolist(), self.end[lo_at:hi_at].tolist())
            for rid, fkey, (b, e) in zip(ids, fkeys, spans):
                yield rid.tobytes(), fkey, self.values[b:e]


def _load(path: Path) -> np.ndarray:
    """A ``.npy`` file memory-mapped (read-only); an empty one read (an empty file cannot be mapped).

    Returned as a plain ndarray view of the map: every slice of an ``np.memmap`` is another
    memmap whose set-up cost was a third of a one-id lookup.
    """
    try:
        return np.load(path, mmap_mode="r").view(np.ndarray)
    except ValueError:
        return np.load(path)


class DeltaArrays:
    """Entries read out of the delta (in key order) as arrays; values spooled to a file.

    ``capacity`` (the delta's entry count, known before reading) sizes the arrays once:
    each chunk's keys are split into them as it arrives, so memory is 32 bytes per entry
    (id halves, file key, value length) with no per-chunk copies held at the end.
    """

    def __init__(self, spool: Path, capacity: int):
        self.spool = spool
        self.hi = np.empty(capacity, np.uint64)
        self.lo = np.empty(capacity, np.uint64)
        self.fk = np.empty(capacity, np.uint64)
        self.lengths = np.empty(capacity, np.int64)
        self.n = 0
        self._file = open(spool, "wb")

    def add(self, keys: list[bytes], values: list[bytes]) -> None:
        if not keys:
            return
        at, m = self.n, len(keys)  # the count was read in the same transaction: it fits
        mat = np.frombuffer(b"".join(keys), np.uint8).reshape(m, ID_BYTES + FILE_KEY_BYTES)
        words = mat.view(">u8")  # three big-endian words per key: hi, lo, file key bytes
        self.hi[at:at + m] = words[:, 0]
        self.lo[at:at + m] = words[:, 1]
        self.fk[at:at + m] = mat[:, ID_BYTES:].copy().view("<u8").ravel()
        self.lengths[at:at + m] = np.fromiter(map(len, values), np.int64, m)
        self._file.write(b"".join(values))
        self.n = at + m

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(hi, lo, file keys as uint64, offsets) of everything added."""
        self._file.close()
        n = self.n
        off = np.zeros(n + 1, np.int64)
        np.cumsum(self.lengths[:n], out=off[1:])
        self.lengths = None  # the offsets replace them
        return self.hi[:n], self.lo[:n], self.fk[:n], off


def merge_into(folder: Path, old: "Segment | _Kept | None", delta: tuple[np.ndarray, ...], spool: Path,
               removed: Sequence[bytes] = ()) -> int:
    """Write the segment ``old`` + ``delta`` (hi, lo, fk, off; values in ``spool``) to ``folder``.

    Both inputs are sorted by id, so the merge is a ``searchsorted`` of the delta's ids in
    the old segment (delta entries go after the old entries of the same 64-bit prefix):
    O(n) copying, no sort. An old entry the delta holds too (re-written since, or a seal
    that crashed after publishing, before emptying the delta) gives way to the delta's
    copy, and old entries named in ``removed`` (id key + file key: tombstones) are left
    out. Returns the entry count.
    """
    d_hi, d_lo, d_fk, d_off = delta
    d_start, d_len = d_off[:-1], np.diff(d_off)
    if old is not None and (removed or len(d_hi)):
        old = _without(old, list(removed), (d_hi, d_lo, d_fk))
    o_hi = old.hi if old is not None else np.zeros(0, np.uint64)
    n_old, n_new = len(o_hi), len(d_hi)
    n = n_old + n_new
    # where each delta entry lands in the output: after the old entries of its prefix
    d_at = np.searchsorted(o_hi, d_hi, "right") + np.arange(n_new) if n_old else np.arange(n_new)
    from_delta = np.zeros(n, np.bool_)
    from_delta[d_at] = True
    o_at = np.flatnonzero(~from_delta)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # where each entry's value comes from (old segment's bytes or the spool) and how long it is
    if n_old:
        lengths = np.zeros(n, np.int64)
        sources = np.zeros(n, np.int64)
        lengths[o_at] = old.end - old.start
        sources[o_at] = old.start
        if n_new:
            lengths[d_at] = d_len
            sources[d_at] = d_start
    else:  # the first seal: the delta alone, already in order
        lengths, sources = d_len, d_start
    if not n:
        np.save(tmp / "hi.npy", np.zeros(0, np.uint64))
        np.save(tmp / "rec.npy", np.zeros(0, RECORD))
    else:
        hi = np.lib.format.open_memmap(tmp / "hi.npy", mode="w+", dtype=np.uint64, shape=(n,))
        rec = np.lib.format.open_memmap(tmp / "rec.npy", mode="w+", dtype=RECORD, shape=(n,))
        for at, src in ((o_at, old), (d_at, None)):
            if not len(at):
                continue
            hi[at] = src.hi if src is not None else d_hi
            rec["lo"][at] = src.lo if src is not None else d_lo
            rec["fk"][at] = src.fk_u64 if src is not None else d_fk
        np.cumsum(lengths, out=rec["end"])
        rec["start"] = rec["end"]
        rec["start"] -= lengths
        hi.flush()
        rec.flush()
        del hi, rec
    old_bytes = np.frombuffer(old.values, np.uint8) if n_old and len(old.values) else np.zeros(0, np.uint8)
    new_bytes = np.memmap(spool, np.uint8, mode="r") if n_new and os.path.getsize(spool) else np.zeros(0, np.uint8)
    with open(tmp / "values.bin", "wb") as out_file:
        for a in range(0, n, COPY_CHUNK):
            b = min(a + COPY_CHUNK, n)
            out_file.write(_gather(sources[a:b], lengths[a:b], from_delta[a:b], old_bytes, new_bytes).tobytes())
        out_file.flush()
        os.fsync(out_file.fileno())
    del old_bytes, new_bytes
    for name in FILES:
        fd = os.open(tmp / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    return n


class _Kept:
    """A segment less some entries, in memory (what :func:`merge_into` reads of ``old``)."""

    def __init__(self, old: Segment, keep: np.ndarray):
        self.hi, self.lo, self.fk_u64 = old.hi[keep], old.lo[keep], old.fk_u64[keep]
        self.start, self.end = old.start[keep], old.end[keep]
        self.values = old.values


def _without(old: Segment, removed: list[bytes], delta: tuple[np.ndarray, np.ndarray, np.ndarray]
             ) -> "Segment | _Kept":
    """``old`` less the entries named in ``removed`` and those the delta (hi, lo, fk) holds too."""
    gone = [_positions_in(old, *delta)]
    if removed:
        keys = np.frombuffer(b"".join(removed), np.uint8).reshape(-1, ID_BYTES + FILE_KEY_BYTES)
        hi, lo = id_halves(keys)
        gone.append(_positions_in(old, hi, lo, np.ascontiguousarray(keys[:, ID_BYTES:]).view("<u8").ravel()))
    at = np.concatenate(gone)
    if not len(at):
        return old
    keep = np.ones(len(old.hi), np.bool_)
    keep[at] = False
    return _Kept(old, keep)


def _positions_in(old: "Segment | _Kept", hi: np.ndarray, lo: np.ndarray, fk: np.ndarray) -> np.ndarray:
    """Positions in ``old`` of the (hi, lo, fk) entries it holds (``fk``: file keys as uint64)."""
    start = np.searchsorted(old.hi, hi, "left")
    count = np.searchsorted(old.hi, hi, "right") - start
    if not count.any():
        return np.zeros(0, np.int64)
    owner = np.repeat(np.arange(len(hi)), count)
    at = np.repeat(start - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
    return at[(old.lo[at] == lo[owner]) & (old.fk_u64[at] == fk[owner])]


def _gather(starts: np.ndarray, lengths: np.ndarray, from_delta: np.ndarray, old: np.ndarray,
            new: np.ndarray) -> np.ndarray:
    """The bytes of entries (``starts``/``lengths`` in the old or the delta's bytes) back to back."""
    total = int(lengths.sum())
    out = np.empty(total, np.uint8)
    if not total:
        return out
    ends = np.cumsum(lengths)
    at = np.repeat(starts - (ends - lengths), lengths) + np.arange(total)  # source byte of each output byte
    mask = np.repeat(from_delta, lengths)
    if mask.any():
        out[mask] = new[at[mask]]
    if not mask.all():
        out[~mask] = old[at[~mask]]
    return out
