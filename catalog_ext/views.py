"""Iceberg views for the SQL catalog, written per the Iceberg view spec.

pyiceberg 0.12's SqlCatalog raises NotImplementedError for views, yet Spark's and
Trino's JDBC catalogs read them from the same ``iceberg_tables`` rows (with
``iceberg_type = 'VIEW'``, the V1 JDBC schema). This module writes and reads exactly
those rows and the view metadata files, so a view created here is an ordinary view
to Spark and Trino.

A replace is a compare-and-swap on ``metadata_location`` - the same protocol Iceberg's
JDBC catalog uses for tables - so two writers can never both win.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from catalog_ext.errors import CommitConflictError, OmniError

VIEW_TYPE = "VIEW"


class NoSuchViewError(OmniError):
    """The view does not exist in the catalog."""


class ViewExistsError(OmniError):
    """A view (or table) of that name exists already."""


@dataclass(frozen=True)
class ViewRepresentation:
    dialect: str
    sql: str

    def to_spec(self) -> dict[str, str]:
        return {"type": "sql", "sql": self.sql, "dialect": self.dialect}


@dataclass(frozen=True)
class LoadedView:
    identifier: tuple[str, str]
    metadata: dict[str, Any]
    metadata_location: str

    @property
    def current_version(self) -> dict[str, Any]:
        vid = self.metadata["current-version-id"]
        return next(v for v in self.metadata["versions"] if v["version-id"] == vid)

    def version(self, version_id: int) -> dict[str, Any] | None:
        return next((v for v in self.metadata["versions"] if v["version-id"] == version_id), None)

    @property
    def properties(self) -> dict[str, str]:
        return self.metadata.get("properties", {})


def new_view_metadata(
    location: str,
    schema: dict[str, Any],
    representations: list[ViewRepresentation],
    default_namespace: list[str],
    properties: dict[str, str],
    summary: dict[str, str],
    default_catalog: str | None = None,
) -> dict[str, Any]:
    """Metadata for a brand-new view with a single version (id 1)."""
    now = int(time.time() * 1000)
    schema = dict(schema, **{"schema-id": 0})
    return {
        "view-uuid": str(uuid.uuid4()),
        "format-version": 1,
        "location": location,
        "current-version-id": 1,
        "properties": dict(properties),
        "schemas": [schema],
        "versions": [_version(1, 0, now, representations, default_namespace, summary, default_catalog)],
        "version-log": [{"timestamp-ms": now, "version-id": 1}],
    }


def with_new_version(
    metadata: dict[str, Any],
    schema: dict[str, Any],
    representations: list[ViewRepresentation],
    default_namespace: list[str],
    properties: dict[str, str],
    summary: dict[str, str],
    version_id: int | None = None,
    default_catalog: str | None = None,
) -> dict[str, Any]:
    """A copy of ``metadata`` whose current version is a new one with this SQL and schema.

    Older versions are kept: they are how readers reach earlier logical versions.
    """
    now = int(time.time() * 1000)
    schemas = list(metadata["schemas"])
    fields = schema["fields"]
    schema_id = next((s["schema-id"] for s in schemas if s["fields"] == fields), None)
    if schema_id is None:
        schema_id = max(s["schema-id"] for s in schemas) + 1
        schemas.append(dict(schema, **{"schema-id": schema_id}))
    vid = version_id if version_id is not None else max(v["version-id"] for v in metadata["versions"]) + 1
    out = dict(metadata)
    out["schemas"] = schemas
    out["versions"] = list(metadata["versions"]) + [
        _version(vid, schema_id, now, representations, default_namespace, summary, default_catalog)
    ]
    out["version-log"] = list(metadata["version-log"]) + [{"timestamp-ms": now, "version-id": vid}]
    out["current-version-id"] = vid
    out["properties"] = dict(properties)
    return out


#: how a superseded version's SQL starts (see :func:`without_superseded_sql`)
SUPERSEDED_SQL_PREFIX = "SELECT 'superseded logical version"


def without_superseded_sql(metadata: dict[str, Any], identifier: str) -> dict[str, Any]:
    """``metadata`` with the SQL bodies of every version but the current one replaced by a stub.

    Engines read only a view's current version (neither Spark nor Trino reads an older
    view version), and omni renders an older logical version's SQL from its family
    document (``omni pin``, ``--as-of``), never from here. Kept, every commit copied every
    retained body into the next metadata file: a few KB each at 5 columns, 0.9 MB each at
    2,500, times the 20 to 70 versions a retention cycle keeps - so a commit cost what the
    table had accumulated. The stub stays valid SQL in each dialect for tools that parse
    every version, and says where the version is read from.
    """
    current = metadata["current-version-id"]
    versions = list(metadata["versions"])
    changed = False
    # newest first, stopping at the first superseded version already stubbed: every commit
    # stubs what it supersedes, so everything older was stubbed then, and a commit costs
    # the versions it superseded (normally one), not the versions retention keeps. Metadata
    # written before stubs existed, or versions other writers added, have no stubbed
    # version below them yet and get the whole pass once.
    for i in range(len(versions) - 1, -1, -1):
        v = versions[i]
        if v["version-id"] == current:
            continue
        reps = v.get("representations", [])
        if not reps:
            continue  # nothing to stub (a record without SQL); not a sign the pass may stop
        if all(r.get("sql", "").startswith(SUPERSEDED_SQL_PREFIX) for r in reps):
            break
        note = (f"{SUPERSEDED_SQL_PREFIX} {v['version-id']} of {identifier}: read it with omni --as-of "
                f"{v['version-id']} or omni pin {identifier} {v['version-id']}' AS omni_note")
        versions[i] = dict(v, representations=[{**r, "sql": note} for r in reps])
        changed = True
    return dict(metadata, versions=versions) if changed else metadata


def _version(vid, schema_id, now, representations, default_namespace, summary, default_catalog=None) -> dict[str, Any]:
    version = {
        "version-id": vid,
        "schema-id": schema_id,
        "timestamp-ms": now,
        "summary": {"engine-name": "omni-iceberg", **summary},
        "representations": [r.to_spec() for r in representations],
        "default-namespace": list(default_namespace),
    }
    if default_catalog is not None:
        # Trino resolves a view's ``ns.t`` only against the view's default-catalog (not the
        # session's), and Spark honours it too: every engine registers the catalog under
        # the omni catalog name.
        version["default-catalog"] = default_catalog
    return version


class SqlViewCatalog:
    """View operations over a pyiceberg ``SqlCatalog`` (SQLite or PostgreSQL)."""

    def __init__(self, catalog: Any):
        from pyiceberg.catalog.sql import IcebergTables

        self._catalog = catalog
        self._engine = catalog.engine
        self._rows = IcebergTables
        self.name = catalog.name
        #: metadata location -> parsed metadata, for files read or written here. Metadata
        #: files are immutable and every caller treats the dict as read-only (changes go
        #: through with_new_version, which copies), so a commit - which loads the view
        #: several times - parses it once instead of once per load.
        self._parsed: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
        self._parsed_lock = threading.Lock()

    def _remember(self, location: str, metadata: dict[str, Any]) -> None:
        with self._parsed_lock:
            self._parsed[location] = metadata
            self._parsed.move_to_end(location)
            while len(self._parsed) > 16:
                self._parsed.popitem(last=False)

    # ---- files ----------------------------------------------------------------------
    def _io(self, location: str):
        from catalog_ext.iceberg_io import file_io

        return file_io(self._catalog, location)

    def _write_metadata(self, metadata: dict[str, Any]) -> str:
        # numbered by version id, which only grows (the version log shrinks when versions expire)
        n = max(len(metadata["version-log"]), int(metadata.get("current-version-id", 0)))
        path = f"{metadata['location'].rstrip('/')}/metadata/{n:05d}-{uuid.uuid4()}.metadata.json"
        data = json.dumps(metadata, indent=None, separators=(",", ":")).encode()
        with self._io(path).new_output(path).create(overwrite=False) as out:
            out.write(data)
        # remembered as built, not re-parsed: every builder here (new_view_metadata,
        # with_new_version, without_superseded_sql, retention's version drop, pinned views)
        # makes JSON-native lists and dicts, so the dict equals what a reader would parse.
        # Re-parsing cost a commit one JSON decode per kept version.
        self._remember(path, metadata)
        return path

    def read_metadata(self, path: str) -> dict[str, Any]:
        with self._parsed_lock:
            known = self._parsed.get(path)
        if known is not None:
            return known
        with self._io(path).new_input(path).open() as stream:
            data = stream.read()
        if path.endswith(".gz.metadata.json") or data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)  # Spark writes gzipped view metadata
        metadata = json.loads(data)
        self._remember(path, metadata)
        return metadata

    # ---- rows -----------------------------------------------------------------------
    def _where(self, namespace: str, name: str):
        r = self._rows
        return and_(r.catalog_name == self.name, r.table_namespace == namespace, r.table_name == name)

    def create_view(self, namespace: str, name: str, metadata: dict[str, Any]) -> LoadedView:
        location = self._write_metadata(metadata)
        row = {
            "catalog_name": self.name,
            "table_namespace": namespace,
            "table_name": name,
            "metadata_location": location,
            "previous_metadata_location": None,
            "iceberg_type": VIEW_TYPE,
        }
        try:
            with Session(self._engine) as session:
                session.execute(insert(self._rows).values(**row))
                session.commit()
        except IntegrityError as e:
            raise ViewExistsError(f"a table or view {namespace}.{name} already exists") from e
        return LoadedView((namespace, name), metadata, location)

    def load_view(self, namespace: str, name: str) -> LoadedView:
        r = self._rows
        with Session(self._engine) as session:
            row = session.execute(
                select(r.metadata_location, r.iceberg_type).where(self._where(namespace, name))
            ).first()
        if row is None or row[1] != VIEW_TYPE:
            raise NoSuchViewError(f"no view {namespace}.{name} in catalog {self.name!r}")
        return LoadedView((namespace, name), self.read_metadata(row[0]), row[0])

    def view_exists(self, namespace: str, name: str) -> bool:
        try:
            self.load_view(namespace, name)
            return True
        except NoSuchViewError:
            return False

    def list_views(self, namespace: str) -> list[str]:
        r = self._rows
        with Session(self._engine) as session:
            rows = session.execute(
                select(r.table_name).where(
                    r.catalog_name == self.name, r.table_namespace == namespace, r.iceberg_type == VIEW_TYPE
                )
            ).all()
        return sorted(x[0] for x in rows)

    def replace_view(self, current: LoadedView, metadata: dict[str, Any]) -> LoadedView:
        """Swap the view to ``metadata`` iff nobody replaced it since ``current`` was read."""
        namespace, name = current.identifier
        location = self._write_metadata(metadata)
        r = self._rows
        with Session(self._engine) as session:
            result = session.execute(
                update(r)
                .where(self._where(namespace, name), r.metadata_location == current.metadata_location)
                .values(metadata_location=location, previous_metadata_location=current.metadata_location)
            )
            session.commit()
        if result.rowcount != 1:
            # the file we wrote is unreferenced; it is harmless and removed by orphan cleanup
            raise CommitConflictError(f"view {namespace}.{name} was replaced by another writer")
        return LoadedView(current.identifier, metadata, location)

    def drop_view(self, namespace: str, name: str) -> None:
        from sqlalchemy import delete

        r = self._rows
        with Session(self._engine) as session:
            result = session.execute(delete(r).where(self._where(namespace, name), r.iceberg_type == VIEW_TYPE))
            session.commit()
        if result.rowcount != 1:
            raise NoSuchViewError(f"no view {namespace}.{name} in catalog {self.name!r}")
