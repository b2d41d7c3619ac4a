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

Exactly once: a flush renames the spool to ``<name>.<token>.flushing`` under a file lock,
appends it with the token in the snapshot summary, then deletes it. A flusher that
crashed in between leaves the file behind; the next flush finds the token in the
table's snapshots (compaction runs only after the file is gone) and just deletes it.
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
from typing import Any, Iterator

import pyarrow as pa

#: snapshot-summary key naming the spool file an append came from
TOKEN_PROPERTY = "omni.spool-token"
DEFAULT_FLUSH_ROWS = 200
DEFAULT_FLUSH_SECONDS = 60.0


def flush_rows() -> int:
    return max(1, int(os.environ.get("OMNI_QUERY_LOG_FLUSH_ROWS", DEFAULT_FLUSH_ROWS)))


def flush_seconds() -> float:
    return float(os.environ.get("OMNI_QUERY_LOG_FLUSH_S", DEFAULT_FLUSH_SECONDS))


class LogSpool:
    """The spool of one system table for one catalog, under ``<home>/spool/``."""

    def __init__(self, home: Path, catalog_uri: str, name: str):
        # one home may be pointed at several catalogs: rows go back to the one they came from
        scope = hashlib.sha1(catalog_uri.encode()).hexdigest()[:12]
        self.dir = Path(home) / "spool" / scope
        self.name = name
        self.path = self.dir / f"{name}.jsonl"

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
        """Rows spooled and not yet in the table (stranded flush files included)."""
        return sum(_count_lines(p) for p in [self.path, *self._flushing()] if p.exists())

    def flush(self, catalog: Any, wait: bool = True) -> int:
        """Append every spooled row to the table; returns how many. ``wait=False`` skips
        the flush when another process is flushing (its rows arrive anyway)."""
        if not self.dir.exists():
            return 0
        with self._lock(wait) as locked:
            if not locked:
                return 0
            if self.path.exists():
                os.rename(self.path, self.dir / f"{self.name}.{uuid.uuid4().hex}.flushing")
            return sum(self._flush_file(f, catalog) for f in self._flushing())

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

    def _flushing(self) -> list[Path]:
        return sorted(self.dir.glob(f"{self.name}.*.flushing"))

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


def spool_for(omni: Any, name: str) -> LogSpool:
    return LogSpool(omni.config.home, omni.config.catalog_uri, name)


def _encode(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in row.items()}


def _read_rows(path: Path, schema: pa.Schema) -> list[dict[str, Any]]:
    stamps = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    rows = []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            # a torn line (disk full mid-write) must not block the others: it is kept aside
            import sys

            rejected = path.parent / (path.name.split(".")[0] + ".rejected.jsonl")
            with open(rejected, "ab") as f:
                f.write(line + b"\n")
            print(f"warning: {path}:{number}: unreadable log line moved to {rejected} ({e})", file=sys.stderr)
            continue
        for k in stamps:
            if isinstance(row.get(k), str):
                row[k] = datetime.fromisoformat(row[k])
        rows.append(row)
    return rows


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0
