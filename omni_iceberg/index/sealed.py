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
from types import SimpleNamespace
from typing import Iterable, Iterator, Sequence

import numpy as np

from omni_iceberg.index.keys import FILE_KEY_BYTES, ID_BYTES
from omni_iceberg.index.resident import map_budget, release_map

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
        self.hi, hi_map = _load(folder / "hi.npy", np.uint64)
        self.rec, rec_map = _load(folder / "rec.npy", RECORD)
        self.lo, self.fk_u64, self.start, self.end = (self.rec[f] for f in RECORD.names)
        size = int(self.end[-1]) if len(self.end) else 0
        if size:
            with open(folder / "values.bin", "rb") as f:
                self.values = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        else:
            self.values = b""
        self.value_bytes = np.frombuffer(self.values, np.uint8) if size else np.zeros(0, np.uint8)
        self.fence = np.ascontiguousarray(self.hi[::FENCE])
        self._maps = [m for m in (hi_map, rec_map, self.values) if isinstance(m, mmap.mmap)]
        #: bytes of the three files: above :func:`~omni_iceberg.index.resident.map_budget`,
        #: lookups release the maps between bounded groups of ids (see :meth:`groups`)
        self.nbytes = sum(len(m) for m in self._maps)

    def release(self) -> None:
        """Unmap the pages of the segment's maps that reads left resident (see :mod:`omni_iceberg.index.resident`)."""
        for m in self._maps:
            release_map(m)

    def groups(self, hi: np.ndarray, budget: int) -> list[np.ndarray] | None:
        """The ids ``hi`` (positions in it) in groups each of which reads at most half of
        ``budget`` of the segment's files; None when the whole segment fits the budget.

        Entries are in id order, so ids close in order read one stretch of each file:
        a group is the ids whose entries lie in one stretch of ``budget / 2`` bytes, found
        from the fence (in memory: no page of the files is read to group them).
        """
        if self.nbytes <= budget or len(hi) <= 1:
            return None
        per = max(FENCE, int(len(self.hi) * (budget / 2) / self.nbytes))
        stretch = np.searchsorted(self.fence, hi, "left") * FENCE // per
        order = np.argsort(stretch, kind="stable")
        return np.split(order, np.flatnonzero(np.diff(stretch[order])) + 1)

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
            if self.nbytes > map_budget():  # a walk of the whole segment: keep one chunk's pages mapped
                self.release()


def _load(path: Path, dtype: np.dtype) -> tuple[np.ndarray, "mmap.mmap | None"]:
    """A ``.npy`` file of a 1-d ``dtype`` array memory-mapped read-only, and its map (None:
    an empty array, read).

    A plain ndarray over Python's map, not an ``np.memmap``: every slice of a memmap is
    another memmap whose set-up cost was a third of a one-id lookup, and the map object is
    what :meth:`Segment.release` needs.
    """
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        shape, _, stored = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)(f)
        if stored != np.dtype(dtype) or len(shape) != 1:
            raise ValueError(f"{path}: {stored} {shape}, not a 1-d {np.dtype(dtype)} array")
        offset = f.tell()
        if not shape[0]:
            return np.zeros(0, dtype), None
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    return np.frombuffer(m, dtype, shape[0], offset), m


class DeltaChunks:
    """The delta's entries in key order, chunk by chunk, for :func:`merge_into` to stream.

    ``read`` yields lists of (key, value) pairs as a cursor gives them (``key`` = 16-byte id
    + 8-byte file key). Each chunk is handed on as arrays; the entries of its last 64-bit id
    prefix are held back for the next one, so every id prefix lies in one chunk (the merge
    needs all of a prefix's old and delta entries together to drop replaced old copies).
    Every key read is appended to ``spool`` (24 bytes an entry) so a seal can later remove
    exactly what it sealed without holding the keys: memory is one chunk, not the delta.
    """

    def __init__(self, read: Iterator[list[tuple[bytes, bytes]]], spool: Path):
        self._read = read
        self.spool = spool
        self.count = 0

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """(hi, lo, fk, value offsets, value bytes) per chunk; the last flushes the held-back prefix."""
        held: tuple[list[bytes], list[bytes]] = ([], [])
        with open(self.spool, "wb") as spool:
            for pairs in self._read:
                if not pairs:
                    continue
                keys = held[0] + [k for k, _ in pairs]
                values = held[1] + [v for _, v in pairs]
                spool.write(b"".join(k for k, _ in pairs))
                self.count += len(pairs)
                prefix = keys[-1][:8]
                cut = len(keys)
                while cut and keys[cut - 1][:8] == prefix:
                    cut -= 1
                held = (keys[cut:], values[cut:])
                if cut:
                    yield _delta_arrays(keys[:cut], values[:cut])
            if held[0]:
                yield _delta_arrays(*held)


