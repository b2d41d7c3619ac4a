"""The id index of one logical table: writing runs, and resolving ids at a logical version.

Write side (:class:`IndexWriter`): a run (an ingest submit, a backfill run, a
compaction, a rebuild) indexes each data file right after writing it - file record
first, then its entries, then the run record listing the file - and marks the run
``complete`` before the logical commit. Entries are therefore durable before the
commit that makes their rows visible (write-then-commit, like the data files).

Read side (:class:`IndexView`, from :meth:`IdIndex.at`): for each physical table the
version pins, the runs visible at that snapshot come from the table's history
(:mod:`omni_iceberg.index.visibility`). If every one of them is a complete run of this
index, an entry counts exactly when its file was written by a visible run and not
retired by one; the index is then authoritative, and an id with no such entry is
absent. Otherwise the index lags for that table (a writer that did not index, a
crash between files, history it cannot read) and the lookup scans instead - slower,
never wrong - and says why in its explain info.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np

from catalog_ext.contract import ID_COLUMN
from catalog_ext.family import FamilyState
from omni_iceberg.index import visibility
from omni_iceberg.index.backend import (FILE_PREFIX, RUN_PREFIX, EntryArrays, EntryRow, FileEntries, FileRecord,
                                        IndexBackend, RunRecord, fkey_bytes, parse_value, rows_as_bytes)
from omni_iceberg.index.errors import IndexCorruptError
from omni_iceberg.index.file_input import open_input
from omni_iceberg.index.file_table import FileTable
from omni_iceberg.index.inline import IndexedRows, Layout
from omni_iceberg.index.keys import file_key, id_key, id_matrix

#: entries per backend write: bounds a writer's memory (~200 B an entry while it is built)
#: and one LMDB transaction / HBase batch; large, since random ids make every transaction
#: copy leaf pages all over the index (see ``IndexWriter.add_files``)
PUT_BATCH = 200_000
#: ids per backend read in bulk lookups (contains_many): memory follows the chunk
GET_BATCH = 10_000
#: up to this many ids, a read sorts its entries out in Python (:meth:`IdIndex.entry_rows_in`);
#: past it, with whole-array passes whose set-up a few entries do not repay
FEW_IDS = 16


def _distinct(ids: Sequence[str]) -> list[str]:
    """The asked ids as the callers pass them (checked, lower case), unless some repeat."""
    asked = list(ids)
    return asked if len(set(asked)) == len(asked) else list(dict.fromkeys(i.lower() for i in asked))


def run_key(table: str, run: str) -> bytes:
    return RUN_PREFIX + table.encode() + b"\x00" + run.encode()


class Location(NamedTuple):
    """Where one row of one physical table lives (a tuple: a lookup makes thousands)."""

    path: str
    position: int
    batch: str
    run: str
    #: the row's inline values and the file's layout for them (empty: read the file)
    inline: bytes = b""
    layout: Layout = Layout()


@dataclass
class TableEntries:
    """The visible entries of asked ids in one physical table, as parallel arrays.

    Entry ``k`` is a row of id ``ids[asked[k]]`` (``ids``: the asked ids, distinct, lower
    case) in file ``files[codes[k]]`` (its record and inline layout, by fid of the
    index's file table); ``read`` holds its
    stored value (position, then inline values) as bytes in one buffer.
    """

    ids: list[str]
    asked: np.ndarray
    codes: np.ndarray
    read: EntryArrays
    #: the index's :class:`~omni_iceberg.index.file_table.FileTable` (codes are its fids)
    file_table: FileTable

    @property
    def files(self) -> list[tuple[FileRecord, Layout]]:
        """(record, inline layout) by fid."""
        return self.file_table.files

    @property
    def layouts(self) -> list[Layout]:
        return self.file_table.layouts

    @property
    def values(self) -> list[bytes]:
        """Each entry's stored value as bytes (for the paths that go entry by entry)."""
        return self.read.values()

    @classmethod
    def from_rows(cls, ids: list[str], rows: Sequence[EntryRow], file_table: FileTable) -> "TableEntries":
        """A few entries of :meth:`IdIndex.entry_rows_in` (each ``(asked, fid, value)``) as arrays."""
        fkeys = file_table.fkeys
        read = EntryArrays.from_rows([(at, int.from_bytes(fkeys[fid], "little"), value) for at, fid, value in rows])
        return cls(ids, read.asked, np.array([fid for _, fid, _ in rows], np.int64), read, file_table)

    def locations(self) -> dict[str, list[Location]]:
        """id -> its locations (one per entry), for callers that read rows by position."""
        out: dict[str, list[Location]] = {}
        for at, code, value in zip(self.asked.tolist(), self.codes.tolist(), self.values):
            rec, layout = self.files[code]
            position, inline = parse_value(value)
            out.setdefault(self.ids[at], []).append(Location(rec.path, position, rec.batch, rec.run, inline, layout))
        return out


class EntryRows(NamedTuple):
    """A few ids' visible entries as tuples (:meth:`IdIndex.entry_rows_in`)."""

    #: per physical table: ``(position among the asked ids, fid, stored value)`` of each entry
    by_table: dict[str, list[EntryRow]]
    #: the file table the fids refer to
    file_table: FileTable

    def as_entries(self, ids: list[str]) -> dict[str, TableEntries]:
        """The same entries as arrays, per table (for the paths that decode arrays)."""
        return {t: TableEntries.from_rows(ids, rows, self.file_table) for t, rows in self.by_table.items()}


@dataclass
class Coverage:
    """Whether the index can answer for one physical table at one snapshot, and with what."""

    table: str
    snapshot_id: int | None
    visible_runs: frozenset[str]
    retired: frozenset[bytes]
    lag: list[str] = field(default_factory=list)

    @property
    def authoritative(self) -> bool:
        return not self.lag


class IdIndex:
    """The index of one logical table over one backend. Open with :func:`omni_iceberg.index.open_index`."""

    def __init__(self, backend: IndexBackend, logical_identifier: str):
        self.backend = backend
        self.logical_identifier = logical_identifier
        self._files: dict[bytes, FileRecord] = {}  # immutable once written
        self._complete: dict[bytes, RunRecord] = {}  # a complete run never changes again
        self._layouts: dict[bytes, Layout] = {}  # parsed once per file record
        #: every file a bulk read met, numbered, with its facts as arrays (see index.file_table)
        self._file_table = FileTable()
        self._authoritative: dict[tuple[str, int | None], Coverage] = {}  # see coverage()

    def __repr__(self) -> str:
        return f"IdIndex({self.logical_identifier} at {self.backend.location})"

    # ---- records ----------------------------------------------------------------------
    def files(self, fkeys: Iterable[bytes]) -> dict[bytes, FileRecord]:
        fkeys = list(dict.fromkeys(fkeys))
        want = [k for k in fkeys if k not in self._files]
        if want:
            for k, v in self.backend.get_meta([FILE_PREFIX + k for k in want]).items():
                self._files[k[len(FILE_PREFIX):]] = FileRecord.from_bytes(v)
        return {k: self._files[k] for k in fkeys if k in self._files}

    def runs_of(self, table: str, runs: Sequence[str]) -> dict[str, RunRecord]:
        keys = [run_key(table, r) for r in runs]
        out = {k: self._complete[k] for k in keys if k in self._complete}
        missing = [k for k in keys if k not in out]
        if missing:
            for k, v in self.backend.get_meta(missing).items():
                rec = RunRecord.from_bytes(v)
                if rec.complete:
                    self._complete[k] = rec
                out[k] = rec
        return {rec.run: rec for rec in out.values()}

    def all_runs(self) -> list[RunRecord]:
        return [RunRecord.from_bytes(v) for _, v in self.backend.scan_meta(RUN_PREFIX)]

    def withdraw_files(self, records: dict[bytes, FileRecord], io: Any = None) -> tuple[int, list[bytes]]:
        """Delete the entries and the records of files no version will ever pin.

        The entries are found by the file's ids, read back from it (only that column); a
        file that cannot be read any more (deleted with its abandoned branch) keeps its
        entries and record, and its key is returned: only a pass over every entry finds
        them (``rebuild`` makes it). Returns (entries deleted, keys left).
        """
        deleted, left = 0, []
        for fkey, rec in records.items():
            ids = read_id_keys(rec.path, io)
            if ids is None:
                left.append(fkey)
                continue
            self.backend.delete_entries([(rid, fkey) for rid in rows_as_bytes(ids)])
            deleted += len(ids)
        gone = [k for k in records if k not in left]
        if gone:
            self.backend.delete_meta([FILE_PREFIX + k for k in gone])
            for k in gone:
                self._files.pop(k, None)
        return deleted, left

    def layout(self, fkey: bytes, rec: FileRecord) -> Layout:
        found = self._layouts.get(fkey)
        if found is None:
            found = self._layouts[fkey] = Layout.from_json(rec.inline)
        return found

    def forget_caches(self) -> None:
        self._file_table = FileTable()
        self._files.clear()
        self._complete.clear()
        self._layouts.clear()
        self._authoritative.clear()

    # ---- write ------------------------------------------------------------------------
    def writer(self, table: str, run: str, *, source: str = "writer") -> "IndexWriter":
        """Index the files run ``run`` writes to physical table ``table`` (resumes an unfinished run)."""
        return IndexWriter(self, table, run, source)

    # ---- read -------------------------------------------------------------------------
    def coverage(self, catalog: Any, identifier: str, snapshot_id: int | None) -> Coverage:
        """What the index can answer for ``identifier`` at ``snapshot_id``.

        An authoritative answer is kept for the process (cleared with the other caches):
        the runs a snapshot sees and their complete records never change, so it cannot go
        stale. A lagging one is worked out again each time: a rebuild may end the lag.
        """
        key = (identifier, snapshot_id)
        known = self._authoritative.get(key)
        if known is not None:
            return known
        cov = self._coverage(catalog, identifier, snapshot_id)
        if cov.authoritative:
            if len(self._authoritative) >= 4096:
                self._authoritative.clear()
            self._authoritative[key] = cov
        return cov

    def _coverage(self, catalog: Any, identifier: str, snapshot_id: int | None) -> Coverage:
        hist = visibility.history(catalog, identifier, snapshot_id)
        lag = list(hist.problems)
        records = self.runs_of(identifier, hist.runs) if hist.runs else {}
        unindexed = [r for r in hist.runs if r not in records]
        unfinished = [r for r in hist.runs if r in records and not records[r].complete]
        if unindexed:
            shown = ", ".join(unindexed[:3]) + (f" and {len(unindexed) - 3} more" if len(unindexed) > 3 else "")
            lag.append(f"{len(unindexed)} of {len(hist.runs)} runs visible in {identifier} are not indexed ({shown})")
        if unfinished:
            lag.append(f"runs {', '.join(unfinished[:3])} of {identifier} are only partly indexed")
        retired = frozenset(bytes.fromhex(f) for r in records.values() if r.complete for f in r.retired)
        return Coverage(identifier, snapshot_id, frozenset(hist.runs), retired, lag)

    def locations(self, cov: Coverage, ids: Sequence[str]) -> dict[str, list[Location]]:
        """id -> locations visible under ``cov`` (one physical table at one snapshot)."""
        return self.locations_in([cov], ids)[cov.table]

    def locations_in(self, covs: Sequence[Coverage], ids: Sequence[str]) -> dict[str, dict[str, list[Location]]]:
        """Per physical table of ``covs``: id -> visible locations, from ONE backend read."""
        return {table: found.locations() for table, found in self.entries_in(covs, ids).items()}

    def entries_in(self, covs: Sequence[Coverage], ids: Sequence[str]) -> dict[str, "TableEntries"]:
        """Per physical table of ``covs``: the visible entries of ``ids`` as arrays, from ONE backend read.

        All tables' entries of an id are adjacent under its key, so reading them once and
        sorting them out by file record costs a table count less than asking per table.
        Visibility is decided once per distinct file, not per entry.
        """
        asked_ids = _distinct(ids)
        if len(asked_ids) <= FEW_IDS:
            return self.entry_rows_in(covs, asked_ids).as_entries(asked_ids)
        read = self.backend.get_entry_arrays(id_matrix(asked_ids))
        # file keys -> fids through the file table's hash (no Python per entry or per file);
        # files this process has not seen yet get their records read and a fid first
        table = self._file_table
        fids = table.fids_of(read.fkeys)
        unknown = fids < 0
        if unknown.any():
            self._learn_files(table, np.unique(read.fkeys[unknown]).tolist())
            fids[unknown] = table.fids_of(read.fkeys[unknown])  # still -1: no record, dangling
        owner_of = table.owners(covs)
        owner = np.where(fids >= 0, owner_of[np.maximum(fids, 0)], -1) if len(owner_of) else \
            np.full(len(fids), -1, np.int64)
        # each table's entries in read order (a stable split; the entries of no table are dropped)
        parts = [np.flatnonzero(owner == at) for at in range(len(covs))]
        bounds = np.cumsum([0] + [len(p) for p in parts]).tolist()
        order = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        read, codes = read.take(order), fids[order]
        out: dict[str, TableEntries] = {}
        for cov_at, cov in enumerate(covs):
            part = read.slice(bounds[cov_at], bounds[cov_at + 1])
            out[cov.table] = TableEntries(asked_ids, part.asked, codes[bounds[cov_at]:bounds[cov_at + 1]], part, table)
        return out

    def entry_rows_in(self, covs: Sequence[Coverage], ids: Sequence[str]) -> "EntryRows":
        """:meth:`entries_in` of a few ids as Python tuples: per physical table of ``covs``,
        ``(position in ids, fid, stored value)`` of each visible entry, in read order.

        A point lookup's path: for the ~4 entries of one id, the whole-array passes of
        :meth:`entries_in` (hash, split, slices) cost more than a dict and a loop.
        """
        rows = self.backend.get_entry_rows(list(map(id_key, ids)))
        table = self._file_table
        fid_of = table.fid_of
        if any(fk not in fid_of for _, fk, _ in rows):  # files this process has not seen yet
            self._learn_files(table, {fk for _, fk, _ in rows if fk not in fid_of})
        owner_of = table.owners(covs)
        out: dict[str, list[EntryRow]] = {cov.table: [] for cov in covs}
        tables = [cov.table for cov in covs]
        for at, fk, value in rows:
            fid = fid_of.get(fk)  # None: no record (a dangling entry)
            if fid is not None and fid < len(owner_of) and owner_of[fid] >= 0:
                out[tables[owner_of[fid]]].append((at, fid, value))
        return EntryRows(out, table)

    def _learn_files(self, table: FileTable, fkeys: Iterable[int]) -> None:
        """Give the files of ``fkeys`` (uint64 file keys) a fid in ``table``, reading their
        records; a key with no record (a dangling entry) gets none."""
        for fk, rec in self.files([fkey_bytes(k) for k in fkeys]).items():
            table.add(int.from_bytes(fk, "little"), fk, rec, self.layout(fk, rec))

    def at(self, catalog: Any, state: FamilyState) -> "IndexView":
        """This index as seen by a reader at ``state``'s logical version."""
        return IndexView(self, catalog, state)

    def close(self) -> None:
        self.backend.close()


class IndexWriter:
    """Indexes the data files one run writes to one physical table. See :mod:`core` docstring."""

    def __init__(self, index: IdIndex, table: str, run: str, source: str):
        self.index, self.table, self.run = index, table, run
        self._key = run_key(table, run)
        #: the table's FileIO, to read ids back from object stores (set by the caller)
        self.io: Any = None
        found = index.backend.get_meta([self._key]).get(self._key)
        self.record = (RunRecord.from_bytes(found) if found is not None else
                       RunRecord(run=run, table=table, source=source, started_ms=int(time.time() * 1000)))

    @property
    def done_files(self) -> set[str]:
        """Hex keys of files already indexed by this run (a resumed run skips them)."""
        return set(self.record.files)

    def has_file(self, path: str) -> bool:
        return file_key(path).hex() in self.record.files

    def add_file(self, path: str, *, batch: str, ids: Sequence[str] | None = None) -> int:
        """Index every row of data file ``path``: its ids in row order and their inline values,
        read from the file (``ids`` given: those, without inline values - tests and tools)."""
        from omni_iceberg.index.inline import read_for_index

        if self.record.complete:
            raise IndexCorruptError(f"run {self.run} of {self.table} is already complete; start a new run")
        if file_key(path).hex() in self.record.files:
            return 0  # resumed run: this file is already indexed
        rows = IndexedRows(list(ids), Layout(), None) if ids is not None else read_for_index(path, self.io)
        return self._add(path, batch, rows)

    def _add(self, path: str, batch: str, rows: IndexedRows) -> int:
        fkey = file_key(path)
        known = self.index.files([fkey]).get(fkey)
        if known is not None and known.path != path:
            raise IndexCorruptError(f"file key {fkey.hex()} names both {known.path} and {path}; "
                                    "rebuild the index (`omni index rebuild`)")
        count = len(rows)
        rec = FileRecord(path=path, table=self.table, run=self.run, batch=batch, rows=count,
                         inline=rows.layout.to_json())
        starts = list(range(0, count, PUT_BATCH)) or [0]
        for start in starts[:-1]:  # the file's record comes with its first entries (see IndexBackend.write)
            self.index.backend.write([_entries(fkey, rows, start, start + PUT_BATCH)],
                                     {FILE_PREFIX + fkey: rec.to_bytes()} if start == 0 else {})
        # the last chunk goes with the file record and the run record that lists the file:
        # one transaction where the backend has them (one fsync per file, not three)
        self.record = replace(self.record, files=self.record.files + (fkey.hex(),), rows=self.record.rows + count,
                              updated_ms=_now_ms())
        self.index.backend.write([_entries(fkey, rows, starts[-1], count)],
                                 {FILE_PREFIX + fkey: rec.to_bytes(), self._key: self.record.to_bytes()})
        return count

    def add_files(self, files: Sequence[tuple[str, str] | tuple[str, str, IndexedRows | None]]) -> int:
        """Index several files (``(path, batch)``) in as few backend writes as ``PUT_BATCH`` allows.

        A file given as ``(path, batch, rows)`` is indexed from ``rows`` (what its writer
        held: :func:`~omni_iceberg.index.inline.given_for_index`), the others are read back.

        Fewer, larger transactions matter: ids are random, so every write touches leaf
        pages all over the index, and each touched page is copied once per transaction -
        the more entries one transaction carries, the more of them share a page. A file
        larger than ``PUT_BATCH`` goes through :meth:`add_file` (chunked).
        """
        from omni_iceberg.index.inline import read_for_index

        if self.record.complete:
            raise IndexCorruptError(f"run {self.run} of {self.table} is already complete; start a new run")
        given = {f[0]: f[2] for f in files if len(f) > 2 and f[2] is not None}
        todo = [(p, b) for p, b in dict.fromkeys((f[0], f[1]) for f in files)
                if file_key(p).hex() not in self.record.files]
        total = 0
        group: list[tuple[str, str, IndexedRows]] = []
        rows_in_group = 0
        for path, batch in todo:
            rows = given[path] if path in given else read_for_index(path, self.io)
            if len(rows) > PUT_BATCH:
                total += self._add(path, batch, rows)
                continue
            if group and rows_in_group + len(rows) > PUT_BATCH:
                total += self._add_group(group)
                group, rows_in_group = [], 0
            group.append((path, batch, rows))
            rows_in_group += len(rows)
        if group:
            total += self._add_group(group)
        return total

    def _add_group(self, loaded: list[tuple[str, str, IndexedRows]]) -> int:
        """Files' entries, their file records and the run record: one backend write."""
        known = self.index.files([file_key(p) for p, _, _ in loaded])
        entries, meta, keys, total = [], {}, [], 0
        for path, batch, rows in loaded:
            fkey = file_key(path)
            if fkey in known and known[fkey].path != path:
                raise IndexCorruptError(f"file key {fkey.hex()} names both {known[fkey].path} and {path}; "
                                        "rebuild the index (`omni index rebuild`)")
            entries.append(_entries(fkey, rows, 0, len(rows)))
            meta[FILE_PREFIX + fkey] = FileRecord(path=path, table=self.table, run=self.run, batch=batch,
                                                  rows=len(rows), inline=rows.layout.to_json()).to_bytes()
            keys.append(fkey.hex())
            total += len(rows)
        self.record = replace(self.record, files=self.record.files + tuple(keys), rows=self.record.rows + total,
                              updated_ms=_now_ms())
        meta[self._key] = self.record.to_bytes()
        self.index.backend.write(entries, meta)
        return total

    def reopen(self) -> None:
        """Let a complete run take more files or retirements: only before its logical commit.

        A run is visible only once a logical version pins a snapshot naming it, so until
        then no reader has read (or cached) its record; a commit attempt that lost a race
        may change what the run holds and finishes it again before the next attempt.
        """
        if self.record.complete:
            self._save(complete=False)

    def retire_files(self, paths: Iterable[str]) -> None:
        """Record that this run removes these files from the table (compaction)."""
        self.retire_keys(file_key(p).hex() for p in paths)

    def retire_keys(self, hex_keys: Iterable[str]) -> None:
        """Like :meth:`retire_files`, by hex file key."""
        self._save(retired=tuple(dict.fromkeys(self.record.retired + tuple(hex_keys))))

    def withdraw(self, hex_keys: Iterable[str], io: Any = None) -> list[str]:
        """Delete this run's entries of files it will never publish (see :meth:`IdIndex.withdraw_files`)
        and drop them from its record; returns the keys of files that could not be read (left as
        they were). Only for files of a run whose commit has not happened: a visible file's
        entries must stay."""
        listed = set(self.record.files)
        want = [bytes.fromhex(k) for k in dict.fromkeys(hex_keys) if k in listed]
        records = {k: rec for k, rec in self.index.files(want).items() if rec.run == self.run}
        _, left = self.index.withdraw_files(records, io if io is not None else self.io)
        gone = {k.hex() for k in records if k not in left}
        if gone:
            rows = sum(records[bytes.fromhex(k)].rows for k in gone)
            self._save(files=tuple(k for k in self.record.files if k not in gone), rows=max(0, self.record.rows - rows))
        return [k.hex() for k in left]

    def discard(self, hex_keys: Iterable[str], io: Any = None) -> None:
        """:meth:`withdraw` these files; then, if the record lists nothing any more, delete it
        (a run that will commit nothing to this table leaves no trace in its index)."""
        self.withdraw(hex_keys, io)
        if not self.record.files and not self.record.retired:
            self.index.backend.delete_meta([self._key])
            self.record = replace(self.record, complete=False, rows=0)

    def finish(self, **extra: str) -> RunRecord:
        """Mark the run complete. Call after the last file, BEFORE the logical commit."""
        self._save(complete=True, extra={**self.record.extra, **extra})
        self.index.backend.flush()  # durable before the logical commit that relies on it
        return self.record

    def _save(self, **changes: Any) -> None:
        self.record = replace(self.record, **changes, updated_ms=_now_ms())
        self.index.backend.put_meta({self._key: self.record.to_bytes()})


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_id_keys(path: str, io: Any = None) -> np.ndarray | None:
    """The ids of a data file in row order as an (n, 16) key matrix; None when it cannot be read."""
    import pyarrow.parquet as pq

    try:
        with open_input(path, io) as f:
            ids = pq.ParquetFile(f).read(columns=[ID_COLUMN]).column(ID_COLUMN)
    except (FileNotFoundError, OSError):
        return None
    return IndexedRows(ids, Layout(), None).id_keys(0, len(ids))


def _entries(fkey: bytes, rows: IndexedRows, lo: int, hi: int) -> FileEntries:
    """Stored entries for rows ``lo:hi`` of one file, built as whole arrays (no per-row packing)."""
    n = max(0, min(hi, len(rows)) - lo)
    ids = rows.id_keys(lo, lo + n)
    keys = np.hstack([ids, np.broadcast_to(np.frombuffer(fkey, np.uint8), (n, len(fkey)))])
    positions = np.arange(lo, lo + n, dtype=">u4").view(np.uint8).reshape(n, 4)
    values = positions if rows.matrix is None else np.hstack([positions, rows.matrix[lo:lo + n]])
    return FileEntries(fkey, keys, values)


class IndexView:
    """Resolve ids at one logical version (see :mod:`core` docstring)."""

    def __init__(self, index: IdIndex, catalog: Any, state: FamilyState):
        self.index, self.catalog, self.state = index, catalog, state
        self._coverage: dict[str, Coverage] = {}

    def coverage(self, table_key: str) -> Coverage:
        if table_key not in self._coverage:
            t = self.state.physical_table(table_key)
            self._coverage[table_key] = self.index.coverage(self.catalog, t.identifier, t.snapshot_id)
        return self._coverage[table_key]

    def locations(self, table_key: str, ids: Sequence[str]) -> dict[str, list[Location]]:
        """id -> visible locations in one physical table; only meaningful when authoritative."""
        return self.index.locations(self.coverage(table_key), ids)

    def locations_of(self, table_keys: Sequence[str], ids: Sequence[str]) -> dict[str, dict[str, list[Location]]]:
        """:meth:`locations` for several physical tables at once (one backend read), by table key."""
        return {key: found.locations() for key, found in self.entries_of(table_keys, ids).items()}

    def entries_of(self, table_keys: Sequence[str], ids: Sequence[str]) -> dict[str, TableEntries]:
        """The visible entries of ``ids`` in several physical tables (one backend read), by table key."""
        covs = {key: self.coverage(key) for key in table_keys}
        found = self.index.entries_in(list(covs.values()), ids)
        return {key: found[cov.table] for key, cov in covs.items()}

    def entry_rows_of(self, table_keys: Sequence[str], ids: Sequence[str]) -> "EntryRows":
        """:meth:`entries_of` of a few checked, distinct ids as tuples (:meth:`IdIndex.entry_rows_in`)."""
        covs = {key: self.coverage(key) for key in table_keys}
        found = self.index.entry_rows_in(list(covs.values()), ids)
        return EntryRows({key: found.by_table[cov.table] for key, cov in covs.items()}, found.file_table)

    def contains_many(self, table_key: str, sorted_ids: Sequence[str]) -> set[str]:
        """The ids among ``sorted_ids`` that have a row in ``table_key`` at this version (dedup).

        Reads the backend ``GET_BATCH`` ids at a time: memory follows the caller's chunk,
        not the table. When the index lags for the table, the same question is answered
        by a bucket-pruned scan of the pinned snapshot (see :func:`scan_ids`).
        """
        if not self.coverage(table_key).authoritative:
            return scan_ids(self.catalog, self.state, table_key, sorted_ids)
        found: set[str] = set()
        for i in range(0, len(sorted_ids), GET_BATCH):
            found.update(self.locations(table_key, sorted_ids[i:i + GET_BATCH]))
        return found


def scan_ids(catalog: Any, state: FamilyState, table_key: str, ids: Sequence[str]) -> set[str]:
    """The ids among ``ids`` present in one physical table at its pinned snapshot (the fallback)."""
    from catalog_ext.contract import ID_COLUMN
    from omni_iceberg.index.scan import bucket_scan

    if state.physical_table(table_key).snapshot_id is None or not ids:
        return set()
    return set(bucket_scan(catalog, state, table_key, ids, [ID_COLUMN]).column(ID_COLUMN).to_pylist())
