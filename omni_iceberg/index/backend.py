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
    key and the stored value (:func:`entry_value`). What a 1,000-id lookup decodes as
    whole arrays, without a tuple or a parse per entry."""

    ids: list[bytes] = field(default_factory=list)
    fkeys: list[bytes] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)


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

    def get_entry_columns(self, id_keys: Sequence[bytes]) -> EntryColumns:
        """:meth:`get_entries` as :class:`EntryColumns` (backends may read them so directly)."""
        out = EntryColumns()
        for rid, located in self.get_entries(id_keys).items():
            for fkey, position, inline in located:
                out.ids.append(rid)
                out.fkeys.append(fkey)
                out.values.append(entry_value((rid, fkey, position, inline)))
        return out

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
        """Entries, then meta records. Backends with transactions do both in one (LMDB)."""
        if entries:
            self.put_entries(entries)
        self.put_meta(meta)

    def flush(self) -> None:  # noqa: B027 - backends that write through need nothing
        """Make everything written so far durable (called when a run is finished)."""

    @abstractmethod
    def drop(self) -> None:
        """Remove everything this index stores (rebuild from scratch)."""

    def close(self) -> None:  # noqa: B027 - optional for backends without connections
        """Release connections or handles."""
