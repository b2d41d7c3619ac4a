"""The embedded index backend: one LMDB environment per logical table, no server.

Why LMDB: a B+tree in a memory map gives ~3-5 us point reads from a warm cache
(measured on 2M md5 keys, see TOOLCHAIN.md), readers never block writers, and several
processes can share one environment safely (its own lock file). Entries live in a named
database ``entries`` whose keys are ``id (16 bytes) + file key (8 bytes)``: all
locations of one id are adjacent, so a lookup is one cursor ``set_range`` and a sorted
batch of ids is one forward walk. Meta records live in a second database ``meta``.

LMDB forbids opening one environment twice in a process, so environments are shared
through :func:`_open_env` by real path.
"""

from __future__ import annotations

import math
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from omni_iceberg.index.backend import (Entry, EntryColumns, FileEntries, IndexBackend, Located, entry_value,
                                        key_order, parse_value, rows_as_bytes)
from omni_iceberg.index.errors import IndexUnavailableError
from omni_iceberg.index.keys import FILE_KEY_BYTES, ID_BYTES

#: Initial virtual size of the map, doubled whenever a write finds it full (up to
#: MAX_MAP_SIZE). It is address space only - the file grows as written - but a process
#: holding many indexes (a service, the test suite) ran out of it at a fixed 1 TiB each.
MAP_SIZE = 1 << 30
#: private pages (4 KB) one write transaction may dirty: 32 MB, see LmdbBackend._entries_per_txn
DIRTY_PAGE_BUDGET = 8192
MAX_MAP_SIZE = 1 << 42
_ENVS: dict[str, tuple[object, "_TxnGuard"]] = {}
_ENVS_LOCK = threading.Lock()


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
        keys = np.vstack([e.key_matrix for e in group])
        values = np.vstack([e.value_matrix for e in group])
        order = key_order(keys)
        runs.append((rows_as_bytes(keys[order]), rows_as_bytes(values[order])))
    loose = sorted((e[0] + e[1], entry_value(e)) for e in entries if not isinstance(e, FileEntries))
    if loose:
        runs.append(([k for k, _ in loose], [v for _, v in loose]))
    return runs


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
        """Entries, then ``meta`` with the last of them: earlier transactions hold only entries.

        Entries are invisible until a run record names their file (see ``index.visibility``),
        so a crash between the transactions leaves nothing a reader can see.
        """
        total = sum(len(keys) for keys, _ in runs)
        chunks = _chunks(runs, self._entries_per_txn() if total > DIRTY_PAGE_BUDGET else None)

        def put_runs(txn, chunk: list[Run]) -> None:
            cursor = txn.cursor(db=self._entries)
            for keys, values in chunk:
                cursor.putmulti(zip(keys, values))  # no (key, value) tuple list: zip reuses one

        for chunk in chunks[:-1]:
            self._write(lambda txn, chunk=chunk: put_runs(txn, chunk))
        last = chunks[-1]

        def put(txn):
            put_runs(txn, last)
            for k, v in meta.items():
                txn.put(k, v, db=self._meta)

        self._write(put)

    def put_entries(self, entries: Sequence[Entry | FileEntries]) -> None:
        self._put_items(_runs(entries), {})

    def get_entries(self, id_keys: Sequence[bytes]) -> dict[bytes, list[Located]]:
        read = self.get_entry_columns(id_keys)
        out: dict[bytes, list[Located]] = {}
        for rid, fkey, value in zip(read.ids, read.fkeys, read.values):
            out.setdefault(rid, []).append((fkey, *parse_value(value)))
        return out

    def get_entry_columns(self, id_keys: Sequence[bytes]) -> EntryColumns:
        def walk(txn):
            out = EntryColumns()
            ids, fkeys, values = out.ids, out.fkeys, out.values
            cur = txn.cursor(db=self._entries)
            for rid in sorted(set(id_keys)):
                if not cur.set_range(rid):
                    continue
                for key, value in cur:
                    if key[:ID_BYTES] != rid:
                        break
                    ids.append(rid)
                    fkeys.append(key[ID_BYTES:])
                    values.append(value)
            return out

        return self._read(walk)

    def write(self, entries: Sequence[Entry | FileEntries], meta: dict[bytes, bytes]) -> None:
        # the records naming the files land with their last entries (one transaction on a
        # small tree; on a big one, see _entries_per_txn)
        self._put_items(_runs(entries), meta)

    def delete_entries(self, keys: Sequence[tuple[bytes, bytes]]) -> None:
        keys = list(keys)

        def delete(txn):
            for rid, fkey in keys:
                txn.delete(rid + fkey, db=self._entries)

        self._write(delete)

    def scan_entries(self) -> Iterator[Entry]:
        with self._guard.txn(), self._env.begin(db=self._entries) as txn:
            for key, value in txn.cursor():
                yield (key[:ID_BYTES], key[ID_BYTES:ID_BYTES + FILE_KEY_BYTES], *parse_value(value))

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
        with self._guard.txn(), self._env.begin(db=self._meta) as txn:
            cur = txn.cursor()
            if not cur.set_range(prefix):
                return
            for k, v in cur:
                if not k.startswith(prefix):
                    break
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
            txn.drop(self._meta, delete=False)

        self._write(drop)
