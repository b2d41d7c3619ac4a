"""Retention: keep the last K logical versions (plus tagged and manifest-pinned ones), expire the rest.

Without it nothing ever goes away: the view metadata carries every version (one file
per commit, each larger than the last), every version leaves a family document, and
every physical table keeps every snapshot and the files only old snapshots reach.

Prepare-Execute-Commit, like every governance operation:

- **prepare** (:func:`plan_retention`): from one logical version, decide per version
  whether it is kept and why - among the last ``keep_last``, tagged (or the commit
  that records a tag), pinned by an export manifest that still exists, or superseded
  less than ``min_age_s`` ago (a reader that started on it may still be reading). A
  policy that would expire a version an existing manifest pins is refused, naming
  the manifest. The plan prints (:meth:`RetentionPlan.describe`) and serialises.
- **commit**: ONE logical version (operation ``expire``, so ``omni log`` says what
  retention did) whose view metadata no longer lists the expired versions - the same
  compare-and-swap as every commit. Why a version and not a silent metadata rewrite:
  dropping versions changes what ``--as-of`` can answer, which is a change of the
  logical table's history that belongs in its log. The swap re-checks tags and pins
  against the state it replaces; a tag or manifest that appeared meanwhile makes the
  run re-plan. Once it is in, expired versions are unreadable (``--as-of`` names the
  oldest kept one), so nothing below can change what a reader gets.
- **execute** (after the commit, from what it left): delete the expired versions'
  family documents and superseded view metadata files; per physical table, expire
  the snapshots no remaining version pins (never a branch or tag head, nor a live
  staging branch's own snapshots), recording for the id index the runs of every
  ancestry it cuts (:mod:`omni_iceberg.index.visibility`) in the same table commit;
  then delete the data files, manifests and manifest lists only expired snapshots
  reached, and table metadata files older than the newest ``keep_metadata_files``
  entries of the table's metadata log.

A crash anywhere leaves the previous state readable: before the view swap nothing
changed; after it, every remaining version still has all its files (deletion only
touches what remaining versions do not reach), and the next run finds what is left
(unreferenced documents, metadata files and manifests by listing, snapshots by their
pins; data files of snapshots expired by a killed run by ``omni maintain``'s orphan sweep).
Files are only deleted if they were written before this run started, so a concurrent
writer's not-yet-committed metadata is never taken for garbage.

Example::

    from governance import RetentionPolicy, plan_retention, apply_retention
    plan = plan_retention(store, "aidata.web", RetentionPolicy(keep_last=20))
    print(plan.describe())
    report = apply_retention(store, "aidata.web", RetentionPolicy(keep_last=20))
    report.bytes_freed
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from catalog_ext import iceberg_io, settings
from catalog_ext.contract import split_qualified
from catalog_ext.errors import CommitConflictError, OmniError
from catalog_ext.family import FamilyState
from catalog_ext.pins import Pin, list_pins, remove_pin
from catalog_ext.family_document import SEGMENT_FOLDER
from catalog_ext.store import SUMMARY_FAMILY, SUMMARY_OPERATION, FamilyStore
from catalog_ext.tags import SUMMARY_TAG, SUMMARY_TAG_VERSION, tags_from_summaries

OPERATION = "expire"
MIN_AGE_ENV = "OMNI_RETENTION_MIN_AGE_S"
#: how often a lost race (a tag or manifest pin appearing mid-run) re-plans before giving up
MAX_REPLANS = 3
#: when no view swap fences this run, files younger than this may be a commit in flight
UNFENCED_GRACE_S = 600.0


class RetentionError(OmniError):
    """A retention policy that cannot run: invalid, or it would expire a manifest-pinned version."""

    exit_code = 2


@dataclass(frozen=True)
class RetentionPolicy:
    """What to keep. Everything else older than the kept versions is expired.

    ``min_age_s`` (env ``OMNI_RETENTION_MIN_AGE_S``, default one hour): a version
    superseded less than this long ago is kept, since a query that started on it as
    the latest version (an open Spark or Trino query) may still be reading its files.
    ``keep_metadata_files``: per physical table, how many previous table metadata files
    survive (Iceberg's metadata log keeps at most ``write.metadata.previous-versions-max``).
    """

    keep_last: int
    keep_tagged: bool = True
    keep_pinned_by_manifests: bool = True
    min_age_s: float = field(default_factory=lambda: float(settings.value(MIN_AGE_ENV)))
    keep_metadata_files: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.keep_last, int) or self.keep_last < 1:
            raise RetentionError(f"keep_last must be a whole number >= 1 (got {self.keep_last!r}): the latest "
                                 "version is always kept")
        if self.min_age_s < 0 or self.keep_metadata_files < 1:
            raise RetentionError(f"min_age_s must be >= 0 and keep_metadata_files >= 1 "
                                 f"(got {self.min_age_s}, {self.keep_metadata_files})")


@dataclass
class VersionVerdict:
    version: int
    operation: str
    committed_ms: int
    keep: bool
    reasons: list[str] = field(default_factory=list)


@dataclass
class RetentionPlan:
    """What :func:`apply_retention` would do, decided from one logical version."""

    logical_table: str
    version: int
    policy: dict[str, Any]
    versions: list[VersionVerdict] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    #: physical table -> snapshots that no kept version pins (as of planning)
    snapshots: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def expire(self) -> list[int]:
        return [v.version for v in self.versions if not v.keep]

    @property
    def kept(self) -> list[int]:
        return [v.version for v in self.versions if v.keep]

    @property
    def empty(self) -> bool:
        return not self.expire and not any(s["expire"] for s in self.snapshots.values())

    def to_dict(self) -> dict[str, Any]:
        return {"logical_table": self.logical_table, "version": self.version, "policy": self.policy,
                "expire_versions": self.expire, "keep_versions": self.kept,
                "versions": [asdict(v) for v in self.versions], "manifests": self.manifests,
                "refusals": self.refusals, "snapshots": self.snapshots}

    def describe(self) -> str:
        lines = [f"retention plan for {self.logical_table} at version {self.version} "
                 f"(keep last {self.policy['keep_last']}, min age {self.policy['min_age_s']:.0f}s):"]
        for refusal in self.refusals:
            lines.append(f"  REFUSED: {refusal}")
        lines.append(f"  expire {len(self.expire)} version(s){': ' + _ranges(self.expire) if self.expire else ''}")
        lines.append(f"  keep {len(self.kept)} version(s): {_ranges(self.kept)}")
        for v in self.versions:
            special = [r for r in v.reasons if not r.startswith("among the last")]
            if v.keep and special:
                lines.append(f"    v{v.version} ({v.operation}): {'; '.join(special)}")
        for ident, s in sorted(self.snapshots.items()):
            lines.append(f"  {ident}: expire {s['expire']} of {s['total']} snapshot(s)")
        if self.empty:
            lines.append("  nothing to expire")
        return "\n".join(lines)


@dataclass
class RetentionReport:
    """What :func:`apply_retention` did."""

    logical_table: str
    plan: RetentionPlan
    logical_version: int | None = None  # the ``expire`` commit, None when no version was expired
    dry_run: bool = False
    versions_expired: list[int] = field(default_factory=list)
    snapshots_expired: int = 0
    files_deleted: dict[str, int] = field(default_factory=lambda: {"data": 0, "manifests": 0, "metadata": 0})
    bytes_freed: dict[str, int] = field(default_factory=lambda: {"data": 0, "manifests": 0, "metadata": 0})
    replans: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def total_bytes_freed(self) -> int:
        return sum(self.bytes_freed.values())

    def to_dict(self) -> dict[str, Any]:
        return {"logical_table": self.logical_table, "dry_run": self.dry_run, "plan": self.plan.to_dict(),
                "logical_version": self.logical_version, "versions_expired": self.versions_expired,
                "snapshots_expired": self.snapshots_expired, "files_deleted": dict(self.files_deleted),
                "bytes_freed": dict(self.bytes_freed), "total_bytes_freed": self.total_bytes_freed,
                "replans": self.replans, "errors": self.errors}

    def describe(self) -> str:
        if self.dry_run:
            return self.plan.describe() + "\n(dry run: nothing changed)"
        head = (f"{self.logical_table}: expired {len(self.versions_expired)} version(s)"
                + (f" ({_ranges(self.versions_expired)}) -> version {self.logical_version}"
                   if self.versions_expired else "")
                + f", {self.snapshots_expired} snapshot(s)")
        freed = ", ".join(f"{k} {self.files_deleted[k]} file(s) / {_size(self.bytes_freed[k])}"
                          for k in ("data", "manifests", "metadata"))
        lines = [head, f"  freed {_size(self.total_bytes_freed)}: {freed}"]
        lines += [f"  warning: {e}" for e in self.errors]
        return "\n".join(lines)


# ---- prepare ------------------------------------------------------------------------------------
def plan_retention(store: FamilyStore, name: str, policy: RetentionPolicy, *, now_ms: int | None = None
                   ) -> RetentionPlan:
    """Decide, from the latest logical version of ``name``, which versions stay and which expire."""
    ns, table = split_qualified(name)
    state = store.load(ns, table)  # names the table (and lists known ones) when it is missing
    view = store.views.load_view(ns, table)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    versions = _versions(view.metadata)
    pins = [p for p in list_pins(store.catalog, view.metadata["location"])
            if p.logical_table == state.table.identifier]
    plan = RetentionPlan(state.table.identifier, state.version, asdict(policy),
                         manifests=[{"path": p.path, "version": p.logical_version, "exists": p.alive()}
                                    for p in pins])
    reasons = _keep_reasons(versions, policy, [p for p in pins if p.alive()], now_ms, _version_views(store, ns, table))
    for v in versions:
        why = reasons.get(v["version-id"], [])
        plan.versions.append(VersionVerdict(v["version-id"], v["summary"].get(SUMMARY_OPERATION, ""),
                                            v["timestamp-ms"], bool(why), why))
    if not policy.keep_pinned_by_manifests:
        expiring = set(plan.expire)
        for p in pins:
            if p.logical_version in expiring and p.alive():
                plan.refusals.append(
                    f"version {p.logical_version} of {state.table.identifier} is pinned by the export manifest "
                    f"{p.path}; keep it (keep_pinned_by_manifests, the default) or delete that export first")
    kept_states = [store._read_family(v["summary"][SUMMARY_FAMILY]) for v in versions
                   if v["version-id"] in reasons]
    for ident, pinned in _pins_by_table(kept_states).items():
        try:
            ice = store.catalog.load_table(ident)
        except Exception:  # noqa: BLE001 - a table dropped from the family: nothing of ours to expire
            continue
        doomed = _expirable(ice, pinned, now_ms)
        plan.snapshots[ident] = {"total": len(ice.metadata.snapshots), "expire": len(doomed)}
    return plan


def _versions(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((v for v in metadata["versions"] if SUMMARY_FAMILY in v.get("summary", {})),
                  key=lambda v: v["version-id"])


def _version_views(store: FamilyStore, ns: str, table: str) -> dict[int, list[str]]:
    """version -> the pinned version views (``omni pin``) reading it; tag views follow their tag instead."""
    from catalog_ext.pinned_views import pinned_views

    out: dict[int, list[str]] = {}
    for view in pinned_views(store, ns, table):
        if view.tag is None:
            out.setdefault(view.version, []).append(view.name)
    return out


def _keep_reasons(versions: list[dict[str, Any]], policy: RetentionPolicy, pins: list[Pin],
                  now_ms: int, version_views: dict[int, list[str]] | None = None) -> dict[int, list[str]]:
    """version -> why it is kept (absent: expired)."""
    out: dict[int, list[str]] = {}
    ids = [v["version-id"] for v in versions]
    for vid, names in (version_views or {}).items():
        if vid in ids:
            out.setdefault(vid, []).append(f"read by pinned view {', '.join(names)} (omni pin --drop to release)")
    for vid in ids[-policy.keep_last:]:
        out.setdefault(vid, []).append(f"among the last {policy.keep_last}")
    if policy.keep_tagged:
        summaries = [v["summary"] for v in versions]
        for label, vid in tags_from_summaries(summaries).items():
            if vid in ids:
                out.setdefault(vid, []).append(f"tagged {label!r}")
        # the newest commit recording each label carries the tag: without it the tag is gone
        newest: dict[str, int] = {}
        for v in versions:
            if SUMMARY_TAG in v["summary"] and SUMMARY_TAG_VERSION in v["summary"]:
                newest[v["summary"][SUMMARY_TAG]] = v["version-id"]
        for label, vid in newest.items():
            out.setdefault(vid, []).append(f"records tag {label!r}")
    if policy.keep_pinned_by_manifests:
        for p in pins:
            if p.logical_version in ids:
                out.setdefault(p.logical_version, []).append(f"pinned by export manifest {p.path}")
    min_age_ms = policy.min_age_s * 1000
    for v, after in zip(versions, versions[1:]):
        age_ms = now_ms - after["timestamp-ms"]
        if v["version-id"] not in out and age_ms < min_age_ms:
            out[v["version-id"]] = [f"superseded {age_ms / 1000:.0f}s ago, within the {policy.min_age_s:.0f}s "
                                    "minimum age (a query may still read it)"]
    return out


def _pins_by_table(states: Iterable[FamilyState]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for s in states:
        for t in s.tables:
            pins = out.setdefault(t.identifier, set())
            if t.snapshot_id is not None:
                pins.add(t.snapshot_id)
    return out


def _protected(table: Any, pinned: set[int]) -> set[int]:
    """Snapshots that must survive: pins, every ref head, and each other branch's own snapshots.

    A staging branch (a live or resumable run) needs the snapshots it wrote; its walk
    stops at the first pinned snapshot (where such a branch starts) - a stale branch that
    started elsewhere protects more than it needs until ``clean_leftovers`` drops it.
    """
    keep = set(pinned)
    for name, ref in table.metadata.refs.items():
        keep.add(ref.snapshot_id)
        if name == "main":
            continue
        snap = table.snapshot_by_id(ref.snapshot_id)
        while snap is not None:
            keep.add(snap.snapshot_id)
            if snap.snapshot_id in pinned or snap.parent_snapshot_id is None:
                break
            snap = table.snapshot_by_id(snap.parent_snapshot_id)
    return keep


def _expirable(table: Any, pinned: set[int], before_ms: int) -> list[int]:
    """Snapshots older than ``before_ms`` that nothing protects (a newer one is a concurrent writer's)."""
    keep = _protected(table, pinned)
    return sorted(s.snapshot_id for s in table.metadata.snapshots
                  if s.snapshot_id not in keep and s.timestamp_ms < before_ms)


# ---- commit + execute ----------------------------------------------------------------------------
class _Replan(Exception):
    """The state changed under the plan in a way that matters (a new tag or manifest pin)."""


def apply_retention(store: FamilyStore, name: str, policy: RetentionPolicy, *, dry_run: bool = False,
                    progress: bool | None = None, command: str = "") -> RetentionReport:
    """Plan and run retention on ``name``; see the module docstring. Returns what was done.

    Raises :class:`RetentionError` when the policy would expire a manifest-pinned version,
    and :class:`~catalog_ext.errors.CommitConflictError` when concurrent tags or exports
    keep invalidating the plan.
    """
    replans = 0
    while True:
        plan = plan_retention(store, name, policy)
        if plan.refusals:
            raise RetentionError(f"retention of {plan.logical_table} refused: " + " ".join(plan.refusals))
        report = RetentionReport(plan.logical_table, plan, dry_run=dry_run, replans=replans)
        if dry_run:
            return report
        try:
            _execute(store, plan, policy, report, progress, command)
            return report
        except _Replan as e:
            replans += 1
            if replans >= MAX_REPLANS:
                raise CommitConflictError(
                    f"retention of {plan.logical_table} re-planned {replans} times ({e}); tags or exports keep "
                    "arriving - retry later") from e


def _execute(store: FamilyStore, plan: RetentionPlan, policy: RetentionPolicy, report: RetentionReport,
             progress: bool | None, command: str) -> None:
    ns, table = split_qualified(plan.logical_table)
    started_s = time.time()
    fence_s = started_s - UNFENCED_GRACE_S
    doomed = set(plan.expire)
    removed: dict[str, list[str]] = {}  # the family documents the winning attempt dropped

    before_swap = store.views.load_view(ns, table).metadata_location
    if doomed:
        def drop_versions(metadata: dict[str, Any]) -> dict[str, Any]:
            # the base of this attempt may hold tags or pins the plan did not see
            versions = _versions(metadata)
            location = metadata["location"]
            pins = [p for p in list_pins(store.catalog, location) if p.alive()]
            still = _keep_reasons(versions, policy, pins, int(time.time() * 1000), _version_views(store, ns, table))
            pinned = {p.logical_version for p in pins}  # with keep_pinned_by_manifests off: re-plan to refuse
            conflict = sorted(v for v in doomed if v in pinned or (v in still and not any(
                r.startswith("among the last") or r.startswith("superseded") for r in still[v])))
            if conflict:
                raise _Replan(f"version(s) {_ranges(conflict)} became tagged or pinned (by a manifest or a view) "
                              "meanwhile")
            out = dict(metadata)
            gone = [v for v in metadata["versions"] if v["version-id"] in doomed]
            out["versions"] = [v for v in metadata["versions"] if v["version-id"] not in doomed]
            out["version-log"] = [e for e in metadata["version-log"] if e["version-id"] not in doomed]
            used = {v["schema-id"] for v in out["versions"]}
            out["schemas"] = [s for s in metadata["schemas"] if s["schema-id"] in used]
            removed["documents"] = [v["summary"][SUMMARY_FAMILY] for v in gone
                                    if SUMMARY_FAMILY in v.get("summary", {})]
            return out

        summary = {"omni.expired-versions": _ranges(sorted(doomed)), "omni.expired-count": str(len(doomed)),
                   "omni.keep-last": str(policy.keep_last)}
        new_state = store.commit(ns, table, lambda _latest: (), operation=OPERATION,
                                 command=command or f"expire {plan.logical_table} --keep-last {policy.keep_last}",
                                 summary=lambda _latest: summary, view_edit=drop_versions)
        report.logical_version = new_state.version
        report.versions_expired = sorted(doomed)

    view = store.views.load_view(ns, table)
    if doomed:
        # every file written before this run's swap that the new metadata does not name is
        # garbage: a writer that wrote it on the old metadata can no longer win its own swap.
        # "Before" is read off the storage's own clock - the mtime of the family document
        # this run wrote just before swapping - never off ours (a shared filesystem or an
        # object store may run ahead) nor a fixed slack (a fast commit would sweep nothing).
        written = _document_mtime(view.metadata, report.logical_version)
        fence_s = written if written is not None else started_s - 1.0
    remaining = _versions(view.metadata)
    documents = {v["summary"][SUMMARY_FAMILY] for v in remaining}
    from omni_iceberg.ui.progress import progress_bar

    states = [store._read_family(d) for d in sorted(documents)]
    pins_by_table = _pins_by_table(states)
    bar = progress_bar(progress, f"expire {plan.logical_table}", "table", total=len(pins_by_table) + 1)
    try:
        _sweep_view_files(store, view, documents, removed.get("documents", []), fence_s, report, before_swap)
        for pin in list_pins(store.catalog, view.metadata["location"]):
            if not pin.alive():
                remove_pin(store.catalog, pin)  # its manifest is gone: it pins nothing any more
        if bar is not None:
            bar.update(1)
        index = _index_of(store, states)
        for ident, pinned in sorted(pins_by_table.items()):
            try:
                _expire_table(store.catalog, ident, pinned, started_s, fence_s, policy, report, index)
            except Exception as e:  # noqa: BLE001 - one table's failure leaves it for the next run
                report.errors.append(f"{ident}: {type(e).__name__}: {e}")
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _document_mtime(metadata: dict[str, Any], version: int) -> float | None:
    """Storage mtime of the family document of ``version`` (``None`` when it cannot be read)."""
    document = next((v["summary"].get(SUMMARY_FAMILY) for v in metadata["versions"]
                     if v["version-id"] == version), None)
    if not document:
        return None
    try:
        filesystem, path = _filesystem(document)
        stamped = filesystem.get_file_info(path).mtime
    except Exception:  # noqa: BLE001 - fall back to our clock
        return None
    return stamped.timestamp() if stamped is not None else None


def _filesystem(uri: str) -> tuple[Any, str]:
    """The pyarrow filesystem and in-filesystem path of a warehouse URI (one seam for listing and stat)."""
    from pyarrow import fs as pafs

    return pafs.FileSystem.from_uri(uri)


def _list(uri_root: str) -> dict[str, tuple[int, float]]:
    """uri -> (size, mtime seconds) of the files under ``uri_root`` (not recursive)."""
    from pyarrow import fs as pafs

    filesystem, root = _filesystem(uri_root)
    infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=False, allow_not_found=True))
    prefix = uri_root[: len(uri_root) - len(root)] if uri_root.endswith(root) else ""
    return {prefix + i.path: (i.size or 0, i.mtime.timestamp() if i.mtime is not None else 0.0)
            for i in infos if i.type == pafs.FileType.File}


