"""The cluster index backend: a real HBase, through ``happybase`` (Thrift 1).

Key design. Two HBase tables per logical table:

* ``omni-idx-<ns>-<name>``: row key = the id's 16 raw bytes, one column family ``l``,
  one qualifier per data file (its 8-byte file key), value = the row position (4 bytes)
  followed by the row's inline values (small columns; see ``omni_iceberg.index.inline``).
  All locations of an id are one row, so a lookup of N ids is one multi-get of N rows,
  and a row's cells never overwrite each other (each file has its own qualifier).
* ``omni-idx-<ns>-<name>-meta``: file and run records (family ``m``), a few rows per
  run - tiny and read rarely, so it lives apart from the hot entries table.

Region pre-splitting: md5 and uuid4 bytes are uniform, so the entries table is split
into :data:`PRESPLIT_REGIONS` regions on even first-byte boundaries when it is
created (through HBase's RegionSplitter - Thrift 1 cannot pass split keys; see
:func:`omni_iceberg.index.hbase_tools.presplit_table`). Without that, every write of a
fresh table hits one region server until HBase splits it at 10 GB.

Batch puts: writes go through ``Table.batch(batch_size=...)``, one Thrift call per
batch instead of one per row.

Versioning: cells keep one version (``max_versions=1``) and HBase timestamps are not
used for visibility. HBase timestamps are wall-clock times of the region server, not
logical versions; visibility instead follows the run that wrote a file, checked
against the family's pinned snapshots (:mod:`omni_iceberg.index.visibility`). An entry is
written once and never updated, so there is nothing for cell versions to keep.
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Iterable, Iterator, Sequence

from omni_iceberg.index.backend import Entry, FileEntries, IndexBackend, Located, parse_value, stored_pairs
from omni_iceberg.index.errors import IndexUnavailableError
from omni_iceberg.index.keys import ID_BYTES

ENTRY_FAMILY = b"l"
META_FAMILY = b"m"
META_COLUMN = b"m:v"
PRESPLIT_REGIONS = 16
BATCH_SIZE = 5000
#: Thrift 1 multi-gets of this many rows at most (bounds one response's size).
GET_CHUNK = 1000


def hbase_table_names(logical_identifier: str) -> tuple[str, str]:
    """``aidata.web`` -> (``omni-idx-aidata-web``, ``omni-idx-aidata-web-meta``).

    Namespaces and names are identifiers ([A-Za-z0-9_]), so '-' cannot be ambiguous.
    """
    base = "omni-idx-" + logical_identifier.replace(".", "-")
    return base, base + "-meta"


class HBaseBackend(IndexBackend):
    """Index of one logical table in HBase at ``host:port`` (its Thrift 1 server).

    ``timeout_ms`` bounds connecting and every call: an unreachable or hung server is an
    :class:`IndexUnavailableError` naming host and port, never a hang. ``presplit``
    (optional) creates the entries table pre-split; it receives the table name, the
    family and the region count.
    """

    def __init__(self, host: str, port: int, logical_identifier: str, *, timeout_ms: int = 5000,
                 presplit: Callable[[str, str, int], None] | None = None):
        self.host, self.port, self.timeout_ms = host, int(port), int(timeout_ms)
        self.entries_name, self.meta_name = hbase_table_names(logical_identifier)
        self.location = f"hbase://{host}:{port}/{self.entries_name}"
        self._presplit = presplit
        self._conn = self._connect()
        self._ensure_tables()
        self._entries = self._conn.table(self.entries_name)
        self._meta = self._conn.table(self.meta_name)

    # ---- connection -------------------------------------------------------------------
    def _unavailable(self, e: BaseException) -> IndexUnavailableError:
        return IndexUnavailableError(
            f"the HBase index at {self.host}:{self.port} did not answer within {self.timeout_ms} ms ({e}); "
            f"start HBase's Thrift server there, raise OMNI_INDEX_TIMEOUT_MS, or use OMNI_INDEX=lmdb"
        )

    def _connect(self) -> Any:
        import happybase

        # happybase's socket timeout covers calls; a plain probe first gives a clean error
        # for a closed port or a black-holed address within the same bound
        try:
            socket.create_connection((self.host, self.port), timeout=self.timeout_ms / 1000).close()
            conn = happybase.Connection(self.host, self.port, timeout=self.timeout_ms, autoconnect=True)
            conn.tables()  # a hung server (port open, nobody answering) fails here
        except Exception as e:  # noqa: BLE001 - socket, Thrift transport and timeout errors alike
            raise self._unavailable(e) from e
        return conn

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except IndexUnavailableError:
            raise
        except Exception as e:  # noqa: BLE001 - translate transport errors at the adapter
            if _is_transport_error(e):
                raise self._unavailable(e) from e
            raise

    def _ensure_tables(self) -> None:
        existing = {t.decode() for t in self._call(self._conn.tables)}
        if self.entries_name not in existing:
            if self._presplit is not None:
                self._presplit(self.entries_name, ENTRY_FAMILY.decode(), PRESPLIT_REGIONS)
            else:
                # point gets dominate: a row bloom filter skips store files without the id
                self._call(lambda: self._conn.create_table(
                    self.entries_name, {ENTRY_FAMILY.decode(): dict(max_versions=1, bloom_filter_type="ROW")}))
        if self.meta_name not in existing:
            try:
                self._call(lambda: self._conn.create_table(self.meta_name, {META_FAMILY.decode(): dict(max_versions=1)}))
            except Exception as e:  # noqa: BLE001 - a concurrent creator won: fine
                if "exists" not in str(e).lower():
                    raise

    # ---- entries ----------------------------------------------------------------------
    def put_entries(self, entries: Sequence[Entry | FileEntries]) -> None:
        pairs = stored_pairs(entries)

        def put():
            with self._entries.batch(batch_size=BATCH_SIZE) as b:
                for key, value in pairs:
                    b.put(key[:ID_BYTES], {ENTRY_FAMILY + b":" + key[ID_BYTES:]: value})

        self._call(put)

    def get_entries(self, id_keys: Sequence[bytes]) -> dict[bytes, list[Located]]:
        keys = sorted(set(id_keys))
        out: dict[bytes, list[Located]] = {}
        prefix = len(ENTRY_FAMILY) + 1
        for i in range(0, len(keys), GET_CHUNK):
            chunk = keys[i:i + GET_CHUNK]
            for row, cells in self._call(lambda: self._entries.rows(chunk, columns=[ENTRY_FAMILY])):
                out[row] = sorted((q[prefix:], *parse_value(v)) for q, v in cells.items())
        return out

    def delete_entries(self, keys: Sequence[tuple[bytes, bytes]]) -> None:
        def delete():
            with self._entries.batch(batch_size=BATCH_SIZE) as b:
                for rid, fkey in keys:
                    b.delete(rid, columns=[ENTRY_FAMILY + b":" + fkey])

        self._call(delete)

    def scan_entries(self) -> Iterator[Entry]:
        prefix = len(ENTRY_FAMILY) + 1
        for row, cells in self._call(lambda: self._entries.scan(batch_size=2000)):
            for q, v in sorted(cells.items()):
                yield (row[:ID_BYTES], q[prefix:], *parse_value(v))

    # ---- meta -------------------------------------------------------------------------
    def put_meta(self, items: dict[bytes, bytes]) -> None:
        def put():
            with self._meta.batch() as b:
                for k, v in items.items():
                    b.put(k, {META_COLUMN: v})

        self._call(put)

    def get_meta(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        out = {}
        keys = list(keys)
        for i in range(0, len(keys), GET_CHUNK):
            chunk = keys[i:i + GET_CHUNK]
            for row, cells in self._call(lambda: self._meta.rows(chunk, columns=[META_COLUMN])):
                if META_COLUMN in cells:
                    out[row] = cells[META_COLUMN]
        return out

    def scan_meta(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for row, cells in self._call(lambda: list(self._meta.scan(row_prefix=prefix, columns=[META_COLUMN]))):
            yield row, cells[META_COLUMN]

    def delete_meta(self, keys: Iterable[bytes]) -> None:
        def delete():
            with self._meta.batch() as b:
                for k in keys:
                    b.delete(k)

        self._call(delete)

    def drop(self) -> None:
        for name in (self.entries_name, self.meta_name):
            self._call(lambda: self._conn.delete_table(name, disable=True))
        self._ensure_tables()
        self._entries = self._conn.table(self.entries_name)
        self._meta = self._conn.table(self.meta_name)

    def close(self) -> None:
        try:
            self._conn.close()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass


def _is_transport_error(e: BaseException) -> bool:
    from thriftpy2.transport import TTransportException

    return isinstance(e, (TTransportException, socket.timeout, ConnectionError, OSError))
