"""A local spool in front of an append-only system table (``omni_sys.query_log``).

Why: one Iceberg append per query costs a commit (manifest, manifest list, metadata
file, catalog round trip: ~50 ms embedded, more on a shared catalog) and a snapshot;
for a 100 ms query or export that is half its latency, and every 64th query paid a
rewrite of the whole log on top. Queries now write their log rows to a file under the
omni home (one ``write`` with ``O_APPEND``, atomic between processes) and the spool is
flushed into the table in one commit once it holds ``OMNI_QUERY_LOG_FLUSH_ROWS`` rows or
its oldest row is ``OMNI_QUERY_LOG_FLUSH_S`` seconds old. Whatever reads the log through
omni (``omni sql`` on ``omni_sys.query_log``, ``omni advise``) flushes first; Spark and
Trino see the rows at most that late (``omni flush-log`` / ``Omni.flush_query_log()``
push them at once). ``OMNI_QUERY_LOG_FLUSH_ROWS=1`` restores one commit per query.

Spark and Trino spool too: omni's Spark session extension and omni's Trino event listener
append one JSON line per query and table read to ``<name>.events.jsonl`` in the same folder
(:attr:`LogSpool.events_path`; they are handed its path when they are configured). Those
lines name what the engine saw (a view or a physical table, its columns), not a logical
table at a version, so a flush that is given a ``convert`` function (the query log's, in
:mod:`omni_iceberg.explore.query_log`) first turns them into rows: the events file is
renamed to ``<name>.events.<token>.converting``, its rows written as the flush file
``<name>.<token>.flushing`` (then flushed like any other), and the events file deleted.
A converter that died after writing the flush file leaves both: the flush file's
presence says the events were converted.

Exactly once: a flush renames the spool to ``<name>.<token>.flushing`` under a file lock,
appends it with the token in the snapshot summary, then deletes it. A flusher that
crashed in between leaves the file behind; the next flush finds the token in the
table's snapshots (compaction runs only after the file is gone) and just deletes it.

One folder per catalog, ``<home>/spool/<key>``, the key a hash of the catalog's
identity (:func:`catalog_identity`: scheme, host, port, database or path - no user,
password or query options). So every spelling of one catalog's URI (another user, a
rotated password, ``:5432`` or not, a driver suffix) finds the same rows, and no
file name on disk is derived from a password. Earlier versions named the folder by a
hash of the URI as given, password included; a flush moves what such a folder holds
for the URI as spelled now into the catalog's folder (tokens kept, so exactly-once
still holds) and removes it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
import uuid
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit

import pyarrow as pa

from catalog_ext import settings
from catalog_ext.config import OmniConfig

#: snapshot-summary key naming the spool file an append came from
TOKEN_PROPERTY = "omni.spool-token"


def flush_rows() -> int:
    return settings.value("OMNI_QUERY_LOG_FLUSH_ROWS")


def flush_seconds() -> float:
    return float(settings.value("OMNI_QUERY_LOG_FLUSH_S"))


#: ports a URI may leave out: written or not, they name the same server
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433, "oracle": 1521,
                  "http": 80, "https": 443}
#: query options of a SQLAlchemy URI that say where the database is (a socket folder, a
#: host list); the others are connection settings (sslmode, timeouts) or credentials
_LOCATING_OPTIONS = ("database", "dbname", "host", "hostaddr", "port", "service_name")


def catalog_identity(catalog_uri: str) -> str:
    """Which catalog ``catalog_uri`` names, without credentials and whatever its spelling.

    >>> catalog_identity("postgresql+psycopg://u:pw@DB.example:5432/omni?sslmode=require")
    'postgresql://db.example/omni'
    >>> catalog_identity("https://user:pw@rest.example/catalog/?token=t")
    'https://rest.example/catalog'
    """
    uri = catalog_uri.strip()
    if "://" not in uri and not uri.startswith("sqlite:"):
        from catalog_ext.config import resolve_catalog_uri
        from catalog_ext.errors import ConfigError

        try:  # a catalog named in .pyiceberg.yaml is the catalog its uri names
            uri = resolve_catalog_uri(uri)
        except ConfigError:
            return f"catalog:{uri}"
    scheme, _, rest = uri.partition(":")
    dialect = scheme.lower().split("+")[0]
    dialect = "postgresql" if dialect == "postgres" else dialect
    if dialect == "sqlite":
        # SQLAlchemy: sqlite:///relative.db, sqlite:////absolute.db; a relative path is the
        # working folder's, as when the catalog is opened
        database = rest.removeprefix("//").split("?", 1)[0]
        database = database[1:] if database.startswith("/") else database
        return f"sqlite:{os.path.realpath(database) if database not in ('', ':memory:') else ':memory:'}"
    parts = urlsplit(uri)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    port_text = f":{port}" if port is not None and port != _DEFAULT_PORTS.get(dialect) else ""
    path = parts.path
    if dialect in ("http", "https"):
        return f"{dialect}://{host}{port_text}{path.rstrip('/')}"
    options = sorted((k, v) for k, v in parse_qsl(parts.query) if k.lower() in _LOCATING_OPTIONS)
    return f"{dialect}://{host}{port_text}{path}" + (f"?{urlencode(options)}" if options else "")


class LogSpool:
    """The spool of one system table for one catalog, under ``<home>/spool/``."""

    def __init__(self, home: Path, catalog_uri: str, name: str):
        # one home may be pointed at several catalogs: rows go back to the one they came from
        scope = hashlib.sha256(catalog_identity(catalog_uri).encode()).hexdigest()[:16]
        self.dir = Path(home) / "spool" / scope
        self.name = name
        self.path = self.dir / f"{name}.jsonl"
        #: where the JVM engines (Spark's extension, Trino's listener) append their events
        self.events_path = self.dir / f"{name}.events.jsonl"
        # where versions before the catalog's identity spooled this URI's rows
        self.legacy_dir = Path(home) / "spool" / hashlib.sha1(catalog_uri.encode()).hexdigest()[:12]

    def add(self, catalog: Any, rows: list[dict[str, Any]]) -> bool:
        """Spool ``rows``; flush when the spool is due. True when this call flushed."""
        from catalog_ext import system_tables

        if not rows:
            return False
        if flush_rows() <= 1:
            system_tables.append_rows(catalog, self.name, rows)
            return True
        self.dir.mkdir(parents=True, exist_ok=True)
        payload = "".join(json.dumps(_encode(r), separators=(",", ":")) + "\n" for r in rows).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, payload)  # one write: lines of concurrent writers never interleave
        finally:
            os.close(fd)
        if self._due():
            return self.flush(catalog, wait=False) > 0
        return False

    def pending(self) -> int:
        """Rows spooled and not yet in the table (stranded flush files and an old-style folder's included)."""
        files = [self.path, *self._flushing(self.dir), self.legacy_dir / self.path.name,
                 *self._flushing(self.legacy_dir), self.events_path, *self._converting()]
        return sum(_count_lines(p) for p in files if p.exists())

    def flush(self, catalog: Any, wait: bool = True,
              convert: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None) -> int:
        """Append every spooled row to the table; returns how many. ``wait=False`` skips
        the flush when another process is flushing (its rows arrive anyway). ``convert``
        turns the engines' events into rows (see the module docstring); without it they wait."""
        if not self.dir.exists():
            if not self.legacy_dir.is_dir():
                return 0
            self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock(wait) as locked:
            if not locked:
                return 0
            self._adopt_legacy()
            if convert is not None:
                self._convert_events(convert)
            if self.path.exists():
                os.rename(self.path, self.dir / f"{self.name}.{uuid.uuid4().hex}.flushing")
            return sum(self._flush_file(f, catalog) for f in self._flushing(self.dir))

    def _convert_events(self, convert: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
        """Turn the engines' events into a flush file (under the spool's lock)."""
        if self.events_path.exists():
            os.rename(self.events_path, self.dir / f"{self.name}.events.{uuid.uuid4().hex}.converting")
        for events in self._converting():
            token = events.name.split(".")[-2]
            target = self.dir / f"{self.name}.{token}.flushing"
            if not target.exists():  # else converted by a flusher that died before deleting the events
                rows = convert(_read_json_lines(events, self.dir / f"{self.name}.rejected.jsonl"))
                part = self.dir / f".{target.name}.part"
                part.write_bytes(b"".join(json.dumps(_encode(r), separators=(",", ":")).encode() + b"\n"
                                          for r in rows))
                os.replace(part, target)
            events.unlink()

    def _converting(self) -> list[Path]:
        return sorted(self.dir.glob(f"{self.name}.events.*.converting"))

    def _adopt_legacy(self) -> None:
        """Move what an earlier version spooled for this URI into this folder, then remove its folder.

        Under that folder's own lock, taken without waiting: an earlier version flushing it
        right now keeps it, and the next flush looks again.
        """
        old = self.legacy_dir
        if old == self.dir or not old.is_dir():
            return
        lock = old / f"{self.name}.lock"
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            for stranded in self._flushing(old):
                os.replace(stranded, self.dir / stranded.name)  # its token stays: committed ones are recognised
            spooled = old / self.path.name
            if spooled.exists():
                os.replace(spooled, self.dir / f"{self.name}.{uuid.uuid4().hex}.flushing")
            kept_aside = old / f"{self.name}.rejected.jsonl"
            if kept_aside.exists():
                with open(self.dir / kept_aside.name, "ab") as f:
                    f.write(kept_aside.read_bytes())
                kept_aside.unlink()
            lock.unlink()
        finally:
            os.close(fd)
        try:
            old.rmdir()
        except OSError:
            pass  # something else lives there (another table's spool): left as it is

    def _flush_file(self, path: Path, catalog: Any) -> int:
        from catalog_ext import system_tables

        token = path.name.split(".")[-2]
        table = system_tables.system_table(catalog, self.name)
        if any((s.summary.additional_properties if s.summary else {}).get(TOKEN_PROPERTY) == token
               for s in table.metadata.snapshots):
            path.unlink()  # committed by a flusher that died before deleting its file
            return 0
        rows = _read_rows(path, system_tables.SCHEMAS[self.name])
        table = system_tables.append_rows(catalog, self.name, rows, compact=False,
                                          snapshot_properties={TOKEN_PROPERTY: token})
        path.unlink()
        if table is not None:
            system_tables.maybe_compact(table)  # after the unlink: it may expire the token's snapshot
        return len(rows)

    def _due(self) -> bool:
        try:
            with open(self.path, "rb") as f:
                head = f.readline()
                rest = f.read()
        except FileNotFoundError:
            return False
        if 1 + rest.count(b"\n") >= flush_rows():
            return True
        try:
            oldest = datetime.fromisoformat(json.loads(head)["at"])
        except (ValueError, KeyError, TypeError):
            return True  # a damaged line: let the flush report it
        return time.time() - oldest.timestamp() >= flush_seconds()

    def _flushing(self, folder: Path) -> list[Path]:
        return sorted(folder.glob(f"{self.name}.*.flushing"))

    @contextmanager
    def _lock(self, wait: bool) -> Iterator[bool]:
        fd = os.open(self.dir / f"{self.name}.lock", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # closing releases the lock


def spool_for(config: OmniConfig, name: str) -> LogSpool:
    """The spool of system table ``name`` for ``config``'s catalog, under its home."""
    return LogSpool(config.home, config.catalog_uri, name)


def _encode(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in row.items()}


def _read_rows(path: Path, schema: pa.Schema) -> list[dict[str, Any]]:
    stamps = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    rows = _read_json_lines(path, path.parent / (path.name.split(".")[0] + ".rejected.jsonl"))
    for row in rows:
        for k in stamps:
            if isinstance(row.get(k), str):
                row[k] = datetime.fromisoformat(row[k])
    return rows


def _read_json_lines(path: Path, rejected: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``path``, one a line; a line that is not one is moved to ``rejected``."""
    rows = []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            # a torn line (disk full mid-write) must not block the others: it is kept aside
            import sys

            with open(rejected, "ab") as f:
                f.write(line + b"\n")
            print(f"warning: {path}:{number}: unreadable log line moved to {rejected} ({e})", file=sys.stderr)
            continue
        rows.append(row)
    return rows


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0