def _same(a: str, b: str) -> bool:
    """Paths compare equal whether written as ``file:///x`` or ``/x``."""
    return a == b or a.removeprefix("file://") == b.removeprefix("file://")


def _delete(catalog: Any, files: dict[str, int], kind: str, report: RetentionReport) -> None:
    if not files:
        return
    report.files_deleted[kind] += iceberg_io.delete_files(catalog, files)
    report.bytes_freed[kind] += sum(files.values())


def _sweep_view_files(store: FamilyStore, view: Any, documents: set[str], dropped: list[str], fence_s: float,
                      report: RetentionReport, before_swap: str) -> None:
    """Family documents no remaining version names, and view metadata files the catalog moved past."""
    location = view.metadata["location"].rstrip("/")
    keep_docs = {d.removeprefix("file://") for d in documents}
    doomed: dict[str, int] = {}
    listed = _list(f"{location}/omni")
    for uri, (size, mtime) in listed.items():
        name = uri.rsplit("/", 1)[-1]
        if name.startswith("family-") and uri.removeprefix("file://") not in keep_docs and mtime < fence_s:
            doomed[uri] = size
    sizes = {u.removeprefix("file://"): size for u, (size, _mtime) in listed.items()}
    for d in dropped:  # named by the versions this run removed, wherever they were written
        if d.removeprefix("file://") not in {u.removeprefix("file://") for u in doomed}:
            doomed[d] = sizes.get(d.removeprefix("file://"), 0)
    _delete(store.catalog, doomed, "metadata", report)
    # segments (catalog_ext.family_document) no kept document names: a writer that will name
    # one it does not find in its base rewrites it, which moves its mtime past the fence
    named = {n for d in documents for n in store.document_segments(d)}
    segments = {uri: size for uri, (size, mtime) in _list(f"{location}/omni/{SEGMENT_FOLDER}").items()
                if uri.rsplit("/", 1)[-1] not in named and mtime < fence_s}
    _delete(store.catalog, segments, "metadata", report)
    # the current file and the one before it (a reader may have just read the old pointer)
    current = store.views.load_view(*view.identifier).metadata_location
    keep = {p.removeprefix("file://") for p in (current, view.metadata_location, before_swap)}
    stale = {uri: size for uri, (size, mtime) in _list(f"{location}/metadata").items()
             if uri.endswith(".metadata.json") and uri.removeprefix("file://") not in keep and mtime < fence_s}
    _delete(store.catalog, stale, "metadata", report)
    _sweep_pinned_view_files(store, view.identifier, fence_s, report)


