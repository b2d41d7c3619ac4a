"""The small protocol every index backend implements, and the records it stores.

A backend is a key-value store with two keyspaces:

* **entries**: ``id (16 bytes) + file key (8 bytes) -> row position (4 bytes) + inline
  values`` (the row's small columns, see :mod:`omni_iceberg.index.inline`; empty for
  entries written without them). One id has one entry per data file that ever held it
  (a compaction adds a second one), so entries are only added, never overwritten: two
  writers can never clobber each other.
* **meta**: ``b"F" + file key -> FileRecord`` and ``b"R" + run id -> RunRecord``.

Visibility is NOT a backend concern: the backend stores what writers wrote, and
:mod:`omni_iceberg.index.visibility` decides which files a reader at a logical version
may see (see there). That keeps each backend a thin adapter - the same contract suite
(``tests/test_index_contract.py``) runs against LMDB and HBase.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
import struct
from typing import Iterable, Iterator, Sequence

import numpy as np

FILE_PREFIX = b"F"
RUN_PREFIX = b"R"


@dataclass(frozen=True)
class FileRecord:
    """One data file whose rows are indexed: where it is and which run wrote it."""

    path: str
    table: str  # physical table identifier (namespace.table): stable, unlike the family's table key
    run: str
    batch: str
    rows: int
    #: the file's inline layout (:meth:`omni_iceberg.index.inline.Layout.to_json`); empty: none
    inline: list = field(default_factory=list)

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "FileRecord":
        return cls(**json.loads(data))


@dataclass(frozen=True)
class RunRecord:
    """What one writer run (an ingest submit, a backfill run, a compaction) did to one table.

    ``complete`` is set only after every entry of every file in ``files`` is durable:
    an incomplete run - crashed, or still writing - never counts as covered.
    ``retired`` lists file keys the run removed from the table (a compaction), so
    readers at versions that include the run stop resolving ids to them.
    """

    run: str
    table: str
    files: tuple[str, ...] = ()  # hex file keys, in the order they were indexed
    retired: tuple[str, ...] = ()
    rows: int = 0
    complete: bool = False
    source: str = "writer"  # "writer" (write-then-commit) or "rebuild"
    started_ms: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    #: when the record was last written: a run not visible and silent for longer than the
    #: staging grace period is dead, and ``rebuild`` sweeps it (0: records older than this field)
    updated_ms: int = 0

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "RunRecord":
        d = json.loads(data)
        d["files"], d["retired"] = tuple(d.get("files", ())), tuple(d.get("retired", ()))
        return cls(**d)


#: (id key, file key, row position in the file[, inline values]) - writers may leave the last out
Entry = tuple
#: (file key, row position, inline values) of one id, as backends return them
Located = tuple[bytes, int, bytes]
_POS = struct.Struct(">I")
#: bytes of a stored value before its inline values (the row position)
POSITION_BYTES = _POS.size


@dataclass
class EntryColumns:
    """A bulk read's entries as parallel lists, one item per entry: the id key, the file
    key and the stored value (:func:`entry_value`). What a backend's key walk collects;
    :meth:`EntryArrays.from_columns` turns it into arrays."""

    ids: list[bytes] = field(default_factory=list)
    fkeys: list[bytes] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)


_NO_INT = np.zeros(0, np.int64)

#: one entry of a read: (position of its id among the ids asked, file key as a little-endian
#: uint64, stored value) - the tuple form of an :class:`EntryArrays` row
EntryRow = tuple[int, int, bytes]


@dataclass
class EntryArrays:
    """A bulk read's entries as arrays, no Python object per entry (what lookups decode).

    Entry ``k`` is a row of the ``asked[k]``-th id asked for, in the data file whose 8-byte
    key is ``fkeys[k]`` (read as a little-endian uint64), and its stored value is
    ``buf[starts[k]:starts[k] + lengths[k]]``.
    """

    asked: np.ndarray = field(default_factory=lambda: _NO_INT)
    fkeys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    buf: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    starts: np.ndarray = field(default_factory=lambda: _NO_INT)
    lengths: np.ndarray = field(default_factory=lambda: _NO_INT)

    def __len__(self) -> int:
        return len(self.asked)

    @classmethod
    def from_columns(cls, keys: Sequence[bytes], cols: EntryColumns) -> "EntryArrays":
        """``cols`` (ids among the distinct ``keys``) as arrays."""
        n = len(cols.ids)
        if not n:
            return cls()
        at = {k: i for i, k in enumerate(keys)}
        lengths = np.fromiter(map(len, cols.values), np.int64, n)
        starts = np.zeros(n, np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return cls(np.fromiter(map(at.__getitem__, cols.ids), np.int64, n),
                   np.frombuffer(b"".join(cols.fkeys), "<u8").copy(),
                   np.frombuffer(b"".join(cols.values), np.uint8), starts, lengths)

    @classmethod
    def from_rows(cls, rows: Sequence[EntryRow]) -> "EntryArrays":
        """(asked position, file key as uint64, stored value) per entry, as arrays."""
        if not rows:
            return cls()
        asked, fkeys, values = zip(*rows)
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        starts = np.zeros(len(values), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return cls(np.array(asked, np.int64), np.array(fkeys, np.uint64),
                   np.frombuffer(b"".join(values), np.uint8), starts, lengths)

    def take(self, sel: np.ndarray) -> "EntryArrays":
        """The entries at positions ``sel`` (sharing ``buf``)."""
        return EntryArrays(self.asked[sel], self.fkeys[sel], self.buf, self.starts[sel], self.lengths[sel])

    def slice(self, start: int, stop: int) -> "EntryArrays":
        """Entries ``start`` to ``stop`` (views, no copy)."""
        return EntryArrays(self.asked[start:stop], self.fkeys[start:stop], self.buf, self.starts[start:stop],
                           self.lengths[start:stop])

    def values(self) -> list[bytes]:
        """Each stored value as bytes (for the paths that handle entries one by one)."""
        raw = self.buf.tobytes() if len(self.buf) else b""
        return [raw[s:s + n] for s, n in zip(self.starts.tolist(), self.lengths.tolist())]

    @staticmethod
    def concat(parts: Sequence["EntryArrays"]) -> "EntryArrays":
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1:
            return parts[0] if parts else EntryArrays()
        shift = np.cumsum([0] + [len(p.buf) for p in parts[:-1]])
        return EntryArrays(np.concatenate([p.asked for p in parts]), np.concatenate([p.fkeys for p in parts]),
                           np.concatenate([p.buf for p in parts]),
                           np.concatenate([p.starts + d for p, d in zip(parts, shift.tolist())]),
                           np.concatenate([p.lengths for p in parts]))


def fkey_bytes(fkey: int) -> bytes:
    """The 8-byte file key of an :attr:`EntryArrays.fkeys` item."""
    return int(fkey).to_bytes(8, "little")


class FileEntries:
    """The entries of one data file (or a slice of it) already in stored form.

    What writers hand backends in bulk: built with whole-array operations (see
    ``IndexWriter``), so a million rows cost no per-row Python tuple or packing. Held as
    two uint8 matrices, one row per entry: ``key_matrix`` (``id key + file key``) and
    ``value_matrix`` (:func:`entry_value` of each); :attr:`keys` / :attr:`values` are
    the same in key order as bytes, made on first use. A backend that merges several
    files' entries can sort the matrices together instead (the LMDB one does).
    """

    def __init__(self, file_key: bytes, key_matrix: np.ndarray, value_matrix: np.ndarray):
        self.file_key, self.key_matrix, self.value_matrix = file_key, key_matrix, value_matrix
        self._sorted: tuple[list[bytes], list[bytes]] | None = None

    def __len__(self) -> int:
        return len(self.key_matrix)

    def _lists(self) -> tuple[list[bytes], list[bytes]]:
        if self._sorted is None:
            order = key_order(self.key_matrix)
            self._sorted = rows_as_bytes(self.key_matrix[order]), rows_as_bytes(self.value_matrix[order])
        return self._sorted

    @property
    def keys(self) -> list[bytes]:
        return self._lists()[0]

    @property
    def values(self) -> list[bytes]:
        return self._lists()[1]


def key_order(keys: np.ndarray) -> np.ndarray:
    """The row order that sorts a uint8 key matrix (rows of one width) bytewise."""
    return np.argsort(np.ascontiguousarray(keys).view(f"S{keys.shape[1]}").ravel(), kind="stable")


def rows_as_bytes(mat: np.ndarray) -> list[bytes]:
    """Each row of a 2-D uint8 matrix as one bytes value."""
    width = mat.shape[1]
    if not width:
        return [b""] * len(mat)
    # one opaque (void) element per row: numpy makes the bytes objects in C, ~3x faster than
    # slicing a buffer in a Python loop (a million index entries per short-record batch)
    return np.ascontiguousarray(mat).view(f"V{width}").ravel().tolist()


def stored_pairs(entries: Sequence["Entry | FileEntries"]) -> list[tuple[bytes, bytes]]:
    """``(id key + file key, stored value)`` of every entry, tuples and :class:`FileEntries` alike."""
    pairs: list[tuple[bytes, bytes]] = []
    for e in entries:
        if isinstance(e, FileEntries):
            pairs += zip(e.keys, e.values)
        else:
            pairs.append((e[0] + e[1], entry_value(e)))
    return pairs


def entry_value(entry: Entry) -> bytes:
    """The stored value of an entry: big-endian position, then the inline values."""
    return _POS.pack(entry[2]) + (entry[3] if len(entry) > 3 else b"")


def parse_value(value: bytes) -> tuple[int, bytes]:
    """(position, inline values) of a stored value (old 4-byte values have no inline part)."""
    return _POS.unpack_from(value)[0], bytes(value[_POS.size:])


class IndexBackend(ABC):
    """A key-value store for one logical table's index. See the module docstring."""

    #: human-readable location for messages: a folder, or hbase://host:port/table
    location: str

    @abstractmethod
    def put_entries(self, entries: Sequence[Entry | FileEntries]) -> None:
        """Store entries durably (one batch; the caller bounds its size)."""

    @abstractmethod
    def get_entries(self, id_keys: Sequence[bytes]) -> dict[bytes, list[Located]]:
        """id key -> [(file key, position, inline values)] for the ids that have entries."""

    def get_entry_arrays(self, id_keys: Sequence[bytes] | np.ndarray) -> EntryArrays:
        """:meth:`get_entries` of the distinct ``id_keys`` (``bytes``, or the rows of an
        ``n x 16`` uint8 matrix: :func:`~omni_iceberg.index.keys.id_matrix`) as
        :class:`EntryArrays` (backends may read them so directly: the LMDB one does)."""
        if isinstance(id_keys, np.ndarray):
            id_keys = rows_as_bytes(id_keys)
        return EntryArrays.from_rows(self.get_entry_rows(id_keys))

    def get_entry_rows(self, id_keys: Sequence[bytes]) -> list[EntryRow]:
        """:meth:`get_entries` of the distinct ``id_keys`` as :data:`EntryRow` tuples: what a
        point lookup decodes entry by entry, with no array set-up (which costs more than a
        few entries' work; the LMDB backend reads them so directly)."""
        at = {k: i for i, k in enumerate(id_keys)}
        return [(at[rid], int.from_bytes(fkey, "little"), entry_value((rid, fkey, position, inline)))
                for rid, located in self.get_entries(id_keys).items() for fkey, position, inline in located]

    @abstractmethod
    def delete_entries(self, keys: Sequence[tuple[bytes, bytes]]) -> None:
        """Remove (id key, file key) entries (garbage of crashed runs, dangling entries)."""

    @abstractmethod
    def scan_entries(self) -> Iterator[Entry]:
        """Every entry as (id key, file key, position, inline values), in key order (verify)."""

    @abstractmethod
    def put_meta(self, items: dict[bytes, bytes]) -> None:
        """Store meta records (file and run records)."""

    @abstractmethod
    def get_meta(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The meta records that exist among ``keys``."""

    @abstractmethod
    def scan_meta(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Meta records whose key starts with ``prefix``."""

    @abstractmethod
    def delete_meta(self, keys: Iterable[bytes]) -> None:
        """Remove meta records."""

    def write(self, entries: Sequence[Entry | FileEntries], meta: dict[bytes, bytes]) -> None:
        """File records, then entries, then the other meta records (the run record naming the
        files). Backends with transactions do it in one where they can (LMDB).

        An entry is never stored before its file's record: an entry without one is then
        garbage, never a write in progress, and ``rebuild`` may sweep it at any time.
        """
        files = {k: v for k, v in meta.items() if k.startswith(FILE_PREFIX)}
        if files and entries:
            self.put_meta(files)
        if entries:
            self.put_entries(entries)
        self.put_meta(meta if not entries else {k: v for k, v in meta.items() if k not in files})

    def sealing(self) -> tuple[int, int] | None:
        """(unsealed, sealed) entry counts where the backend seals its entries into sorted
        segments (LMDB, see :mod:`omni_iceberg.index.sealed`); None where it keeps them
        sorted itself (HBase writes sorted store files and compacts them on its own)."""
        return None

    def seal(self, progress: bool | None = None) -> "object | None":
        """Merge the unsealed entries into a new sorted segment; None where :meth:`sealing` is None."""
        return None

    def flush(self) -> None:  # noqa: B027 - backends that write through need nothing
        """Make everything written so far durable (called when a run is finished)."""

    @abstractmethod
    def drop(self) -> None:
        """Remove everything this index stores (rebuild from scratch)."""

    def close(self) -> None:  # noqa: B027 - optional for backends without connections
        """Release connections or handles."""
