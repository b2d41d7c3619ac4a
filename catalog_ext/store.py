"""Logical tables and their versions, stored as Iceberg views in the catalog.

One logical table = one Iceberg view. Each logical version is one view version: its
SQL pins the snapshot of every physical table (see :mod:`catalog_ext.view_sql`), and
its summary points at the immutable family document (the five-layer mapping) of
that version. The view's properties carry the current version and mapping pointer,
so the table-family metadata lives in the catalog itself.

A commit is one compare-and-swap of the view's metadata location. The loser of a
race reloads, re-applies its typed updates to the winner's state (rebasing staged
physical snapshots if both touched the same table), and tries again.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from catalog_ext import family_document, iceberg_io, view_sql
from catalog_ext.contract import (
    BATCH_COLUMN,
    DEFAULT_STAGE_FIELDS,
    ID_COLUMN,
    PHYSICAL_SEPARATOR,
    RAW_STAGE,
    check_namespace,
    check_table_name,
)
from catalog_ext.family import (
    FamilyState,
    LogicalColumn,
    LogicalTable,
    PhysicalColumn,
    PhysicalTable,
    PhysicalTableGroup,
)
from catalog_ext.physical import StagedWrite, create_physical_table
from catalog_ext.redact import redact, redact_mapping
from catalog_ext.retry import retry
from catalog_ext.types import to_iceberg
from catalog_ext.updates import PinConflict, PreconditionFailed, Update, apply_updates
from catalog_ext.views import (
    LoadedView,
    NoSuchViewError,
    SqlViewCatalog,
    ViewExistsError,
    ViewRepresentation,
    new_view_metadata,
    with_new_version,
    without_superseded_sql,
)
from catalog_ext.errors import (
    CommitConflictError,
    ConfigError,
    LogicalTableExistsError,
    NoSuchLogicalTableError,
    NoSuchVersionError,
)

FAMILY_FORMAT = "omni-family/1"
PROP_FORMAT = "omni.format"
PROP_VERSION = "omni.logical-version"
PROP_FAMILY = "omni.family-location"
SUMMARY_FAMILY = "omni.family-location"
SUMMARY_OPERATION = "omni.operation"
MAX_COMMIT_ATTEMPTS = 8
#: log entries kept parsed per store (a few tables' retention windows)
_VERSION_INFOS_KEPT = 8192


@dataclass(frozen=True)
class VersionInfo:
    version: int
    operation: str
    command: str
    committed_ms: int
    summary: dict[str, str]


class FamilyStore:
    """Create, load, list and commit logical tables on one SQL catalog."""

    def __init__(self, catalog: Any):
        from catalog_ext.catalog import is_sql_catalog
        from catalog_ext.rest_commit import RestViewCatalog, is_rest_catalog

        self.catalog = catalog
        if is_rest_catalog(catalog):
            # REST views cannot be compare-and-swapped: a pointer table is the lock there
            self.views: SqlViewCatalog | RestViewCatalog = RestViewCatalog(catalog)
        elif is_sql_catalog(catalog):
            self.views = SqlViewCatalog(catalog)
        else:
            raise ConfigError(
                "logical tables need atomic logical commits, which omni implements for SQL catalogs (SQLite, "
                "PostgreSQL) and Iceberg REST catalogs; this catalog type is supported for physical tables only."
            )
        #: opens the id index of a logical table by identifier, or returns None (no index).
        #: Set by the API layer: catalog_ext knows nothing of the index, it only hands it on.
        self.index_opener: Callable[[str], Any] | None = None
        #: called with (state, writer) for every write made by :meth:`staged_write`
        self.write_hooks: list[Callable[[FamilyState, StagedWrite], None]] = []
        #: called with the new state after every successful :meth:`commit`, of any writer: the
        #: work a commit sets off (set by the API layer; see :meth:`on_commit`)
        self.commit_hooks: list[Callable[[FamilyState], None]] = []
        #: family document -> the segments it names, for documents read or written here
        self._document_segments: dict[str, tuple[str, ...]] = {}
        self._segments_lock = threading.Lock()
        #: (view uuid, version id) -> its log entry. A view version never changes once
        #: written (stubbing its SQL leaves the summary alone), so ``log`` - which every tag
        #: reads - builds an entry once per version, not once per version per call.
        self._version_infos: "OrderedDict[tuple[str, int], VersionInfo]" = OrderedDict()

    # ---- documents ---------------------------------------------------------------------
    def _write_family(self, view_location: str, state: FamilyState, base_document: str | None = None) -> str:
        """Write ``state``'s document (and any newly sealed segment, see :mod:`catalog_ext.family_document`).

        ``base_document``: the document of the version ``state`` was derived from; segments
        it names are shared, not written again.
        """
        folder = f"{view_location.rstrip('/')}/omni"
        path = f"{folder}/family-v{state.version:06d}-{uuid.uuid4()}.json"
        with self._segments_lock:
            shared = set(self._document_segments.get(base_document, ())) if base_document else set()
        names = family_document.write(self._io, folder, path, state, shared)
        self._note_segments(path, names)
        return path

    def _read_family(self, path: str) -> FamilyState:
        state, names = family_document.read(self._io, family_document.folder_of(path), path)
        self._note_segments(path, names)
        return state

    def document_segments(self, document: str) -> tuple[str, ...]:
        """The segment files (names under ``<view>/omni/segments/``) a family document refers to."""
        with self._segments_lock:
            known = self._document_segments.get(document)
        if known is None:
            _state, known = family_document.read(self._io, family_document.folder_of(document), document)
            self._note_segments(document, known)
        return known

    def _io(self, location: str) -> Any:
        return iceberg_io.file_io(self.catalog, location)

    def _note_segments(self, document: str, names: tuple[str, ...]) -> None:
        with self._segments_lock:  # concurrent commits of one store run on threads
            self._document_segments[document] = names
            while len(self._document_segments) > 64:  # only recent bases are ever asked for
                self._document_segments.pop(next(iter(self._document_segments)))

    def _representations(self, state: FamilyState) -> list[ViewRepresentation]:
        return [ViewRepresentation(d, view_sql.render_view_sql(state, d)) for d in ("spark", "trino")]

    def _properties(self, state: FamilyState, family_location: str) -> dict[str, str]:
        return {
            PROP_FORMAT: FAMILY_FORMAT,
            PROP_VERSION: str(state.version),
            PROP_FAMILY: family_location,
            "omni.id-mode": state.table.id_mode,
            "omni.bucket-count": str(state.table.bucket_count),
            "comment": state.table.comment or f"omni logical table {state.table.identifier}",
        }

    def _summary(self, state: FamilyState, family_location: str) -> dict[str, str]:
        return {**state.summary, SUMMARY_FAMILY: family_location, SUMMARY_OPERATION: state.operation,
                "omni.command": state.command[:500]}

    def staged_write(self, state: FamilyState, identifier: str, base_snapshot_id: int, run_id: str,
                     properties: dict[str, str], *, rebasable: bool = True,
                     bucket_count: int | None = None) -> StagedWrite:
        """A :class:`StagedWrite` on one physical table of ``state``, followed by the write hooks.

        Every writer (ingest, backfill engines, governance) makes its writes here, so what
        must follow a write - the id index - is wired in one place. Its files are bucketed
        by ``state``'s bucket count; only a re-bucketing names another (``bucket_count``).
        """
        writer = StagedWrite(self.catalog, identifier, base_snapshot_id, run_id, properties, rebasable=rebasable,
                             bucket_count=bucket_count or state.table.bucket_count)
        writer.batch_versions = {b.name: b.version for b in state.batches}
        for hook in self.write_hooks:
            hook(state, writer)
        return writer

    def on_commit(self, hook: Callable[[FamilyState], None], operations: Iterable[str] | None = None) -> None:
        """Call ``hook(new_state)`` after every successful commit whose operation is one of
        ``operations`` (None: every commit).

        The commit is done when a hook runs: a hook that fails is reported on stderr and the
        commit stands (what it left undone is the next run's to do).
        """
        if operations is None:
            self.commit_hooks.append(hook)
            return
        wanted = frozenset(operations)

        def for_operations(state: FamilyState) -> None:
            if state.operation in wanted:
                hook(state)

        for_operations.__qualname__ = getattr(hook, "__qualname__", type(hook).__qualname__)
        self.commit_hooks.append(for_operations)

    def _run_commit_hooks(self, state: FamilyState) -> None:
        for hook in list(self.commit_hooks):
            try:
                hook(state)
            except Exception as e:  # noqa: BLE001 - the commit is done; nothing that follows it may undo it
                what = getattr(hook, "__qualname__", type(hook).__qualname__)
                print(f"warning: version {state.version} of {state.table.identifier} is committed, but {what} "
                      f"after it failed: {type(e).__name__}: {e}", file=sys.stderr)

    def open_index(self, state: FamilyState) -> Any:
        """The id index of ``state``'s logical table, or None when none is configured."""
        return self.index_opener(state.table.identifier) if self.index_opener is not None else None

    # ---- create / load -----------------------------------------------------------------
    def create(
        self, namespace: str, name: str, *, id_mode: str = "md5", bucket_count: int = 16, comment: str = "",
        command: str = "",
    ) -> FamilyState:
        """Create a logical table: its base physical table and its view (version 1)."""
        check_namespace(namespace)
        check_table_name(name)
        command = redact(command)
        if self.exists(namespace, name):
            raise LogicalTableExistsError(f"logical table {namespace}.{name} already exists")
        from pyiceberg.exceptions import NamespaceAlreadyExistsError

        try:
            self.catalog.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        base_ident = f"{namespace}.{name}{PHYSICAL_SEPARATOR}base"
        raw_fields = DEFAULT_STAGE_FIELDS[RAW_STAGE]
        from pyiceberg.types import NestedField, StructType

        raw_struct = StructType(
            *[NestedField(100 + i, f, to_iceberg(t), required=False) for i, (f, t) in enumerate(raw_fields.items())]
        )
        try:
            table, snapshot_id = create_physical_table(
                self.catalog, base_ident, {RAW_STAGE: raw_struct}, bucket_count,
                {"omni.logical-table": f"{namespace}.{name}", "omni.role": "base"},
            )
        except Exception as e:
            from pyiceberg.exceptions import TableAlreadyExistsError

            if isinstance(e, TableAlreadyExistsError):
                raise LogicalTableExistsError(
                    f"physical table {base_ident} exists without its logical view; drop it or pick another name"
                ) from e
            raise
        now = int(time.time() * 1000)
        columns = [LogicalColumn(path=ID_COLUMN, type="string", kind="key", comment="md5 of raw content or uuid"),
                   LogicalColumn(path=BATCH_COLUMN, type="string", kind="key", comment="ingest batch")]
        for stage, fields in DEFAULT_STAGE_FIELDS.items():
            columns += [LogicalColumn(path=f"{stage}.{f}", type=t, kind="stage") for f, t in fields.items()]
        state = FamilyState(
            version=1,
            operation="create",
            command=command,
            committed_ms=now,
            table=LogicalTable(namespace=namespace, name=name, id_mode=id_mode, bucket_count=bucket_count,
                               created_ms=now, comment=comment),
            columns=tuple(columns),
            groups=(PhysicalTableGroup(name="base", purpose="raw rows: keys and RawData"),),
            tables=(PhysicalTable(key="base", identifier=base_ident, group="base", snapshot_id=snapshot_id, role="base"),),
            physical_columns=tuple(
                PhysicalColumn(table="base", name=f"{RAW_STAGE}.{f}", logical=f"{RAW_STAGE}.{f}") for f in raw_fields
            ),
        )
        location = table.location().rsplit("/", 1)[0] + f"/{name}"
        family_location = self._write_family(location, state)
        metadata = new_view_metadata(
            location, view_sql.view_schema(state), self._representations(state), [namespace],
            self._properties(state, family_location), self._summary(state, family_location),
            default_catalog=self.catalog.name,
        )
        try:
            self.views.create_view(namespace, name, metadata)
        except ViewExistsError as e:
            self.catalog.drop_table(base_ident)
            raise LogicalTableExistsError(f"logical table {namespace}.{name} already exists") from e
        return state

    def exists(self, namespace: str, name: str) -> bool:
        return self.views.view_exists(namespace, name)

    def _load_view(self, namespace: str, name: str) -> LoadedView:
        try:
            view = self.views.load_view(namespace, name)
        except NoSuchViewError:
            view = None
        if view is None or view.properties.get(PROP_FORMAT) != FAMILY_FORMAT:
            known = ", ".join(self.list_tables(namespace)) or "none"
            raise NoSuchLogicalTableError(
                f"no logical table {namespace}.{name} (known in {namespace}: {known}); create it with "
                f"'omni table create {namespace}.{name}'"
            )
        return view

    def load(self, namespace: str, name: str, version: int | None = None) -> FamilyState:
        """The mapping at ``version`` (default: the current one)."""
        state, _ = self._load_with_view(namespace, name, version)
        return state

    def _load_with_view(self, namespace: str, name: str, version: int | None = None) -> tuple[FamilyState, LoadedView]:
        view = self._load_view(namespace, name)
        if version is None:
            return self._read_family(view.properties[PROP_FAMILY]), view
        v = view.version(version)
        if v is None or SUMMARY_FAMILY not in v.get("summary", {}):
            latest = view.properties.get(PROP_VERSION)
            kept = sorted(x["version-id"] for x in view.metadata["versions"] if SUMMARY_FAMILY in x.get("summary", {}))
            if kept and 1 <= version < kept[-1] and version not in kept:
                # retention (governance.retention) removed it: name what a reader can still ask for
                later = [k for k in kept if k > version]
                raise NoSuchVersionError(
                    f"version {version} of {namespace}.{name} was expired by retention; the oldest kept version is "
                    f"{kept[0]}" + (f" (the next kept one after {version} is {later[0]})" if later[0] != kept[0] else "")
                    + f"; kept versions are listed by 'omni log {namespace}.{name}'"
                )
            raise NoSuchVersionError(
                f"logical table {namespace}.{name} has no version {version} (versions 1..{latest}; see 'omni log')"
            )
        return self._read_family(v["summary"][SUMMARY_FAMILY]), view

    def list_tables(self, namespace: str | None = None) -> list[str]:
        namespaces = [namespace] if namespace else [".".join(n) for n in self.catalog.list_namespaces()]
        out = []
        for ns in namespaces:
            for name in self.views.list_views(ns):
                try:
                    view = self.views.load_view(ns, name)
                except NoSuchViewError:
                    continue
                if view.properties.get(PROP_FORMAT) == FAMILY_FORMAT:
                    out.append(f"{ns}.{name}")
        return out

    def log(self, namespace: str, name: str) -> list[VersionInfo]:
        """Every logical version, oldest first."""
        view = self._load_view(namespace, name)
        view_uuid = view.metadata.get("view-uuid", f"{namespace}.{name}")
        known = self._version_infos
        out = []
        for v in view.metadata["versions"]:
            key = (view_uuid, v["version-id"])
            info = known.get(key)
            if info is None:
                summary = v.get("summary", {})
                if SUMMARY_FAMILY not in summary:
                    continue
                info = VersionInfo(v["version-id"], summary.get(SUMMARY_OPERATION, ""),
                                   summary.get("omni.command", ""), v["timestamp-ms"],
                                   {k: x for k, x in summary.items() if k not in (SUMMARY_FAMILY,)})
                known[key] = info
            out.append(info)
        while len(known) > _VERSION_INFOS_KEPT:
            known.popitem(last=False)
        return out

    # ---- commit ------------------------------------------------------------------------
    def commit(
        self,
        namespace: str,
        name: str,
        updates: Callable[[FamilyState], tuple[Update, ...]],
        *,
        operation: str,
        command: str = "",
        summary: Callable[[FamilyState], dict[str, str]] | None = None,
        staged: Iterable[StagedWrite] = (),
        view_edit: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> FamilyState:
        """Make one new logical version, atomically.

        ``updates(latest)`` returns the typed updates to apply; it is called again on the
        new latest state after a lost race. ``staged`` writes are rebased onto the
        winner's snapshots when a :class:`PinConflict` says both touched a table.
        ``view_edit(metadata)`` may rewrite the new view metadata before the swap (retention
        drops expired versions in the same compare-and-swap); it sees each attempt's base.
        """
        staged_by_key: dict[str, StagedWrite] = {sw.identifier: sw for sw in staged}
        command = redact(command)  # recorded in the view, the family document and `omni log`
        summarize = summary

        def redacted_summary(latest: FamilyState) -> dict[str, str]:
            return redact_mapping(summarize(latest)) if summarize else {}

        def attempt() -> FamilyState:
            base, view = self._load_with_view(namespace, name)
            try:
                new_state = apply_updates(
                    base, updates(base), operation=operation, command=command,
                    summary=redacted_summary(base), now_ms=int(time.time() * 1000),
                )
            except PinConflict as conflict:
                writer = staged_by_key.get(base.physical_table(conflict.table_key).identifier)
                if writer is None or conflict.actual is None or not writer.rebasable:
                    raise
                writer.rebase(conflict.actual)  # same files, new parent: nothing recomputed
                raise _LostRace(conflict) from conflict
            for writer in staged_by_key.values():
                if writer.bucket_count is not None and writer.bucket_count != new_state.table.bucket_count:
                    # its files are partitioned by the old count: pinning them would mix counts
                    # in one version (bucket-wise joins and id lookups trust one count)
                    raise PreconditionFailed(
                        f"{namespace}.{name} was re-bucketed from {writer.bucket_count} to "
                        f"{new_state.table.bucket_count} id buckets while this command wrote "
                        f"{writer.identifier}; nothing was committed - run the command again")
                _leave_out_batches_gone(writer, base)
                writer.check_counts_rows_once()  # an invariant: a rebase or retry must never add rows twice
                writer.before_commit()  # e.g. the id index catches up with what the branch now holds
            family_location = self._write_family(view.metadata["location"], new_state,
                                                 base_document=view.properties.get(PROP_FAMILY))
            metadata = with_new_version(
                view.metadata, view_sql.view_schema(new_state), self._representations(new_state),
                [namespace], self._properties(new_state, family_location),
                self._summary(new_state, family_location), version_id=new_state.version,
                default_catalog=self.catalog.name,
            )
            metadata = without_superseded_sql(metadata, f"{namespace}.{name}")
            if view_edit is not None:
                metadata = view_edit(metadata)
            try:
                self.views.replace_view(view, metadata)
            except CommitConflictError as e:
                raise _LostRace(e) from e
            for writer in staged_by_key.values():
                writer.committed = True
            return new_state

        new_state = retry(
            attempt, on=_LostRace, attempts=MAX_COMMIT_ATTEMPTS, backoff=0.05, cap=2.0,
            exhausted=lambda e: CommitConflictError(
                f"could not commit to {namespace}.{name} after {MAX_COMMIT_ATTEMPTS} attempts "
                f"(last: {e.__cause__ or e}); other writers keep winning - retry later"),
        )
        for writer in staged_by_key.values():
            try:
                writer.publish()
            except Exception:  # noqa: BLE001 - best effort by design, see StagedWrite.publish
                pass
        self._index_feature_values(new_state)
        self._run_commit_hooks(new_state)
        return new_state

    def _index_feature_values(self, state: FamilyState) -> None:
        """Record where the units this version computed live (``omni_sys.feature_values``).

        The index is what reuse by content searches; a failure to write it (the commit
        already happened) only means those values are not offered for reuse.
        """
        from datetime import datetime, timezone

        from catalog_ext import system_tables

        # every engine records a unit's data version through BackfillRun.commit; only
        # units committed by this very version are new here
        units = [u for u in state.computed if u.logical_version == state.version and u.data_version]
        if not units:
            return
        rows = []
        now = datetime.now(timezone.utc)
        for u in units:
            binding = state.feature(u.feature, u.version)
            data_version = u.data_version
            table = state.physical_table(binding.table_key)
            if table.snapshot_id is None:
                continue
            rows.append({"feature": u.feature, "version": u.version, "code_hash": binding.code_hash,
                         "data_version": data_version, "logical_table": state.table.identifier,
                         "id_mode": state.table.id_mode, "batch": u.batch, "physical_table": table.identifier,
                         "snapshot_id": table.snapshot_id, "logical_version": state.version, "rows": u.rows,
                         "committed_at": now})
        try:
            system_tables.append_rows(self.catalog, system_tables.FEATURE_VALUES, rows)
        except Exception:  # noqa: BLE001 - see docstring: a missed index row is a missed reuse, never wrong data
            pass


class _LostRace(Exception):
    """Another writer won this attempt (view CAS lost, or a staged table rebased): try again."""


def _leave_out_batches_gone(writer: StagedWrite, state: FamilyState) -> None:
    """Keep a staged write from publishing rows of a batch that left the table while it ran.

    ``state`` is the latest version, the one this commit builds on (a batch this very
    commit removes is meant to go). A batch dropped after the write started (``omni
    drop-batch`` committed first) is no longer in it; pinning the write's files of it would
    bring its rows back, under no batch entry (a later re-ingest of the same content then
    held each id twice). An append (a backfill unit: one batch per file) is re-staged
    without those files and the commit tried again - its ``MarkComputed`` leaves such
    units out. A rewrite holding such rows, or a batch name submitted again since (whose
    rows are not the ones written), fails the commit with nothing published. Nothing is
    read unless a batch left; then only the batch column of files mixing batches.
    """
    from catalog_ext.iceberg_io import read_data_files
    from catalog_ext.physical import file_batch_bounds

    now = {b.name: b.version for b in state.batches}
    gone = {name for name, version in writer.batch_versions.items() if now.get(name) != version}
    if not gone or writer.staged_snapshot_id is None:
        return
    changes = writer.run_changes()
    single: set[str] = set()  # gone batches held by files of that batch alone
    mixed: set[str] = set()  # ... by files holding other batches too
    for f in changes.live.values():
        lower, upper = file_batch_bounds(changes.table, f)
        if lower is not None and lower == upper:
            single |= {lower} & gone
        elif lower is None or upper is None or any(lower <= g <= upper for g in gone - mixed):
            batches = read_data_files(changes.table, [f], (BATCH_COLUMN,)).column(0).unique().to_pylist()
            mixed |= set(batches) & gone
    if not single and not mixed:
        return
    again = sorted(b for b in single | mixed if b in now)
    if mixed or again or not writer.rebasable:
        named = ", ".join(repr(b) for b in (again or sorted(single | mixed)))
        why = f"batch {named} was dropped and submitted again" if again else f"batch {named} was dropped"
        raise PreconditionFailed(
            f"{why} while this command wrote {writer.identifier} of {state.table.identifier}; publishing its "
            f"files would bring those rows back. Nothing was committed - run the command again")
    writer.leave_out_batches(single)
    raise _LostRace(PreconditionFailed(f"batch {', '.join(sorted(single))} left {state.table.identifier}"))


__all__ = ["FamilyStore", "VersionInfo", "PreconditionFailed"]