def _delta_arrays(keys: list[bytes], values: list[bytes]) -> tuple[np.ndarray, ...]:
    m = len(keys)
    mat = np.frombuffer(b"".join(keys), np.uint8).reshape(m, ID_BYTES + FILE_KEY_BYTES)
    words = mat.view(">u8")  # three big-endian words per key: hi, lo, file key bytes
    off = np.zeros(m + 1, np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, m), out=off[1:])
    return (words[:, 0].astype(np.uint64), words[:, 1].astype(np.uint64),
            mat[:, ID_BYTES:].copy().view("<u8").ravel(), off, np.frombuffer(b"".join(values), np.uint8))


def spooled_keys(spool: Path, per: int) -> Iterator[list[bytes]]:
    """The keys :class:`DeltaChunks` spooled, ``per`` at a time."""
    size = ID_BYTES + FILE_KEY_BYTES
    with open(spool, "rb") as f:
        while True:
            raw = f.read(size * per)
            if not raw:
                return
            yield [raw[i:i + size] for i in range(0, len(raw), size)]


#: old entries one step of a merge reads at most (rounded up to a whole id prefix): ~50
#: bytes each plus their values, so a seal holds a few MB whatever the index's size
MERGE_STEP = 1 << 18


def _npy_header(dtype: np.dtype, n: int) -> bytes:
    """A version-1 ``.npy`` header whose length does not depend on ``n`` (the shape is padded),
    so a file written before its length is known gets its real header in place at the end."""
    text = "{'descr': %r, 'fortran_order': False, 'shape': (%s,), }" % (
        np.lib.format.dtype_to_descr(np.dtype(dtype)), str(n).rjust(20))
    text += " " * ((-(10 + len(text) + 1)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin1")


class _SegmentFiles:
    """A segment's three files written front to back (never mapped: a mapped file's written
    pages would count as the writer's memory, the whole index at the end of a seal)."""

    def __init__(self, tmp: Path):
        self.files = {name: open(tmp / name, "wb") for name in FILES}
        self.files["hi.npy"].write(_npy_header(np.uint64, 0))
        self.files["rec.npy"].write(_npy_header(RECORD, 0))
        self.n = 0
        self.offset = 0

    def append(self, hi: np.ndarray, lo: np.ndarray, fk: np.ndarray, lengths: np.ndarray, data: np.ndarray) -> None:
        m = len(hi)
        if not m:
            return
        rec = np.empty(m, RECORD)
        rec["lo"], rec["fk"] = lo, fk
        np.cumsum(lengths, out=rec["end"])
        rec["end"] += self.offset
        rec["start"] = rec["end"] - lengths
        self.files["hi.npy"].write(np.ascontiguousarray(hi, np.uint64).tobytes())
        self.files["rec.npy"].write(rec.tobytes())
        self.files["values.bin"].write(data.tobytes())
        self.n += m
        self.offset += int(lengths.sum())

    def finish(self) -> int:
        for name, dtype in (("hi.npy", np.uint64), ("rec.npy", RECORD)):
            self.files[name].seek(0)
            self.files[name].write(_npy_header(dtype, self.n))
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        return self.n


class _OldReader:
    """Slices of a segment's arrays and values read with plain file reads, not its maps."""

    def __init__(self, old: "Segment"):
        self.old = old
        self.n = len(old.hi)
        self.offsets = {}
        for name in ("hi.npy", "rec.npy"):
            with open(old.folder / name, "rb") as f:
                version = np.lib.format.read_magic(f)
                (np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0)(f)
                self.offsets[name] = f.tell()
        self.values = open(old.folder / "values.bin", "rb") if self.n and int(old.end[-1]) else None

    def read(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(hi, records, first value byte) of entries ``a:b`` and their values back to back."""
        hi = np.fromfile(self.old.folder / "hi.npy", np.uint64, b - a, offset=self.offsets["hi.npy"] + 8 * a)
        rec = np.fromfile(self.old.folder / "rec.npy", RECORD, b - a,
                          offset=self.offsets["rec.npy"] + RECORD.itemsize * a)
        if b > a and self.values is not None:
            base = int(rec["start"][0])
            data = np.frombuffer(os.pread(self.values.fileno(), int(rec["end"][-1]) - base, base), np.uint8)
        else:
            base, data = 0, np.zeros(0, np.uint8)
        return hi, rec, base, data

    def end_of_prefix(self, hi: int) -> int:
        """Position after the last entry whose id prefix is <= ``hi`` (a search of the map: log n pages)."""
        return int(np.searchsorted(self.old.hi, np.uint64(hi), "right"))

    def close(self) -> None:
        if self.values is not None:
            self.values.close()


def merge_into(folder: Path, old: "Segment | None", delta: Iterable[tuple[np.ndarray, ...]],
               removed: Sequence[bytes] = ()) -> int:
    """Write the segment ``old`` + ``delta`` to ``folder``, streaming both; the entry count.

    ``delta`` gives its entries sorted by id in chunks (hi, lo, fk, value offsets, value
    bytes; :class:`DeltaChunks`), no id prefix split across two. Both inputs are sorted,
    so each step takes the old entries up to a prefix and the delta entries that sort
    before the next old prefix, and merges them with a ``searchsorted`` (delta entries go
    after the old entries of the same 64-bit prefix): O(n) copying, no sort, and memory
    of one step (:data:`MERGE_STEP` old entries at most, one delta chunk), not the index.
    An old entry the delta holds too (re-written since, or a seal that crashed after
    publishing, before emptying the delta) gives way to the delta's copy, and old entries
    named in ``removed`` (id key + file key: tombstones) are left out.
    """
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    out = _SegmentFiles(tmp)
    reader = _OldReader(old) if old is not None and len(old.hi) else None
    n_old = reader.n if reader is not None else 0
    dropped = np.zeros(0, np.int64)
    if reader is not None and removed:
        keys = np.frombuffer(b"".join(removed), np.uint8).reshape(-1, ID_BYTES + FILE_KEY_BYTES)
        hi, lo = id_halves(keys)
        dropped = np.sort(_positions_in(old, hi, lo, np.ascontiguousarray(keys[:, ID_BYTES:]).view("<u8").ravel()))
    at = 0  # the next old entry to write

    def step(b: int, d: tuple[np.ndarray, ...]) -> None:
        nonlocal at
        if reader is not None and b > at:
            o_hi, rec, base, o_bytes = reader.read(at, b)
        else:
            o_hi, rec, base, o_bytes = np.zeros(0, np.uint64), np.zeros(0, RECORD), 0, np.zeros(0, np.uint8)
        d_hi, d_lo, d_fk, d_off, d_bytes = d
        keep = np.ones(len(o_hi), np.bool_)
        gone = dropped[(dropped >= at) & (dropped < b)] - at
        keep[gone] = False
        if len(o_hi) and len(d_hi):
            piece = SimpleNamespace(hi=o_hi, lo=rec["lo"], fk_u64=rec["fk"])
            keep[_positions_in(piece, d_hi, d_lo, d_fk)] = False
        at = b
        if not keep.all():
            o_hi, rec = o_hi[keep], rec[keep]
        k_old, k_new = len(o_hi), len(d_hi)
        n = k_old + k_new
        if not n:
            return
        d_at = np.searchsorted(o_hi, d_hi, "right") + np.arange(k_new)
        from_delta = np.zeros(n, np.bool_)
        from_delta[d_at] = True
        o_at = np.flatnonzero(~from_delta)
        hi = np.empty(n, np.uint64)
        lo = np.empty(n, np.uint64)
        fk = np.empty(n, np.uint64)
        lengths = np.empty(n, np.int64)
        sources = np.empty(n, np.int64)
        hi[o_at], lo[o_at], fk[o_at] = o_hi, rec["lo"], rec["fk"]
        lengths[o_at], sources[o_at] = rec["end"] - rec["start"], rec["start"] - base
        hi[d_at], lo[d_at], fk[d_at] = d_hi, d_lo, d_fk
        lengths[d_at], sources[d_at] = np.diff(d_off), d_off[:-1]
        out.append(hi, lo, fk, lengths, _gather(sources, lengths, from_delta, o_bytes, d_bytes))

    empty = (np.zeros(0, np.uint64),) * 3 + (np.zeros(1, np.int64), np.zeros(0, np.uint8))
    budget = map_budget()
    try:
        for chunk in delta:
            d_hi = chunk[0]
            # the old entries up to this chunk's last prefix, MERGE_STEP (whole prefixes) at a time
            end = reader.end_of_prefix(int(d_hi[-1])) if reader is not None else 0
            c = 0
            while True:
                b = min(at + MERGE_STEP, end)
                if b < end:
                    b = reader.end_of_prefix(int(reader.old.hi[b - 1]))
                if b >= end:  # the rest of the chunk goes with the last step
                    step(max(b, at), _delta_slice(chunk, c, len(d_hi)))
                    break
                d = int(np.searchsorted(d_hi, reader.old.hi[b], "left"))
                step(b, _delta_slice(chunk, c, d))
                c = d
            if reader is not None and reader.old.nbytes > budget:  # its searches mapped pages of hi.npy
                reader.old.release()
        while at < n_old:  # old entries after the delta's last prefix
            step(min(reader.end_of_prefix(int(reader.old.hi[min(at + MERGE_STEP, n_old) - 1])), n_old), empty)
        total = out.finish()
    except BaseException:
        for f in out.files.values():
            f.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if reader is not None:
            reader.close()
    for name in FILES:
        fd = os.open(tmp / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    return total


def _delta_slice(chunk: tuple[np.ndarray, ...], a: int, b: int) -> tuple[np.ndarray, ...]:
    """Entries ``a:b`` of a delta chunk (their values' offsets made to start at 0)."""
    hi, lo, fk, off, data = chunk
    return hi[a:b], lo[a:b], fk[a:b], off[a:b + 1] - off[a], data[off[a]:off[b]]


def _positions_in(old: "Segment | SimpleNamespace", hi: np.ndarray, lo: np.ndarray, fk: np.ndarray) -> np.ndarray:
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