def _sweep_pinned_view_files(store: FamilyStore, identifier: tuple[str, str], fence_s: float,
                             report: RetentionReport) -> None:
    """Metadata files a pinned view (a tag's, or ``omni pin``'s) moved past: one per tag move."""
    from catalog_ext.pinned_views import pinned_views
    from catalog_ext.views import NoSuchViewError

    ns, table = identifier
    for pinned in pinned_views(store, ns, table):
        try:
            view = store.views.load_view(*pinned.name.rsplit(".", 1))
        except NoSuchViewError:
            continue  # dropped meanwhile
        current = view.metadata_location.removeprefix("file://")
        stale = {uri: size for uri, (size, mtime) in _list(f"{view.metadata['location'].rstrip('/')}/metadata").items()
                 if uri.endswith(".metadata.json") and uri.removeprefix("file://") != current and mtime < fence_s}
        _delete(store.catalog, stale, "metadata", report)


def _index_of(store: Any, states: list[Any]) -> Any:
    """The table's id index when one is configured (the cut records are pruned with it), else None."""
    if not states:
        return None
    try:
        return store.open_index(states[-1])
    except Exception:  # noqa: BLE001 - without it the records are only not pruned
        return None


def _expire_table(catalog: Any, identifier: str, pinned: set[int], started_s: float, fence_s: float,
                  policy: RetentionPolicy, report: RetentionReport, index: Any = None) -> None:
    """Expire one physical table's unpinned snapshots, record the cut runs, delete what only they reached."""
    from omni_iceberg.index.visibility import EXPIRED_RUNS_PROPERTY

    result: dict[str, Any] = {}

    def expire(ice: Any) -> None:
        ids = _expirable(ice, pinned, int(started_s * 1000))
        result.clear()
        if not ids:
            return
        record = _cut_record(ice, set(ids), index)
        # the snapshot objects themselves: committing updates ``ice`` in place
        result["snapshots"] = [ice.snapshot_by_id(i) for i in ids]
        result["ids"] = ids
        tx = ice.transaction()
        if record != ice.metadata.properties.get(EXPIRED_RUNS_PROPERTY, "{}"):
            tx.set_properties({EXPIRED_RUNS_PROPERTY: record})
        _GuardedExpire(tx).by_ids(ids).commit()
        tx.commit_transaction()

    iceberg_io.with_table_retry(catalog, identifier, expire)
    ice = catalog.load_table(identifier)
    live = _files_of(ice.io, ice.metadata.snapshots)
    if result:
        report.snapshots_expired += len(result["ids"])
        gone = _files_of(ice.io, result["snapshots"])
        for kind in ("data", "manifests"):
            _delete(catalog, {p: n for p, n in gone[kind].items() if p not in live[kind]}, kind, report)
    # manifests and manifest lists of snapshots expired by a run that died before deleting them
    # (its data files are found by the orphan sweep of ``omni maintain``): same grace as that sweep,
    # since a writer's manifests exist a moment before the snapshot that names them
    grace_s = float(settings.value("OMNI_ORPHAN_GRACE_S"))
    listed = {p.removeprefix("file://") for p in live["manifests"]}
    orphans = {uri: size for uri, (size, mtime) in _list(f"{ice.location().rstrip('/')}/metadata").items()
               if uri.endswith(".avro") and uri.removeprefix("file://") not in listed
               and mtime < min(fence_s, time.time() - grace_s)}
    _delete(catalog, orphans, "manifests", report)
    # table metadata files: the current one and the newest entries of its metadata log stay
    keep = {ice.metadata_location.removeprefix("file://")}
    keep |= {e.metadata_file.removeprefix("file://") for e in ice.metadata.metadata_log[-policy.keep_metadata_files:]}
    stale = {uri: size for uri, (size, mtime) in _list(f"{ice.location().rstrip('/')}/metadata").items()
             if uri.endswith(".metadata.json") and uri.removeprefix("file://") not in keep and mtime < fence_s}
    _delete(catalog, stale, "metadata", report)


