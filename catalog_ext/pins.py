"""Logical versions pinned from outside the catalog: export manifests.

An export manifest (``omni export``) names the logical version it read, so that
``--from-manifest`` can re-create the same bytes later. The manifest lives wherever the
user exported to, out of the catalog's sight, so the export also leaves a small pin
record beside the family documents (``<view location>/omni/pins/``). Retention
(:mod:`governance.retention`) lists these records and keeps - or refuses to expire - the
versions whose manifest still exists; a record whose manifest is gone pins nothing.

One record per manifest path (its name is a hash of the path): exporting to the same
folder again replaces the record.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from catalog_ext import iceberg_io

PIN_FORMAT = "omni-pin/1"
KIND_EXPORT = "export-manifest"


@dataclass(frozen=True)
class Pin:
    """One outside reference to a logical version."""

    kind: str
    path: str  # the manifest (a local file)
    logical_table: str
    logical_version: int
    created_ms: int
    record: str  # where this record is stored, for removal

    def alive(self) -> bool:
        """True while the manifest exists and still names this table and version."""
        try:
            manifest = json.loads(Path(self.path).read_text())
        except (OSError, ValueError):
            return False
        return (manifest.get("logical_table") == self.logical_table
                and manifest.get("logical_version") == self.logical_version)


def pins_location(view_location: str) -> str:
    return f"{view_location.rstrip('/')}/omni/pins"


def record_pin(catalog: Any, view_location: str, logical_table: str, version: int, path: str | Path,
               kind: str = KIND_EXPORT) -> str:
    """Record that ``path`` pins ``version`` of ``logical_table``; returns the record's location."""
    resolved = str(Path(path).resolve())
    digest = hashlib.sha256(resolved.encode()).hexdigest()[:24]
    location = f"{pins_location(view_location)}/{kind}-{digest}.json"
    body = {"format": PIN_FORMAT, "kind": kind, "path": resolved, "logical_table": logical_table,
            "logical_version": version, "created_ms": int(time.time() * 1000)}
    with iceberg_io.file_io(catalog, location).new_output(location).create(overwrite=True) as out:
        out.write(json.dumps(body, sort_keys=True).encode())
    return location


def list_pins(catalog: Any, view_location: str) -> list[Pin]:
    """Every pin record of one logical table (alive or not), oldest first."""
    from pyarrow import fs as pafs

    root_uri = pins_location(view_location)
    filesystem, root = pafs.FileSystem.from_uri(root_uri)
    infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=False, allow_not_found=True))
    prefix = root_uri[: len(root_uri) - len(root)] if root_uri.endswith(root) else ""
    out = []
    for info in infos:
        if info.type != pafs.FileType.File or not info.path.endswith(".json"):
            continue
        uri = prefix + info.path
        try:
            with iceberg_io.file_io(catalog, uri).new_input(uri).open() as stream:
                body = json.loads(stream.read())
            out.append(Pin(body["kind"], body["path"], body["logical_table"], int(body["logical_version"]),
                           int(body.get("created_ms", 0)), uri))
        except (OSError, ValueError, KeyError):
            continue  # a record being written right now, or not ours: it pins nothing
    return sorted(out, key=lambda p: (p.created_ms, p.path))


def remove_pin(catalog: Any, pin: Pin) -> None:
    iceberg_io.delete_files(catalog, [pin.record])


__all__ = ["Pin", "KIND_EXPORT", "record_pin", "list_pins", "remove_pin", "pins_location"]
