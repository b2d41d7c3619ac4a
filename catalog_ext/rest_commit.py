"""Logical commits on an Iceberg REST catalog: a pointer table is the lock, the view is derived.

On the SQL catalog a logical commit is one compare-and-swap of the view's metadata
location (:mod:`catalog_ext.views`). The REST API cannot do that: a view update may only
assert the view's UUID (``assert-view-uuid``), never its current version, so two writers
replacing the same view would both "win" and one logical version would be lost. Table
updates, however, carry real preconditions - ``assert-ref-snapshot-id`` among them - and
every REST catalog must enforce them atomically. So on REST:

**The protocol.** Each logical table ``ns.t`` has a small *pointer table*
``ns.t__omni_versions`` (no rows; snapshot expiry disabled by its properties). Its
``main`` snapshot history is the logical version log (a few hundred bytes of table
metadata per version): logical version *v* is the snapshot whose summary holds ``omni.logical-version = v``,
the family-document location and the version's summary; the table's properties hold the
latest view record (schema + SQL representations) so the view can be rebuilt from the
pointer alone.

1. *Stage.* Writers put new physical data on private staging branches
   (:class:`catalog_ext.physical.StagedWrite`): committed and durable, invisible to every
   reader, because readers only see the snapshots a logical version pins.
2. *Read.* A writer loads the pointer table: its ``main`` snapshot S and version v.
3. *Commit* (the linearisation point). It writes family document v+1, then sends ONE
   table commit for the pointer table: add an (empty) snapshot whose parent is S and
   whose summary names v+1, set ``main`` to it, and set the view record - with the
   requirement ``assert-ref-snapshot-id(main == S)`` (plus ``assert-table-uuid``).
4. *Derive.* It then replaces the REST view (SQL pinning v+1's snapshots, properties
   naming v+1) - for Spark and Trino. omni itself never reads the view.

**Why it is safe.**

- *No lost update.* The catalog applies a table commit only if every requirement holds,
  atomically (REST spec, ``CommitTableRequest``). Two writers that read the same S both
  send ``main == S``; the first commit moves ``main``, so the second gets 409 and
  :class:`~catalog_ext.errors.CommitConflictError`. :class:`catalog_ext.store.FamilyStore`
  then reloads, re-applies its typed updates to the winner's state and rebases its staged
  snapshots - exactly the SQL catalog's loop. Versions therefore form one chain on
  ``main``; the version number is the chain position, so no two versions share a number.
- *Atomic visibility.* A logical version is visible iff its pointer snapshot is on
  ``main``, which one catalog commit decides. Everything a reader resolves (family
  document, pinned physical snapshots) was durable before that commit.
- *Crashes leave nothing visible.* A crash before step 3 leaves staged branches and an
  unreferenced family document: not reachable from any pointer snapshot, removed by the
  usual cleanup. A crash inside step 3 either committed (visible, complete) or did not
  (nothing). An unknown outcome (HTTP 5xx, a lost response) is resolved by reloading the
  pointer and looking for our snapshot id on ``main``.
- *The view is derived state.* A crash between steps 3 and 4 leaves the view one
  version behind. Every reader and writer compares the view's ``omni.logical-version``
  with the pointer and replaces it when behind (:meth:`RestViewCatalog.sync_view`). Two
  syncs can race (view updates cannot be guarded), so a sync re-reads the pointer *after*
  its own write: if the pointer still names the version it wrote it stops, else it goes
  round again. Whoever writes the view last also reads the pointer last, so a stale write
  is always followed by a check that sees the pointer ahead and repairs it; once writers
  stop, the view equals the pointer (rounds are bounded; a writer that gives up leaves the
  repair to the next reader, and omni itself never reads the view).

**Why not the multi-table endpoint.** ``POST /v1/{prefix}/transactions/commit`` could
also move the physical tables' ``main`` refs in the same request. That buys nothing for
correctness - readers follow pins, never ``main`` - and would make the logical commit
fail whenever some unrelated ``main`` movement (compaction, a concurrent best-effort
publish) broke one of those extra assertions. The only state that must change atomically
is the pointer, and a single-table commit (pyiceberg's own ``commit_table``) does that.
``main`` is still fast-forwarded after the commit, best effort, as on the SQL catalog.

pyiceberg 0.12 has no replace-view call, so view create/replace/load/drop use the
documented REST endpoints (``/v1/{prefix}/namespaces/{ns}/views[/{view}]``) through the
catalog's own authenticated HTTP session; everything REST-specific lives here.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from catalog_ext.errors import CommitConflictError, ConfigError, OmniError
from catalog_ext.redact import redact
from catalog_ext.views import LoadedView, NoSuchViewError, ViewExistsError

log = logging.getLogger(__name__)

POINTER_SUFFIX = "__omni_versions"
SNAP_VERSION = "omni.logical-version"
SNAP_SUMMARY = "omni.version-summary"
SNAP_PROPERTIES = "omni.view-properties"
PROP_VIEW_LOCATION = "omni.view-location"
PROP_VIEW_RECORD = "omni.view-record"
PROP_ROLE = "omni.role"
VIEW_PROP_VERSION = "omni.logical-version"
#: the pointer's snapshots ARE the version log: routine snapshot expiry (an engine's
#: ``expire_snapshots`` with default settings) must never drop one
KEEP_HISTORY = {"history.expire.min-snapshots-to-keep": str(2**31 - 1),
                "history.expire.max-snapshot-age-ms": str(2**63 - 1),
                "history.expire.max-ref-age-ms": str(2**63 - 1)}
#: rounds of write-then-check a view sync makes before leaving the repair to the next reader
MAX_SYNC_ROUNDS = 6
HTTP_TIMEOUT_S = (5.0, 60.0)  # (connect, read): an unreachable catalog fails in bounded time


def is_rest_catalog(catalog: Any) -> bool:
    from pyiceberg.catalog.rest import RestCatalog

    return isinstance(catalog, RestCatalog)


@dataclass(frozen=True)
class RestLoadedView(LoadedView):
    """A logical table as the pointer table records it (see the module docstring).

    ``metadata`` has the shape of view metadata - ``versions`` (one per logical version,
    from the pointer's ``main`` history), ``properties`` and ``schemas`` of the latest one -
    so :class:`~catalog_ext.store.FamilyStore` reads both catalogs the same way.
    ``pointer`` is the loaded pointer table: its ``main`` snapshot is what the next commit
    asserts.
    """

    pointer: Any = None


class RestViewCatalog:
    """The view operations :class:`~catalog_ext.store.FamilyStore` needs, on a REST catalog."""

    def __init__(self, catalog: Any):
        self._catalog = catalog
        self.name = catalog.name

    # ---- HTTP ---------------------------------------------------------------------------
    def _views_url(self, namespace: str, name: str | None = None) -> str:
        ns = urllib.parse.quote("\x1f".join(namespace.split(".")), safe="")
        url = self._catalog.url("namespaces/{namespace}/views", prefixed=True, namespace=ns)
        return url if name is None else f"{url}/{urllib.parse.quote(name, safe='')}"

    def _http(self, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        import requests

        try:
            response = self._catalog._session.request(
                method, url, data=None if body is None else json.dumps(body).encode(),
                headers={"Content-Type": "application/json"}, timeout=HTTP_TIMEOUT_S)
        except requests.RequestException as e:
            raise ConfigError(f"REST catalog {endpoint_of(self._catalog.uri)} did not answer {method} "
                              f"{redact(url)}: {type(e).__name__}: {redact(str(e))}; is it running?") from None
        try:
            payload = response.json() if response.content else {}
        except ValueError:
            payload = {"error": {"message": response.text[:500]}}
        return response.status_code, payload

    @staticmethod
    def _message(payload: dict[str, Any]) -> str:
        error = payload.get("error") or {}
        return redact(f"{error.get('type', '')}: {error.get('message', payload)}")

    def _get_view(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, payload = self._http("GET", self._views_url(namespace, name))
        if status == 404:
            return None
        if status != 200:
            raise OmniError(f"REST catalog: loading view {namespace}.{name} failed (HTTP {status}, "
                            f"{self._message(payload)})")
        return payload

    # ---- pointer table ------------------------------------------------------------------
    @staticmethod
    def pointer_identifier(namespace: str, name: str) -> str:
        return f"{namespace}.{name}{POINTER_SUFFIX}"

    def _load_pointer(self, namespace: str, name: str) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self._catalog.load_table(self.pointer_identifier(namespace, name))
        except NoSuchTableError:
            raise NoSuchViewError(f"no logical table {namespace}.{name} in REST catalog {self.name!r}") from None

    @staticmethod
    def _chain(pointer: Any) -> list[Any]:
        """The snapshots of ``main``, oldest first: one per logical version."""
        ref = pointer.metadata.refs.get("main")
        by_id = {s.snapshot_id: s for s in pointer.metadata.snapshots}  # one pass: histories grow long
        out = []
        snap = by_id.get(ref.snapshot_id) if ref is not None else None
        while snap is not None:
            out.append(snap)
            snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
        return out[::-1]

    def _as_loaded_view(self, namespace: str, name: str, pointer: Any) -> RestLoadedView:
        record = json.loads(pointer.metadata.properties[PROP_VIEW_RECORD])
        versions, version_log = [], []
        properties: dict[str, str] = {}
        for snap in self._chain(pointer):
            props = snap.summary.additional_properties if snap.summary else {}
            if SNAP_VERSION not in props:
                continue
            vid = int(props[SNAP_VERSION])
            versions.append({"version-id": vid, "schema-id": 0, "timestamp-ms": snap.timestamp_ms,
                             "summary": json.loads(props[SNAP_SUMMARY]), "representations": [],
                             "default-namespace": [namespace]})
            version_log.append({"timestamp-ms": snap.timestamp_ms, "version-id": vid})
            properties = json.loads(props[SNAP_PROPERTIES])
        versions[-1]["representations"] = record["representations"]
        metadata = {
            "view-uuid": pointer.metadata.table_uuid.hex,
            "format-version": 1,
            "location": pointer.metadata.properties[PROP_VIEW_LOCATION],
            "current-version-id": versions[-1]["version-id"],
            "properties": properties,
            "schemas": [dict(record["schema"], **{"schema-id": 0})],
            "versions": versions,
            "version-log": version_log,
        }
        return RestLoadedView((namespace, name), metadata, pointer.metadata_location, pointer)

    def _pointer_transaction(self, pointer: Any, version: dict[str, Any], properties: dict[str, str],
                             record: dict[str, Any] | None) -> tuple[Any, int]:
        """Stage (not commit) one empty pointer snapshot for ``version``: (transaction, snapshot id)."""
        summary = {SNAP_VERSION: str(version["version-id"]), SNAP_SUMMARY: json.dumps(version["summary"]),
                   SNAP_PROPERTIES: json.dumps(properties), "omni.operation": version["summary"].get(
                       "omni.operation", "")}
        tx = pointer.transaction()
        if record is not None:
            tx.set_properties({PROP_VIEW_RECORD: json.dumps(record)})
        with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
            snapshot_id = append._snapshot_id  # pyiceberg keeps it private; stable across its retries
        return tx, snapshot_id

    # ---- the operations FamilyStore uses --------------------------------------------------
    def create_view(self, namespace: str, name: str, metadata: dict[str, Any]) -> LoadedView:
        """Create the pointer table with version 1 (one atomic create), then derive the view."""
        from pyiceberg.exceptions import TableAlreadyExistsError
        from pyiceberg.schema import Schema
        from pyiceberg.types import LongType, NestedField

        version = _current_version(metadata)
        record = _view_record(metadata, version)
        schema = Schema(NestedField(1, "logical_version", LongType(), required=False))
        try:
            tx = self._catalog.create_table_transaction(
                self.pointer_identifier(namespace, name), schema=schema,
                properties={PROP_ROLE: "logical-versions", "omni.logical-table": f"{namespace}.{name}",
                            PROP_VIEW_LOCATION: metadata["location"], PROP_VIEW_RECORD: json.dumps(record),
                            "format-version": "2", **KEEP_HISTORY})
            summary = {SNAP_VERSION: str(version["version-id"]), SNAP_SUMMARY: json.dumps(version["summary"]),
                       SNAP_PROPERTIES: json.dumps(metadata["properties"]), "omni.operation": "create"}
            with tx.update_snapshot(snapshot_properties=summary).fast_append():
                pass
            tx.commit_transaction()
        except TableAlreadyExistsError as e:
            raise ViewExistsError(f"a logical table {namespace}.{name} already exists") from e
        pointer = self._load_pointer(namespace, name)
        self.sync_view(namespace, name, pointer)
        return self._as_loaded_view(namespace, name, pointer)

    def load_view(self, namespace: str, name: str) -> RestLoadedView:
        """The logical table per its pointer; repairs a view left behind by a crashed writer."""
        pointer = self._load_pointer(namespace, name)
        self.sync_view(namespace, name, pointer)
        return self._as_loaded_view(namespace, name, pointer)

    def view_exists(self, namespace: str, name: str) -> bool:
        return self._catalog.table_exists(self.pointer_identifier(namespace, name))

    def list_views(self, namespace: str) -> list[str]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        try:
            tables = self._catalog.list_tables(namespace)
        except NoSuchNamespaceError:  # as on the SQL catalog: an unknown namespace holds no table
            return []
        return sorted(ident[-1][: -len(POINTER_SUFFIX)] for ident in tables if ident[-1].endswith(POINTER_SUFFIX))

    def replace_view(self, current: LoadedView, metadata: dict[str, Any]) -> LoadedView:
        """Commit the new logical version iff the pointer's ``main`` is still where ``current`` saw it."""
        import requests
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
        from pyiceberg.table.update import AssertTableUUID

        if not isinstance(current, RestLoadedView):
            raise TypeError("replace_view needs the RestLoadedView this catalog loaded")
        namespace, name = current.identifier
        pointer = current.pointer
        version = _current_version(metadata)
        tx, snapshot_id = self._pointer_transaction(pointer, version, metadata["properties"],
                                                    _view_record(metadata, version))
        requirements = tuple(tx._requirements) + (AssertTableUUID(uuid=pointer.metadata.table_uuid),)
        fresh = None
        try:
            response = self._catalog.commit_table(pointer, requirements, tuple(tx._updates))
            # the response carries the committed metadata: no reload needed
            fresh = pointer.__class__(identifier=pointer.name(), metadata=response.metadata,
                                      metadata_location=response.metadata_location, io=pointer.io,
                                      catalog=self._catalog, config=pointer.config)
        except CommitFailedException as e:
            raise CommitConflictError(
                f"logical table {namespace}.{name}: another writer committed first ({redact(str(e))})") from e
        except (CommitStateUnknownException, requests.RequestException) as e:
            # the request may have landed: our snapshot id on main is the only proof
            fresh = self._load_pointer(namespace, name)
            if snapshot_id not in {s.snapshot_id for s in self._chain(fresh)}:
                raise CommitConflictError(f"logical table {namespace}.{name}: commit outcome unknown and not "
                                          f"visible ({redact(str(e))}); retrying") from e
        if fresh is None:
            fresh = self._load_pointer(namespace, name)
        try:
            self.sync_view(namespace, name, fresh)
        except OmniError as e:  # the commit happened; the next reader repairs the view
            log.warning("logical table %s.%s committed, view not yet updated: %s", namespace, name, e)
        return self._as_loaded_view(namespace, name, fresh)

    def drop_view(self, namespace: str, name: str) -> None:
        """Drop the pointer (the logical table disappears in one step), then the derived view."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            self._catalog.drop_table(self.pointer_identifier(namespace, name))
        except NoSuchTableError:
            raise NoSuchViewError(f"no logical table {namespace}.{name} in REST catalog {self.name!r}") from None
        status, payload = self._http("DELETE", self._views_url(namespace, name))
        if status not in (200, 204, 404):
            log.warning("view %s.%s not dropped (HTTP %s, %s)", namespace, name, status, self._message(payload))

    # ---- the derived view ---------------------------------------------------------------
    def sync_view(self, namespace: str, name: str, pointer: Any | None = None) -> bool:
        """Make the REST view show the pointer's latest version; True if it does on return.

        See "The view is derived state" in the module docstring for why it re-checks after
        each write.
        """
        moot: str | None = None
        for _ in range(MAX_SYNC_ROUNDS):
            pointer = pointer if pointer is not None else self._load_pointer(namespace, name)
            latest = pointer.current_snapshot()
            latest_version = self._latest_version(pointer)
            view = self._get_view(namespace, name)
            shown = int(view["metadata"].get("properties", {}).get(VIEW_PROP_VERSION, 0)) if view else 0
            if shown >= latest_version:
                return True
            record = json.loads(pointer.metadata.properties[PROP_VIEW_RECORD])
            properties = json.loads(latest.summary.additional_properties[SNAP_PROPERTIES])
            summary = json.loads(latest.summary.additional_properties[SNAP_SUMMARY])
            moot = self._write_view(namespace, name, view, pointer.metadata.properties[PROP_VIEW_LOCATION],
                                    record, properties, summary)
            # re-read the pointer AFTER our write: if it still names what we wrote, we are done even
            # if a slower sync overwrites the view with an older version later - that writer reads the
            # pointer after its own write, sees it ahead, and writes again (the module's argument)
            pointer = self._load_pointer(namespace, name)
            if moot is None and self._latest_version(pointer) == latest_version:
                return True
        log.warning("view %s.%s still behind its pointer after %d rounds (last: %s); the next reader repairs it",
                    namespace, name, MAX_SYNC_ROUNDS, moot)
        return False

    @staticmethod
    def _latest_version(pointer: Any) -> int:
        return int(pointer.current_snapshot().summary.additional_properties[SNAP_VERSION])

    def _write_view(self, namespace: str, name: str, view: dict[str, Any] | None, location: str,
                    record: dict[str, Any], properties: dict[str, str], summary: dict[str, str]) -> str | None:
        """Create or replace the view; a string says why a concurrent change made this write moot."""
        version = {"version-id": 1, "schema-id": 0, "timestamp-ms": int(time.time() * 1000),
                   "summary": {"engine-name": "omni-iceberg", **summary},
                   "representations": record["representations"],
                   "default-namespace": record["default-namespace"]}
        if record.get("default-catalog") is not None:
            version["default-catalog"] = record["default-catalog"]
        schema = dict(record["schema"], **{"schema-id": 0})
        if view is None:
            body = {"name": name, "location": location, "schema": schema, "view-version": version,
                    "properties": properties}
            status, payload = self._http("POST", self._views_url(namespace), body)
            if status == 409:  # another sync created it first: the next round compares again
                return f"HTTP 409, {self._message(payload)}"
            if status != 200:
                raise OmniError(f"REST catalog: creating view {namespace}.{name} failed (HTTP {status}, "
                                f"{self._message(payload)})")
            return None
        # the server reuses an identical schema instead of adding it, and then "-1" (the schema
        # added by this request) names nothing: refer to the existing one by id instead
        same = [s["schema-id"] for s in view["metadata"].get("schemas", []) if _same_fields(s, schema)]
        updates: list[dict[str, Any]] = []
        if same:
            version["schema-id"] = same[0]
        else:
            next_id = max((s["schema-id"] for s in view["metadata"].get("schemas", [])), default=-1) + 1
            updates.append({"action": "add-schema", "schema": dict(schema, **{"schema-id": next_id})})
            version["schema-id"] = -1  # "the schema added by this request"
        version["version-id"] = max((v["version-id"] for v in view["metadata"].get("versions", [])), default=0) + 1
        body = {
            "requirements": [{"type": "assert-view-uuid", "uuid": view["metadata"]["view-uuid"]}],
            "updates": updates + [
                {"action": "add-view-version", "view-version": version},
                {"action": "set-current-view-version", "view-version-id": -1},
                {"action": "set-properties", "updates": properties},
            ],
        }
        status, payload = self._http("POST", self._views_url(namespace, name), body)
        if status in (400, 409):
            # a concurrent sync changed the view since we read it (our version ids are stale, or it
            # already holds this very version, which the server then does not add): the caller re-reads
            return f"HTTP {status}, {self._message(payload)}"
        if status != 200:
            raise OmniError(f"REST catalog: replacing view {namespace}.{name} failed (HTTP {status}, "
                            f"{self._message(payload)})")
        return None


def _same_fields(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a.get("fields"), sort_keys=True) == json.dumps(b.get("fields"), sort_keys=True)


def _current_version(metadata: dict[str, Any]) -> dict[str, Any]:
    vid = metadata["current-version-id"]
    return next(v for v in metadata["versions"] if v["version-id"] == vid)


def _view_record(metadata: dict[str, Any], version: dict[str, Any]) -> dict[str, Any]:
    """What the derived view needs beyond properties and summary: its schema and SQL."""
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == version["schema-id"])
    return {"schema": {k: v for k, v in schema.items() if k != "schema-id"},
            "representations": version["representations"],
            "default-namespace": version.get("default-namespace", []),
            "default-catalog": version.get("default-catalog")}


def bound_request_times(catalog: Any, timeout_s: tuple[float, float] = HTTP_TIMEOUT_S) -> Any:
    """Give every request of ``catalog``'s HTTP session a (connect, read) timeout unless it sets one.

    pyiceberg's REST client sends its requests without a timeout, so a catalog that
    accepts the connection and never answers would hang a command forever.
    """
    session = catalog._session
    send = session.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", timeout_s)
        return send(method, url, *args, **kwargs)

    session.request = request
    return catalog


def endpoint_of(uri: str) -> str:
    """``host:port`` of a URL (the default port filled in), for error messages."""
    parsed = urllib.parse.urlsplit(uri)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"{parsed.hostname}:{port}"


def check_reachable(uri: str, what: str, timeout_s: float = 5.0) -> None:
    """Fail fast, naming ``host:port`` (never credentials), when nothing listens at ``uri``."""
    import socket

    parsed = urllib.parse.urlsplit(uri)
    endpoint = endpoint_of(uri)
    try:
        with socket.create_connection((parsed.hostname, int(endpoint.rsplit(":", 1)[1])), timeout=timeout_s):
            return
    except OSError as e:
        raise ConfigError(f"cannot reach {what} at {endpoint} ({type(e).__name__}: {e.strerror or e}) within "
                          f"{timeout_s:.0f}s; is the server running and the address right?") from None
