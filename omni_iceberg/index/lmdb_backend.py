"""The embedded index backend: one LMDB environment per logical table, no server.

Why LMDB: a B+tree in a memory map answers a point read from the page cache with no
server round trip (what a lookup costs: ``index`` in benchmarks/RESULTS.md), readers
never block writers, and several processes can share one environment safely (its own
lock file). Entries live in a named
database ``entries`` whose keys are ``id (16 bytes) + file key (8 bytes)``: all
locations of one id are adjacent, so a lookup is one cursor ``set_range`` and a sorted
batch of ids is one forward walk. Meta records live in a second database ``meta``.

Entries are written to that B-tree (the *delta*) and :meth:`LmdbBackend.seal` merges
them into an immutable sorted segment searched in bulk (:mod:`omni_iceberg.index.sealed`:
why, and the layout). Meta records ``S`` (the segment in use) and ``T`` + key (an
entry deleted while it may be in a segment) belong to that scheme.

LMDB forbids opening one environment twice in a process, so environments are shared
through :func:`_open_env` by real path.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np

from omni_iceberg.index.backend import (FILE_PREFIX, Entry, EntryArrays, EntryColumns, EntryRow, FileEntries,
                                        IndexBackend, Located, entry_value, fkey_bytes, key_order, parse_value,
                                        rows_as_bytes)
from omni_iceberg.index.errors import IndexUnavailableError
from omni_iceberg.index.keys import FILE_KEY_BYTES, ID_BYTES
from omni_iceberg.index.resident import find_mapping, map_budget, release_range
from omni_iceberg.index.sealed import FEW_IDS, DeltaChunks, Segment, id_halves, merge_into, spooled_keys
from omni_iceberg.ui.progress import progress_bar

#: Initial virtual size of the map, doubled whenever a write finds it full (up to
#: MAX_MAP_SIZE). It is address space only - the file grows as written - but a process
#: holding many indexes (a service, the test suite) ran out of it at a fixed 1 TiB each.
MAP_SIZE = 1 << 30
#: private pages (4 KB) one write transaction may dirty: 32 MB, see LmdbBackend._entries_per_txn
DIRTY_PAGE_BUDGET = 8192
#: LMDB's page size on the systems this runs on (the environment's ``psize``)
PAGE_BYTES = 4096
#: what one read of a map may map at most: a page-cache folio of a large file (2 MiB here)
FOLIO_BYTES = 2 << 20
#: ids a bulk lookup walks in the delta between two releases of the map (a big delta:
#: each id may map a 2 MiB folio of the file, see omni_iceberg.index.resident)
WALK_RELEASE_IDS = 16
MAX_MAP_SIZE = 1 << 42
_ENVS: dict[str, tuple[object, "_TxnGuard"]] = {}
_ENVS_LOCK = threading.Lock()
#: meta key of the segment in use: {"generation", "entries", "tombstones"}
SEALED_KEY = b"S"
#: meta prefix of tombstones: ``T`` + id key + file key of an entry deleted while it may
#: be in a segment (segments are immutable: the next seal leaves it out)
TOMBSTONE_PREFIX = b"T"
#: entries read from the delta per cursor chunk when sealing
SEAL_READ_CHUNK = 65_536
_SEGMENTS: dict[tuple[str, int], Segment] = {}
_SEGMENTS_LOCK = threading.Lock()
_R = TypeVar("_R")


class _SegmentGone(Exception):
    """The segment a transaction names was deleted by a newer seal: read again, in a new transaction."""


@dataclass
class SealReport:
    """What :meth:`LmdbBackend.seal` did."""

    location: str
    generation: int  # the segment in use afterwards (0: none)
    entries: int  # entries in it
    added: int  # entries it took from the delta
    seconds: float
    delta_left: int = 0  # entries written while it ran, left in the delta

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if not self.added:
            return f"nothing to seal in {self.location}: segment {self.generation} holds {self.entries} entries"
        return (f"sealed {self.added} entries into segment {self.generation} of {self.location} "
                f"({self.entries} entries) in {self.seconds:.1f} s; {self.delta_left} written meanwhile stay unsealed")


class _TxnGuard:
    """Transactions of one environment share it; growing the map takes it alone.

    LMDB requires that no transaction be open in the process while the map is resized:
    a resize under a reader's feet (a lookup, a dedup walk) invalidates its cursor
    ("Attempt to operate on closed/deleted/dropped object"). Index writes run on a
    background thread (``index.staged``), so a write that fills the map must wait for
    the readers of the other threads, and they for it.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._resizing = False
        #: (start, length) of the environment's map in this process, found once per map
        #: (a resize or close replaces it: see :meth:`resize`)
        self.mapping: tuple[int, int] | None = None

    @contextmanager
    def txn(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def resize(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` (a ``set_mapsize``) with no transaction of this process open.

        Never call it while holding :meth:`txn` in the same thread (it would wait for itself).
        """
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            while self._active:
                self._cond.wait()
        try:
            self.mapping = None  # the map moves: a release must look for it again
            fn()
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


def _open_env(path: Path):
    import lmdb

    key = str(path.resolve())
    with _ENVS_LOCK:
        found = _ENVS.get(key)
        if found is None:
            try:
                path.mkdir(parents=True, exist_ok=True)
                # sync=False: a commit does not wait for the disk; flush() does, once per run
                # (IndexWriter.finish). LMDB stays consistent after a crash - it may only lose
                # the newest transactions - and a lost run record means "not indexed", which
                # lookups answer by scanning. Measured: an fsync per file was 60% of a rebuild.
                env = lmdb.open(key, map_size=MAP_SIZE, max_dbs=4, subdir=True, readahead=False, sync=False)
                # the named databases are opened once per environment, here, under the lock:
                # two threads calling open_db on one environment deadlocked (each waits for
                # LMDB's writer lock or the GIL the other holds)
                dbs = (env.open_db(b"entries"), env.open_db(b"meta"))
            except (lmdb.Error, OSError) as e:
                raise IndexUnavailableError(
                    f"cannot open the LMDB index at {key}: {e}; check the folder is writable or set OMNI_INDEX"
                ) from e
            found = _ENVS[key] = (env, _TxnGuard(), *dbs)
        return found


def _close_env(path: Path) -> None:
    with _ENVS_LOCK:
        found = _ENVS.pop(str(path.resolve()), None)
    if found is not None:
        env, guard = found[:2]
        guard.resize(env.close)  # no transaction of another thread may be open on it


Run = tuple[Sequence[bytes], Sequence[bytes]]  # keys, and their values, in key order


def _runs(entries: Sequence[Entry | FileEntries]) -> list[Run]:
    """The entries as runs of (keys, values) in key order, for :meth:`LmdbBackend._put_items`.

    Files' entries whose values have one width (one flush's files share a layout) are
    sorted TOGETHER, as matrices: LMDB then fills its pages in key order. Sorted per file
    and put run after run, the 16 files of one flush split pages all over the tree:
    measured on 1M short records, the put and the commit cost 2.0 s instead of 1.0 s.
    Sorting the matrices costs one argsort and no tuple per entry.
    """
    files = [e for e in entries if isinstance(e, FileEntries) and len(e)]
    runs: list[Run] = []
    by_width: dict[int, list[FileEntries]] = {}
    for e in files:
        by_width.setdefault(e.value_matrix.shape[1], []).append(e)
    for group in by_width.values():
        keys, values = _sorted_together(group)
        runs.append((rows_as_bytes(keys), rows_as_bytes(values)))
    loose = sorted((e[0] + e[1], entry_value(e)) for e in entries if not isinstance(e, FileEntries))
    if loose:
        runs.append(([k for k, _ in loose], [v for _, v in loose]))
    return runs


def _sorted_together(group: list[FileEntries]) -> tuple[np.ndarray, np.ndarray]:
    """The key and value matrices of files' entries as one pair, rows in key order (stable).

    Sorted on the keys' first 8 bytes (the id's, random) as native integers with numpy's
    default sort: distinct heads need no stable sort, and keys that share them (one id
    in several files) are sorted bytewise whole instead. Rows are then gathered as one
    opaque element each: a row copy, not a byte-by-byte fancy index (the figures are in
    94831e1's message).
    """
    heads = np.concatenate([np.ascontiguousarray(e.key_matrix[:, :8]).view(">u8").ravel() for e in group])
    heads = heads.astype(np.uint64)  # native order: big-endian keys sort several times slower
    order = np.argsort(heads)
    if len(heads) > 1 and (heads[order][1:] == heads[order][:-1]).any():
        keys = np.vstack([e.key_matrix for e in group])
        order = key_order(keys)
        return keys[order], np.vstack([e.value_matrix for e in group])[order]
    return _rows_taken([e.key_matrix for e in group], order), _rows_taken([e.value_matrix for e in group], order)


def _rows_taken(mats: list[np.ndarray], order: np.ndarray) -> np.ndarray:
    """The rows of the stacked uint8 matrices ``mats`` (one width) at ``order``, as a matrix."""
    width = mats[0].shape[1]
    if not width:
        return np.zeros((len(order), 0), np.uint8)
    rows = np.concatenate([np.ascontiguousarray(m).view(f"V{width}").ravel() for m in mats])
    return rows[order].view(np.uint8).reshape(len(order), width)


def _find_sealed(segment: Segment, hi: np.ndarray, lo: np.ndarray) -> EntryArrays:
    """The segment's entries of the ids (``hi``, ``lo``) (``asked``: positions in them).

    A segment larger than :func:`~omni_iceberg.index.resident.map_budget` is searched in
    groups of ids that each read one stretch of its files, its maps released after each
    (:meth:`Segment.groups`): 10,000 random ids otherwise map the whole segment. Values are
    copied out of the maps (:meth:`Segment.arrays`), so nothing returned points into them.
    """
    groups = segment.groups(hi, map_budget())
    if groups is None:
        owner, at = segment.find(hi, lo)
        return EntryArrays(owner, *segment.arrays(owner, at)) if len(at) else EntryArrays()
    parts = []
    for group in groups:
        owner, at = segment.find(hi[group], lo[group])
        if len(at):
            parts.append(EntryArrays(group[owner], *segment.arrays(owner, at)))
        segment.release()
    return EntryArrays.concat(parts) if parts else EntryArrays()


def _chunks(runs: list[Run], per: int | None) -> list[list[Run]]:
    """``runs`` cut into transactions of at most ``per`` entries (None: one transaction)."""
    if per is None:
        return [runs]
    out: list[list[Run]] = [[]]
    room = per
    for keys, values in runs:
        at = 0
        while at < len(keys):
            if room == 0:
                out.append([])
                room = per
            take = min(room, len(keys) - at)
            out[-1].append((keys[at:at + take], values[at:at + take]))
            at += take
            room -= take
    return out


class LmdbBackend(IndexBackend):
    """Index of one logical table in the LMDB environment at ``path``."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.location = str(self.path)
        self._env, self._guard, self._entries, self._meta = _open_env(self.path)
        self._real = str(self.path.resolve())  # the segment cache's key (resolving costs syscalls)
        self._sealed_seen: tuple[bytes, dict[str, int]] = (b"", {})

    def _write(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(txn)`` in one write transaction, growing the map when it is full."""
        import lmdb

        while True:
            try:
                with self._guard.txn(), self._env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:  # the transaction was aborted: grow, then redo it
                size = self._env.info()["map_size"]
                if size >= MAX_MAP_SIZE:
                    raise IndexUnavailableError(f"the LMDB index at {self.location} is full "
                                                f"({size >> 30} GiB map); rebuild it or use HBase") from None
                self._guard.resize(lambda: self._grow(size * 2))
            except lmdb.MapResizedError:  # another process grew it: adopt its size
                self._guard.resize(lambda: self._env.set_mapsize(0))

    def _release_map(self, budget: int | None = None) -> None:
        """Unmap the pages of the environment's map left resident, when its file is larger
        than :func:`~omni_iceberg.index.resident.map_budget` (see :mod:`omni_iceberg.index.resident`).

        Call it holding :meth:`_TxnGuard.txn` (no resize or close can move the map
        meanwhile), between transactions or in a read transaction whose values were copied
        out (py-lmdb returns copies): LMDB reads its pages through the map again as needed.
        """
        info = self._env.info()
        if info["last_pgno"] * PAGE_BYTES <= (map_budget() if budget is None else budget):
            return
        found = self._guard.mapping
        if found is None or found[1] != info["map_size"]:
            found = find_mapping(str(self.path / "data.mdb"))
            if found is None or found[1] != info["map_size"]:  # not this system, or not the map: leave it
                return
            self._guard.mapping = found
        release_range(*found)

    def _release_every(self, txn, budget: int, per_leaf: bool) -> int | None:
        """How many entries a bulk write (``per_leaf`` False: random keys, a leaf each) or a
        walk in key order (True) may touch between two :meth:`_release_map`; None: the file
        fits the budget, no release.

        Each leaf read may map a whole 2 MiB folio of the file (see
        :mod:`omni_iceberg.index.resident`): a walk releases after half the budget's worth
        of leaves, a bulk write after the budget's worth of entries (each mapping one folio
        at most). The cost is mapping each folio again: on a file larger than the budget,
        nearly every random insert does, ~1-3 us; measured on a 1M-record rebuild, CPU
        18.4 -> 25.4-26.2 s for 693 -> 370 MiB peak RSS (a larger OMNI_MEMORY_LIMIT_MB buys
        the speed back).
        """
        if self._env.info()["last_pgno"] * PAGE_BYTES <= budget:
            return None
        leaves = budget // (2 * FOLIO_BYTES)
        if not per_leaf:  # random keys: most land in another folio than the last few, few share one
            return max(8, 2 * leaves)
        stat = txn.stat(self._entries)
        return max(256, leaves * (stat["entries"] // max(1, stat["leaf_pages"])))

    def _release_map_now(self) -> None:
        """:meth:`_release_map` outside a transaction."""
        with self._guard.txn():
            self._release_map()

    def _grow(self, size: int) -> None:
        if self._env.info()["map_size"] < size:  # another thread may have grown it meanwhile
            self._env.set_mapsize(size)

    def _read(self, fn: Callable[[Any], Any]) -> Any:
        import lmdb

        try:
            with self._guard.txn(), self._env.begin() as txn:
                return fn(txn)
        except lmdb.MapResizedError:
            self._guard.resize(lambda: self._env.set_mapsize(0))
            with self._guard.txn(), self._env.begin() as txn:
                return fn(txn)

    # ---- entries ----------------------------------------------------------------------
    def _entries_per_txn(self) -> int | None:
        """How many entries one write transaction may take; None: any number.

        A write transaction keeps a private copy of every page it dirties until it commits.
        Ids are random, so n sorted entries land on about L(1 - e^(-n/L)) of the tree's L
        leaves: on a small tree a transaction of any size dirties at most the whole tree,
        but on a big one (10M entries: ~250k leaves) each entry dirties a page of its own,
        and a 200k-entry write held ~800 MB. Splitting at the n whose expected pages reach
        :data:`DIRTY_PAGE_BUDGET` caps that memory whatever the table's size, and costs
        little: at that size nearly every entry's page is copied once either way.
        """
        leaves = self._read(lambda txn: txn.stat(self._entries)["leaf_pages"])
        if leaves <= DIRTY_PAGE_BUDGET:
            return None
        return max(1024, int(-leaves * math.log(1.0 - DIRTY_PAGE_BUDGET / leaves)))

    def _put_items(self, runs: list[Run], meta: dict[bytes, bytes]) -> None:
        """Entries, then ``meta`` with the last of them: earlier transactions hold only entries,
        and the file records of ``meta``, which go with the first (an entry is never stored
        before its file's record: see ``IndexBackend.write``).

        Entries are invisible until a run record names their file (see ``index.visibility``),
        so a crash between the transactions leaves nothing a reader can see.
        """
        total = sum(len(keys) for keys, _ in runs)
        chunks = _chunks(runs, self._entries_per_txn() if total > DIRTY_PAGE_BUDGET else None)

        budget = map_budget()

        def put_runs(txn, chunk: list[Run], records: dict[bytes, bytes] | None = None) -> None:
            for k, v in (records or {}).items():
                txn.put(k, v, db=self._meta)
            cursor = txn.cursor(db=self._entries)
            # a big tree: the map's pages the inserts read are released every few entries
            # (safe inside the transaction: its dirty pages are its own copies, not the map's)
            # (a small write too: a flush of a few thousand random ids maps as many folios)
            every = self._release_every(txn, budget, per_leaf=False)
            for keys, values in chunk:
                if every is None:
                    cursor.putmulti(zip(keys, values))  # no (key, value) tuple list: zip reuses one
                    continue
                for a in range(0, len(keys), every):
                    cursor.putmulti(zip(keys[a:a + every], values[a:a + every]))
                    self._release_map(budget)

        files = {k: v for k, v in meta.items() if k.startswith(FILE_PREFIX)}
        for i, chunk in enumerate(chunks[:-1]):
            self._write(lambda txn, chunk=chunk, i=i: put_runs(txn, chunk, files if i == 0 else None))
            # a transaction reads (through the map) about as many pages as it dirties: released
            # after each, a rebuild's resident map is one transaction's, not the whole index
            self._release_map_now()
        last = chunks[-1]

        def put(txn):
            put_runs(txn, last)
            for k, v in meta.items():
                txn.put(k, v, db=self._meta)

        self._write(put)
        self._release_map_now()

    def put_entries(self, entries: Sequence[Entry | FileEntries]) -> None:
        self._put_items(_runs(entries), {})

    def get_entries(self, id_keys: Sequence[bytes]) -> dict[bytes, list[Located]]:
        keys = list(dict.fromkeys(id_keys))
        read = self.get_entry_arrays(keys)
        out: dict[bytes, list[Located]] = {}
        for at, fkey, value in zip(read.asked.tolist(), read.fkeys.tolist(), read.values()):
            out.setdefault(keys[at], []).append((fkey_bytes(fkey), *parse_value(value)))
        return out

    def get_entry_arrays(self, id_keys: Sequence[bytes] | np.ndarray) -> EntryArrays:
        # a bulk lookup passes its ids as one matrix: the list of bytes keys is made only
        # when the delta or tombstones need it
        matrix = id_keys if isinstance(id_keys, np.ndarray) else None
        listed = None if matrix is not None else list(id_keys)

        def key_bytes() -> list[bytes]:
            return listed if listed is not None else rows_as_bytes(matrix)

        if len(id_keys) <= FEW_IDS:
            return EntryArrays.from_rows(self.get_entry_rows(key_bytes()))
        hi, lo = id_halves(matrix if matrix is not None else listed)

        def read(txn) -> EntryArrays:
            segment, tombstones = self._segment_of(txn)
            sealed = EntryArrays()
            if segment is not None:
                sealed = _find_sealed(segment, hi, lo)
                if tombstones and len(sealed):
                    sealed = self._drop_tombstoned(txn, key_bytes(), sealed)
            if not txn.stat(self._entries)["entries"]:
                return sealed
            keys = key_bytes()
            delta = EntryArrays.from_columns(keys, self._walk_delta(txn, sorted(keys), release=True))
            if len(sealed) and len(delta):
                # an entry both sealed and in the delta (re-written after the seal, or a seal
                # interrupted between publishing its segment and emptying the delta): the
                # delta's copy is the newer one
                newer = set(zip(delta.asked.tolist(), delta.fkeys.tolist()))
                keep = [k not in newer for k in zip(sealed.asked.tolist(), sealed.fkeys.tolist())]
                sealed = sealed.take(np.flatnonzero(keep))
            return EntryArrays.concat([sealed, delta])

        return self._with_segment(read)

    def _with_segment(self, read: Callable[[Any], _R]) -> _R:
        """``read`` in a read transaction, again in a new one if a seal replaced its segment."""
        for attempt in range(4):
            try:
                return self._read(read)
            except _SegmentGone as gone:  # a seal replaced it after the transaction began: read again
                if attempt == 3:  # not a race: the folder the index names is not there
                    raise IndexUnavailableError(
                        f"the LMDB index at {self.location} names sealed segment {gone} but it is missing or "
                        "unreadable; rebuild the index with `omni index rebuild NAME --fresh`") from None
        raise AssertionError("unreachable")

    def get_entry_rows(self, id_keys: Sequence[bytes]) -> list[EntryRow]:
        keys = list(id_keys)
        return self._with_segment(lambda txn: self._read_few(txn, keys))

    def _read_few(self, txn, keys: list[bytes]) -> list[EntryRow]:
        """:meth:`get_entry_rows`: scalar reads, for a few ids (a point lookup's path)."""
        segment, tombstones = self._segment_of(txn)
        rows = segment.probe(keys) if segment is not None else []
        if segment is not None and segment.nbytes > map_budget():
            segment.release()  # a few folios mapped again by the next lookup: ~1 us each
        if tombstones and rows:
            rows = [r for r in rows if not self._tombstoned(txn, keys[r[0]], r[1])]
        if txn.stat(self._entries)["entries"]:
            at = {k: i for i, k in enumerate(keys)}
            delta = self._walk_delta(txn, sorted(keys), release=True)
            newer = {(at[rid], int.from_bytes(fk, "little")): value
                     for rid, fk, value in zip(delta.ids, delta.fkeys, delta.values)}
            rows = [r for r in rows if (r[0], r[1]) not in newer]  # the delta's copy is the newer one
            rows += [(a, fk, bytes(v)) for (a, fk), v in newer.items()]
        return rows

    def _walk_delta(self, txn, keys: list[bytes], release: bool = False) -> EntryColumns:
        """The delta's entries of the sorted ``keys`` (one forward cursor walk); ``release``:
        the map's pages are released every :data:`WALK_RELEASE_IDS` ids and at the end (the
        caller holds the guard: it is in ``txn``)."""
        out = EntryColumns()
        ids, fkeys, values = out.ids, out.fkeys, out.values
        cur = txn.cursor(db=self._entries)
        for i, rid in enumerate(keys):
            if not cur.set_range(rid):
                break
            for key, value in cur:
                if key[:ID_BYTES] != rid:
                    break
                ids.append(rid)
                fkeys.append(key[ID_BYTES:])
                values.append(value)
            if release and i % WALK_RELEASE_IDS == WALK_RELEASE_IDS - 1:
                self._release_map()
        if release:
            self._release_map()
        return out

    def _tombstoned(self, txn, key: bytes, fkey: int) -> bool:
        return txn.get(TOMBSTONE_PREFIX + key + fkey_bytes(fkey), db=self._meta) is not None

    def _drop_tombstoned(self, txn, keys: list[bytes], read: EntryArrays) -> EntryArrays:
        keep = [not self._tombstoned(txn, keys[at], fk) for at, fk in zip(read.asked.tolist(), read.fkeys.tolist())]
        return read.take(np.flatnonzero(keep))

    # ---- sealed segments --------------------------------------------------------------
    def _sealed_record(self, txn) -> dict[str, int]:
        """The segment record ``txn`` sees (a copy: callers may change it)."""
        raw = txn.get(SEALED_KEY, db=self._meta)
        if raw is None:
            return {"generation": 0, "entries": 0, "tombstones": 0}
        seen_raw, seen = self._sealed_seen
        if raw != seen_raw:  # parsed once per change, not per lookup
            seen = json.loads(bytes(raw))
            self._sealed_seen = (bytes(raw), seen)
        return dict(seen)

    def _segment_folder(self, generation: int) -> Path:
        return self.path / "sealed" / f"{generation:08d}"

    def _segment_of(self, txn) -> tuple[Segment | None, int]:
        """The segment ``txn`` sees (None: none yet) and how many tombstones it has."""
        rec = self._sealed_record(txn)
        if not rec["generation"]:
            return None, rec["tombstones"]
        return self._segment(rec["generation"]), rec["tombstones"]

    def _segment(self, generation: int) -> Segment:
        key = (self._real, generation)
        found = _SEGMENTS.get(key)
        if found is None:
            with _SEGMENTS_LOCK:
                found = _SEGMENTS.get(key)
                if found is None:
                    folder = self._segment_folder(generation)
                    try:
                        found = Segment(folder)
                    except (FileNotFoundError, ValueError) as e:  # gone, or not a segment any more
                        raise _SegmentGone(f"{folder} ({e})") from None
                    for old in [k for k in _SEGMENTS if k[0] == key[0]]:  # one generation per index
                        del _SEGMENTS[old]
                    _SEGMENTS[key] = found
        return found

    def sealing(self) -> tuple[int, int]:
        return self._read(lambda txn: (txn.stat(self._entries)["entries"], self._sealed_record(txn)["entries"]))

    def seal(self, progress: bool | None = None) -> SealReport:
        """Merge the delta into a new segment and empty it (see :mod:`omni_iceberg.index.sealed`).

        Readers are never blocked: they see the old segment and the full delta until the one
        write transaction that names the new segment and empties the delta. Entries written
        meanwhile stay in the delta (only what was read is removed). Sealers of one index
        queue on a lock file. Memory: one chunk of the delta and one step of the merge
        (:data:`~omni_iceberg.index.sealed.MERGE_STEP`), whatever the index's size: the delta
        streams from its cursor, the old segment is read in slices, the new one written front
        to back; the keys read are spooled to disk (24 bytes each) for removing them later.
        """
        started = time.perf_counter()
        folder = self.path / "sealed"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "seal.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            spool_path = folder / f"delta-{os.getpid()}.spool"
            try:
                return self._seal_locked(folder, spool_path, started, progress)
            finally:
                spool_path.unlink(missing_ok=True)

    def _seal_locked(self, folder: Path, spool_path: Path, started: float, progress: bool | None) -> SealReport:
        # one read transaction for the whole merge: the delta is read as of its start (MVCC),
        # chunk by chunk while the merge streams, so memory is a chunk, not the delta
        with self._guard.txn(), self._env.begin() as txn:
            rec = self._sealed_record(txn)
            gen = rec["generation"]
            count = txn.stat(self._entries)["entries"]
            tombstones = [bytes(k) for k, _ in self._scan_meta_in(txn, TOMBSTONE_PREFIX)]
            if not count and not tombstones:
                return SealReport(self.location, gen, rec["entries"], 0, time.perf_counter() - started)
            bar = progress_bar(progress, f"sealing the index at {self.location}", "entry", total=count)

            budget = map_budget()
            every = self._release_every(txn, budget, per_leaf=True)

            def read() -> Iterator[list[tuple[bytes, bytes]]]:
                pairs: list[tuple[bytes, bytes]] = []
                for key, value in txn.cursor(db=self._entries).iternext():
                    pairs.append((key, value))
                    if every is not None and len(pairs) % every == 0:
                        self._release_map(budget)  # the pairs are copies: the walk keeps a few leaves' pages
                    if len(pairs) == SEAL_READ_CHUNK:
                        if bar is not None:
                            bar.update(len(pairs))
                        yield pairs
                        pairs = []
                if bar is not None:
                    bar.update(len(pairs))
                yield pairs

            old = self._segment(gen) if gen else None
            delta = DeltaChunks(read(), spool_path)
            removed = [t[len(TOMBSTONE_PREFIX):] for t in tombstones]
            new_gen = gen + 1
            try:
                total = merge_into(self._segment_folder(new_gen), old, delta, removed=removed)
            finally:
                if bar is not None:
                    bar.close()

        def publish(txn) -> bool:
            now = self._sealed_record(txn)
            if now["generation"] != gen:  # the index was dropped meanwhile (a fresh rebuild)
                return False
            for t in tombstones:  # applied: the new segment leaves those entries out
                txn.delete(t, db=self._meta)
            left = now["tombstones"] - len(tombstones)
            txn.put(SEALED_KEY, json.dumps({"generation": new_gen, "entries": total, "tombstones": left}).encode(),
                    db=self._meta)
            # entries are only added (a delete leaves a tombstone): the same count and no
            # new tombstone mean the delta is still exactly what was read, so drop it whole
            if txn.stat(self._entries)["entries"] == count and left == 0:
                # one C call that reads every branch page of the delta's tree, so it cannot be
                # released part-way: measured after a 3M-record rebuild (a 937 MB delta), 200 MiB
                # of the map resident for a moment - the rebuild's largest file-backed peak left
                txn.drop(self._entries, delete=False)
                return True
            return False

        emptied = self._write(publish)
        if self._sealed_now() != new_gen:
            shutil.rmtree(self._segment_folder(new_gen), ignore_errors=True)
            return SealReport(self.location, 0, 0, 0, time.perf_counter() - started)
        if not emptied:  # writers added entries meanwhile: remove only what was sealed
            self._delete_sealed_from_delta(spool_path)
        if gen:
            shutil.rmtree(self._segment_folder(gen), ignore_errors=True)
        left = self._read(lambda txn: txn.stat(self._entries)["entries"])
        return SealReport(self.location, new_gen, total, delta.count, time.perf_counter() - started, left)

    def _sealed_now(self) -> int:
        return self._read(lambda txn: self._sealed_record(txn)["generation"])

    def _delete_sealed_from_delta(self, spool: Path) -> None:
        """Remove from the delta the entries a seal read (their keys, spooled as it read them)."""
        for chunk in spooled_keys(spool, self._entries_per_txn() or SEAL_READ_CHUNK):

            def delete(txn, chunk=chunk):
                budget = map_budget()
                every = self._release_every(txn, budget, per_leaf=False)
                for i, key in enumerate(chunk):
                    txn.delete(key, db=self._entries)
                    if every is not None and i % every == every - 1:
                        self._release_map(budget)

            self._write(delete)

    def _scan_meta_in(self, txn, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        cur = txn.cursor(db=self._meta)
        if not cur.set_range(prefix):
            return
        for k, v in cur:
            if not k.startswith(prefix):
                break
            yield k, v

    def write(self, entries: Sequence[Entry | FileEntries], meta: dict[bytes, bytes]) -> None:
        # the records naming the files land with their last entries (one transaction on a
        # small tree; on a big one, see _entries_per_txn)
        self._put_items(_runs(entries), meta)

    def delete_entries(self, keys: Sequence[tuple[bytes, bytes]]) -> None:
        keys = list(keys)

        def delete(txn):
            # a sealed copy cannot be removed (segments are immutable), and a seal running
            # now may have read the delta's copy already: a tombstone hides both from
            # segment reads until the next seal leaves the entry out
            rec = self._sealed_record(txn)
            added = 0
            for rid, fkey in keys:
                txn.delete(rid + fkey, db=self._entries)
                if txn.put(TOMBSTONE_PREFIX + rid + fkey, b"", db=self._meta, overwrite=False):
                    added += 1
            rec["tombstones"] += added
            txn.put(SEALED_KEY, json.dumps(rec).encode(), db=self._meta)

        self._write(delete)

    def scan_entries(self) -> Iterator[Entry]:
        """Segment and delta entries merged in id order (an entry in both is given once)."""
        import heapq

        with self._guard.txn(), self._env.begin() as txn:
            segment, tombstones = self._segment_of(txn)
            delta = ((bytes(k[:ID_BYTES]), bytes(k[ID_BYTES:ID_BYTES + FILE_KEY_BYTES]), v)
                     for k, v in txn.cursor(db=self._entries))
            if segment is None:
                merged = delta
            else:
                sealed = segment.entries()
                if tombstones:
                    sealed = (e for e in sealed if txn.get(TOMBSTONE_PREFIX + e[0] + e[1], db=self._meta) is None)
                merged = heapq.merge(sealed, delta, key=lambda e: e[0])
            last_id, seen = None, set()
            budget = map_budget()
            every = self._release_every(txn, budget, per_leaf=True) or 0
            for n, (rid, fkey, value) in enumerate(merged):
                if every and n % every == every - 1:
                    self._release_map(budget)  # values are copies: a whole walk keeps a few leaves' pages
                if rid != last_id:
                    last_id, seen = rid, set()
                if fkey in seen:
                    continue
                seen.add(fkey)
                yield (rid, fkey, *parse_value(value))

    # ---- meta -------------------------------------------------------------------------
    def put_meta(self, items: dict[bytes, bytes]) -> None:
        def put(txn):
            for k, v in items.items():
                txn.put(k, v, db=self._meta)

        self._write(put)

    def get_meta(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        def get(txn):
            out = {}
            for k in keys:
                v = txn.get(k, db=self._meta)
                if v is not None:
                    out[k] = bytes(v)
            return out

        return self._read(get)

    def scan_meta(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        with self._guard.txn(), self._env.begin() as txn:
            for k, v in self._scan_meta_in(txn, prefix):
                yield bytes(k), bytes(v)

    def delete_meta(self, keys: Iterable[bytes]) -> None:
        keys = list(keys)

        def delete(txn):
            for k in keys:
                txn.delete(k, db=self._meta)

        self._write(delete)

    def flush(self) -> None:
        self._env.sync(True)

    def close(self) -> None:
        _close_env(self.path)

    def drop(self) -> None:
        def drop(txn):
            txn.drop(self._entries, delete=False)
            txn.drop(self._meta, delete=False)  # the segment record too: readers stop using it

        self._write(drop)
        with _SEGMENTS_LOCK:
            for key in [k for k in _SEGMENTS if k[0] == self._real]:
                del _SEGMENTS[key]
        for old in (self.path / "sealed").glob("0*"):
            shutil.rmtree(old, ignore_errors=True)