def _cut_record(table: Any, doomed: set[int], index: Any = None) -> str:
    """The new ``omni.index.expired-runs`` value once ``doomed`` snapshots are gone.

    Each surviving snapshot whose parent is doomed becomes a cut: it gets the runs of
    its whole ancestry below it (through earlier cuts), pruned with the index to the
    runs that still matter (``omni_iceberg.index.maintenance.runs_that_matter``) so the record follows the live
    data, not the history. Records of doomed snapshots go.
    """
    from omni_iceberg.index.maintenance import runs_that_matter
    from omni_iceberg.index.visibility import ancestry_runs, expired_runs

    records = expired_runs(table)
    out = {sid: r for sid, r in records.items() if sid not in doomed and table.snapshot_by_id(sid) is not None}
    for snap in table.metadata.snapshots:
        if snap.snapshot_id in doomed or snap.parent_snapshot_id not in doomed:
            continue
        runs, problems = ancestry_runs(table, snap.parent_snapshot_id, records)
        runs = list(dict.fromkeys(runs))
        if index is not None and not problems:
            runs = runs_that_matter(index, table, snap.snapshot_id, runs)
        # problems travel with the runs: an ancestry that was already incomplete stays reported
        out[snap.snapshot_id] = {"runs": runs, "problems": problems}
    return json.dumps({str(k): {"runs": v["runs"], **({"problems": v["problems"]} if v["problems"] else {})}
                       for k, v in sorted(out.items())}, separators=(",", ":"), sort_keys=True)


