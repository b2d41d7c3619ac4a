"""Leftovers of runs that never committed: stale ``omni-stage-*`` branches and their files.

Every writer stages on a private branch ``omni-stage-<run id>`` (see
:class:`catalog_ext.physical.StagedWrite`). A run that is killed (``kill -9``, OOM, a lost
node) leaves that branch behind, and with it data files nothing will ever read: the
table grows by the size of the lost work. This module decides which branches are stale
and removes them with the files they alone referenced.

A branch is judged against the logical table's current pin ``P`` of its physical table
and the age of its head snapshot (the time of its last checkpoint):

- **empty** - the head is not a snapshot of the run (it carries no ``omni.run-id`` /
  ``omni.submit-id`` of the branch's run): nothing was staged yet. It holds no files, so
  it is only dropped after the TTL.
- **committed** - the head is ``P`` or an ancestor of ``P``: the run committed but did not
  get to drop its branch. The branch is dropped; its files are live and kept.
- **live** - the head is younger than the grace period: a run may still be writing.
  Kept. The grace period must exceed the longest pause between two checkpoints of a
  live run (``OMNI_STAGE_GRACE_S``, default 2 hours; ingest branches, which exist only
  while their commit runs, ``OMNI_STAGE_INGEST_GRACE_S``, default 10 minutes).
- **resumable** - a backfill branch (run ids ``bf-``/``rt-``: a rerun of the same plan
  has the same id) that starts at ``P``: rerunning the plan resumes from it, so it is
  kept until the TTL (``OMNI_STAGE_TTL_S``, default 7 days).
- otherwise **stale**: an ingest or compaction branch (never resumable: each run has a
  fresh id), a backfill branch the table moved past (a rerun would not start from it),
  or any branch older than the TTL. It is removed: branch dropped, the snapshots only
  it reached expired, and the data files those snapshots added deleted.

Only metadata is read to classify (refs and snapshot parents); manifests are read only
for branches that are removed. Data files written by a run killed *before* its first
checkpoint are in no metadata at all; :func:`sweep_orphan_files` (maintenance) finds
those by listing storage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from catalog_ext import iceberg_io, settings
from catalog_ext.family import FamilyState

STAGING_BRANCH_PREFIX = "omni-stage-"
#: backfill run ids are a fingerprint of the plan: a rerun of the same plan finds its branch
RESUMABLE_RUN_PREFIXES = ("bf-", "rt-")


def _env_seconds(name: str) -> float:
    return float(settings.value(name))


@dataclass(frozen=True)
class StagingPolicy:
    """When a staging branch counts as abandoned."""

    grace_s: float = field(default_factory=lambda: _env_seconds("OMNI_STAGE_GRACE_S"))
    #: an ingest stages its branch only right before its logical commit, so its branch
    #: lives seconds; a shorter grace lets the next submit clean up after a killed one
    ingest_grace_s: float = field(default_factory=lambda: _env_seconds("OMNI_STAGE_INGEST_GRACE_S"))
    ttl_s: float = field(default_factory=lambda: _env_seconds("OMNI_STAGE_TTL_S"))


@dataclass
class BranchVerdict:
    """What the sweep decided for one staging branch, and why."""

    table: str
    branch: str
    verdict: str  # committed | empty | live | resumable | stale
    reason: str
    age_s: float
    removed: bool = False
    files_deleted: int = 0
    bytes_freed: int = 0
    error: str = ""


@dataclass
class SweepReport:
    branches: list[BranchVerdict] = field(default_factory=list)
    orphan_files_deleted: int = 0
    orphan_bytes_freed: int = 0

    @property
    def removed(self) -> list[BranchVerdict]:
        return [b for b in self.branches if b.removed]

    def describe(self) -> str:
        if not self.branches and not self.orphan_files_deleted:
            return "no staging leftovers"
        lines = [f"{b.table} {b.branch}: {b.verdict} ({b.reason})"
                 + (f"; removed, {b.files_deleted} files / {b.bytes_freed} bytes deleted" if b.removed else "")
                 + (f"; cleanup failed: {b.error}" if b.error else "")
                 for b in self.branches]
        if self.orphan_files_deleted:
            lines.append(f"orphan data files deleted: {self.orphan_files_deleted} ({self.orphan_bytes_freed} bytes)")
        return "\n".join(lines)


# ---- snapshot ancestry (metadata only) ------------------------------------------------------
def ancestors(table: Any, snapshot_id: int | None) -> list[int]:
    """``snapshot_id`` and its parents, newest first (stops where expired history begins)."""
    out: list[int] = []
    current = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    while current is not None:
        out.append(current.snapshot_id)
        current = table.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
    return out


def is_ancestor(table: Any, ancestor_id: int, snapshot_id: int | None) -> bool:
    """True when ``ancestor_id`` is ``snapshot_id`` or one of its parents."""
    return ancestor_id in ancestors(table, snapshot_id)


def exclusive_snapshots(table: Any, branch: str, protected_heads: Iterable[int | None]) -> list[int]:
    """Snapshots reachable from ``branch`` but from none of ``protected_heads`` (newest first)."""
    protected: set[int] = set()
    for head in protected_heads:
        protected.update(ancestors(table, head))
    ref = table.metadata.refs.get(branch)
    out = []
    for sid in ancestors(table, ref.snapshot_id if ref else None):
        if sid in protected:
            break
        out.append(sid)
    return out


def _added_files(table: Any, snapshot_ids: list[int]) -> dict[str, int]:
    """Path -> size of the data files the given snapshots added."""
    out: dict[str, int] = {}
    for sid in snapshot_ids:
        for f in iceberg_io.added_data_files(table, sid):
            out[f.file_path] = f.file_size_in_bytes
    return out


# ---- removal ----------------------------------------------------------------------------------
def discard_branch(catalog: Any, identifier: str, branch: str, keep_heads: Iterable[int | None] = (),
                   extra_files: Iterable[Any] = ()) -> tuple[int, int]:
    """Drop ``branch``, expire the snapshots only it reached, delete the data files they added.

    ``keep_heads``: snapshots whose history must survive (pins of any logical version
    are ancestors of the current pin; every other ref is kept automatically).
    ``extra_files``: data files written but never committed to the branch (a failed
    run's pending files). Returns (files deleted, bytes freed).
    """
    table = catalog.load_table(identifier)
    files: dict[str, int] = {f.file_path: f.file_size_in_bytes for f in extra_files}
    doomed: list[int] = []
    if branch in table.metadata.refs:
        others = [r.snapshot_id for name, r in table.metadata.refs.items() if name != branch]
        doomed = exclusive_snapshots(table, branch, list(keep_heads) + others)
        files.update(_added_files(table, doomed))

        def drop(t):
            if branch in t.metadata.refs:
                t.manage_snapshots().remove_branch(branch).commit()

        iceberg_io.with_table_retry(catalog, identifier, drop)
        if doomed:
            def expire(t):
                live = {r.snapshot_id for r in t.metadata.refs.values()}
                ids = [s for s in doomed if t.snapshot_by_id(s) is not None and s not in live]
                if ids:
                    t.maintenance.expire_snapshots().by_ids(ids).commit()

            iceberg_io.with_table_retry(catalog, identifier, expire)
    if not files:
        return 0, 0
    # a file some surviving snapshot still lists (a rebase that was committed, a concurrent
    # branch adopting it) must stay: check against everything the table still references
    table = catalog.load_table(identifier)
    still = iceberg_io.reachable_data_files(table, [s.snapshot_id for s in table.metadata.snapshots])
    gone = {p: n for p, n in files.items() if p not in still}
    deleted = iceberg_io.delete_files(catalog, gone)
    return deleted, sum(gone.values()) if deleted else 0


def classify(table: Any, branch: str, pinned: int | None, policy: StagingPolicy, now_ms: int) -> tuple[str, str, float]:
    """(verdict, reason, age in seconds) of one staging branch; see the module docstring."""
    ref = table.metadata.refs[branch]
    head = table.snapshot_by_id(ref.snapshot_id)
    age_s = max(0.0, (now_ms - head.timestamp_ms) / 1000) if head is not None else float("inf")
    chain = ancestors(table, ref.snapshot_id)
    run_id = branch[len(STAGING_BRANCH_PREFIX):]
    props = head.summary.additional_properties if head is not None and head.summary else {}
    if run_id not in props.values():
        # the head is not the run's own snapshot: the branch was created at its base and
        # nothing was checkpointed yet (or ever). It holds no files; a live run may be
        # about to write to it, and the base's age says nothing about the run's.
        if age_s < policy.ttl_s:
            return "empty", "created at its base, nothing staged on it yet", age_s
        return "stale", f"empty and its base is older than the {policy.ttl_s:.0f}s TTL", age_s
    if pinned is not None and ref.snapshot_id in ancestors(table, pinned):
        return "committed", "its snapshot is pinned by the logical table", age_s
    grace = min(policy.grace_s, policy.ingest_grace_s) if props.get("omni.operation") == "ingest" else policy.grace_s
    if age_s < grace:
        return "live", f"last write {age_s:.0f}s ago, within the {grace:.0f}s grace period", age_s
    resumable = run_id.startswith(RESUMABLE_RUN_PREFIXES) and pinned is not None and pinned in chain
    if resumable and age_s < policy.ttl_s:
        return "resumable", "starts at the pinned snapshot: rerunning the same backfill resumes it", age_s
    if resumable:
        return "stale", f"resumable but older than the {policy.ttl_s:.0f}s TTL", age_s
    if run_id.startswith(RESUMABLE_RUN_PREFIXES):
        return "stale", "superseded: the table moved past the snapshot it started from", age_s
    return "stale", "abandoned: an ingest or compaction run that never committed", age_s


def sweep_stale_branches(catalog: Any, state: FamilyState, *, table_keys: Iterable[str] | None = None,
                         policy: StagingPolicy | None = None, dry_run: bool = False,
                         now_ms: int | None = None) -> SweepReport:
    """Remove the stale staging branches of a family's physical tables (default: all of them).

    Cheap when there is nothing to do (one table load each: refs are in the metadata).
    Best effort per branch: a failure is recorded in the report and the rest goes on,
    since cleanup must never be the reason a submit or backfill fails.
    """
    policy = policy or StagingPolicy()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    report = SweepReport()
    tables = [state.physical_table(k) for k in table_keys] if table_keys is not None else list(state.tables)
    for t in tables:
        ice = catalog.load_table(t.identifier)
        for branch in sorted(b for b in ice.metadata.refs if b.startswith(STAGING_BRANCH_PREFIX)):
            verdict, reason, age = classify(ice, branch, t.snapshot_id, policy, now_ms)
            v = BranchVerdict(t.identifier, branch, verdict, reason, age)
            report.branches.append(v)
            if dry_run or verdict not in ("committed", "stale"):
                continue
            try:
                if verdict == "committed":
                    iceberg_io.with_table_retry(
                        catalog, t.identifier,
                        lambda x, b=branch: x.manage_snapshots().remove_branch(b).commit() if b in x.metadata.refs
                        else None)
                else:
                    v.files_deleted, v.bytes_freed = discard_branch(catalog, t.identifier, branch, [t.snapshot_id])
                v.removed = True
            except Exception as e:  # noqa: BLE001 - recorded; see docstring
                v.error = f"{type(e).__name__}: {e}"
    return report


def orphan_grace_s(given: float | None = None) -> float:
    """The orphan sweep's grace period: ``given``, else ``OMNI_ORPHAN_GRACE_S`` (default 3 days)."""
    return _env_seconds("OMNI_ORPHAN_GRACE_S") if given is None else given


def sweep_orphan_files(catalog: Any, state: FamilyState, *, older_than_s: float | None = None,
                       dry_run: bool = False, now_s: float | None = None) -> SweepReport:
    """Delete data files under each physical table's ``data/`` that no snapshot references.

    These are files of a run killed before its first checkpoint. A file younger than
    ``older_than_s`` (``OMNI_ORPHAN_GRACE_S``, default 3 days, as Iceberg's own
    remove-orphan-files) may belong to a live run that has not committed yet, so it is
    kept. Reads every manifest of every snapshot and lists storage: maintenance only.
    """
    from pyarrow import fs as pafs

    grace = orphan_grace_s(older_than_s)
    now_s = time.time() if now_s is None else now_s
    report = SweepReport()
    for t in state.tables:
        ice = catalog.load_table(t.identifier)
        referenced = iceberg_io.reachable_data_files(ice, [s.snapshot_id for s in ice.metadata.snapshots])
        data_root = f"{ice.location().rstrip('/')}/data"
        filesystem, root = pafs.FileSystem.from_uri(data_root)
        try:
            infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            continue
        prefix = data_root[: len(data_root) - len(root)] if data_root.endswith(root) else ""
        doomed: dict[str, int] = {}
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            uri = prefix + info.path
            if uri in referenced or info.path in referenced:
                continue
            if info.mtime is not None and now_s - info.mtime.timestamp() < grace:
                continue
            doomed[uri] = info.size or 0
        if doomed and not dry_run:
            report.orphan_files_deleted += iceberg_io.delete_files(catalog, doomed)
            report.orphan_bytes_freed += sum(doomed.values())
        elif dry_run:
            report.orphan_files_deleted += len(doomed)
            report.orphan_bytes_freed += sum(doomed.values())
    return report


__all__ = ["STAGING_BRANCH_PREFIX", "StagingPolicy", "SweepReport", "BranchVerdict", "ancestors", "is_ancestor",
           "exclusive_snapshots", "discard_branch", "classify", "sweep_stale_branches", "sweep_orphan_files",
           "orphan_grace_s"]