def _guarded_expire_class():
    from pyiceberg.table.update import AssertRefSnapshotId
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    class GuardedExpire(ExpireSnapshots):
        """Expire, but only if no ref moved since the ids were chosen (else: reload and choose again).

        pyiceberg applies a commit to the catalog's current metadata with only the
        requirements given; without these, a branch that moved meanwhile could lose the
        snapshots it now needs.
        """

        def _commit(self):
            updates, requirements = super()._commit()
            refs = self._transaction.table_metadata.refs
            guard = tuple(AssertRefSnapshotId(ref=name, snapshot_id=ref.snapshot_id) for name, ref in refs.items())
            return updates, tuple(requirements) + guard

    return GuardedExpire


def _GuardedExpire(tx: Any) -> Any:  # noqa: N802 - reads as the class it builds lazily
    return _guarded_expire_class()(tx)


def _files_of(io: Any, snapshots: Iterable[Any]) -> dict[str, dict[str, int]]:
    """Data files (live entries), manifests and manifest lists the given snapshots reach, with sizes."""
    out: dict[str, dict[str, int]] = {"data": {}, "manifests": {}}
    seen: set[str] = set()
    for snap in snapshots:
        if snap.manifest_list:
            out["manifests"][snap.manifest_list] = iceberg_io.file_length(io, snap.manifest_list)
        for manifest in snap.manifests(io):
            out["manifests"][manifest.manifest_path] = manifest.manifest_length
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                out["data"][entry.data_file.file_path] = entry.data_file.file_size_in_bytes
    return out


# ---- text helpers --------------------------------------------------------------------------------
def _ranges(ids: list[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1-3, 7, 9-10'."""
    parts: list[str] = []
    for i in sorted(ids):
        if parts and parts[-1][1] == i - 1:
            parts[-1][1] = i
        else:
            parts.append([i, i])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in parts)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


__all__ = ["RetentionPolicy", "RetentionPlan", "RetentionReport", "RetentionError", "VersionVerdict",
           "plan_retention", "apply_retention"]
