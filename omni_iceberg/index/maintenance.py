"""``omni index verify``, ``rebuild`` and ``seal``: the index is derived state.

``rebuild`` indexes every data-changing snapshot in the history of each physical
table's pinned snapshot, one run at a time (the run named in the snapshot summary, so
its entries become visible exactly where that run's rows are). It is resumable: a run
already complete is skipped, and inside an unfinished run the files already indexed
are skipped. It then sweeps what ``verify`` calls dangling: the entries and records of
dead runs, and entries of no file (one pass over the entries). ``fresh=True`` drops the
index first (use it when ``verify`` finds stale entries: a complete run is otherwise
trusted).

``verify`` compares the index with the tables at one logical version:

* missing - a row in a pinned snapshot that a lookup through the index would not find;
* stale - an entry a lookup would use that points at a row no longer there (a file
  removed without the run that removed it saying so, or another row of the file);
* dangling - entries no version can see: files of dead runs (absent from every pinned
  history, with no staging branch, and silent for longer than the staging grace period
  ``OMNI_STAGE_GRACE_S``: a crashed writer), or entries whose file record is gone;
* pending - entries of runs no version sees yet that may still commit or be resumed (a
  run in progress, or one that stopped within the grace period): invisible, not a fault,
  and swept as dangling once the grace period is over. A writer that loses a race
  withdraws its own entries (:mod:`omni_iceberg.index.staged`), so a race leaves neither.

``seal`` (:func:`seal_if_due`) merges the LMDB backend's unsealed entries into the sorted
segment that bulk lookups search (see :mod:`omni_iceberg.index.sealed`); ``maintain``
runs it when due, and ``rebuild`` at its end.

Entries of runs that retention left out of an expiry record (they owned no live file
any more, see :func:`runs_that_matter`) are invisible too, but by design: they are
counted as ``expired`` (reclaimable by ``rebuild --fresh``), not as a fault.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from catalog_ext import settings
from catalog_ext.family import FamilyState
from catalog_ext.iceberg_io import snapshot_data_changes, snapshots_between
from catalog_ext.physical import file_batch
from omni_iceberg.index import visibility
from omni_iceberg.index.backend import FILE_PREFIX, FileRecord, RunRecord
from omni_iceberg.index.core import IdIndex, run_key
from omni_iceberg.index.keys import file_key, id_key, id_of

#: set in a run's record when retention drops it from an expiry record (see the module docstring)
EXPIRED_MARK = "expired-at-snapshot"

EXAMPLES = 5
#: a seal is due when the unsealed entries reach this many AND this share of the sealed
#: ones. The share makes the segment grow geometrically, so over its life each entry is
#: rewritten a bounded number of times (1 / share + 1, ~5), however large the table grows
SEAL_MIN_ENTRIES = settings.value("OMNI_INDEX_SEAL_MIN_ENTRIES")
SEAL_SHARE = 0.25




@dataclass
class RebuildReport:
    logical_table: str
    version: int
    runs_indexed: int = 0
    runs_skipped: int = 0
    files: int = 0
    rows: int = 0
    dropped_first: bool = False
    #: dead runs whose entries and records were deleted, and the entries deleted in all
    #: (theirs and entries of no file): what ``verify`` called dangling
    runs_swept: int = 0
    entries_swept: int = 0
    #: what sealing the rebuilt entries did (:meth:`LmdbBackend.seal`), None where the backend does not seal
    sealed: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _files_below_cut(table: Any, chain: list[Any]) -> tuple[list[str], list[Any]] | None:
    """(the runs of the cut, the files they stand for) when retention cut the history below ``chain``.

    The snapshots that added the oldest kept snapshot's files are gone, so no snapshot
    names their runs any more; retention recorded those runs, and a reader's history
    includes all of them together (:func:`visibility.ancestry_runs`). The files are
    therefore indexed under one of them - the newest - which makes them visible exactly
    where the cut history is; the others get records with no files, since a reader's
    coverage asks that every run it sees be indexed. Without a record (or with an empty one) they stay unindexed
    and lookups keep falling back to the scan, which ``verify`` reports.
    """
    if not chain:
        return None
    oldest = chain[0]
    parent = oldest.parent_snapshot_id
    if parent is not None and table.snapshot_by_id(parent) is not None:
        return None
    cut = visibility.expired_runs(table).get(oldest.snapshot_id)
    if not cut or not cut["runs"]:
        return None
    own = set()
    if visibility.changes_data(oldest):
        own = {df.file_path for df in snapshot_data_changes(table, oldest.snapshot_id)[0]}
    files = [task.file for task in table.scan(snapshot_id=oldest.snapshot_id).plan_files()
             if task.file.file_path not in own]
    return (list(cut["runs"]), files) if files else None


@dataclass
class InvisibleRuns:
    """Runs with index records that no reader at the version asked about can see (see the module docstring)."""

    dead: list[RunRecord] = field(default_factory=list)  # dangling: rebuild sweeps them
    pending: list[RunRecord] = field(default_factory=list)  # may still commit or resume
    expired: list[RunRecord] = field(default_factory=list)  # left out of an expiry record by retention
    later: list[RunRecord] = field(default_factory=list)  # committed by a later version


def invisible_runs(catalog: Any, state: FamilyState, index: IdIndex,
                   visible: dict[str, frozenset[str]]) -> InvisibleRuns:
    """Sort the index's runs on the tables of ``state`` that ``visible`` (table -> runs) leaves out.

    A run is dead when the latest version does not see it either, no staging branch of it
    is left on its table (a resumable backfill's branch keeps its entries useful), and its
    record was last written longer ago than the staging grace period: a live writer writes
    its record with every file it indexes and right before its commit, so a run silent that
    long is a crashed one - the rule the staging sweep applies to branches.
    """
    from catalog_ext.staging import STAGING_BRANCH_PREFIX, StagingPolicy

    out = InvisibleRuns()
    candidates = [r for r in index.all_runs() if r.table in visible and r.run not in visible[r.table]]
    if not candidates:
        return out
    latest = _latest_visible(catalog, state)
    grace_ms = StagingPolicy().grace_s * 1000
    now = time.time() * 1000
    refs: dict[str, set[str]] = {}
    for run in candidates:
        if run.extra.get(EXPIRED_MARK):
            out.expired.append(run)
            continue
        if latest is not None and run.run in latest.get(run.table, frozenset()):
            out.later.append(run)
            continue
        if run.table not in refs:
            try:
                refs[run.table] = set(catalog.load_table(run.table).metadata.refs)
            except Exception:  # noqa: BLE001 - a table dropped from the catalog: no branch can be left
                refs[run.table] = set()
        young = now - (run.updated_ms or run.started_ms) < grace_ms
        (out.pending if young or f"{STAGING_BRANCH_PREFIX}{run.run}" in refs[run.table] else out.dead).append(run)
    return out


def _latest_visible(catalog: Any, state: FamilyState) -> dict[str, frozenset[str]] | None:
    """Table -> runs visible at the latest version, or None when ``state`` is the latest."""
    from catalog_ext.store import FamilyStore

    latest = FamilyStore(catalog).load(state.table.namespace, state.table.name)
    if latest.version == state.version:
        return None
    return {t.identifier: frozenset(visibility.history(catalog, t.identifier, t.snapshot_id).runs)
            for t in latest.tables if t.snapshot_id is not None}


def _visible_runs(catalog: Any, state: FamilyState) -> dict[str, frozenset[str]]:
    return {t.identifier: frozenset(visibility.history(catalog, t.identifier, t.snapshot_id).runs)
            for t in state.tables if t.snapshot_id is not None}


def _orphans(index: IdIndex, files: dict[bytes, Any], also: set[bytes] = frozenset()) -> list[tuple[bytes, bytes]]:
    """(id key, file key) of every entry whose file has no record, or whose file key is in ``also``.

    ``files`` was read before the pass; a file record written meanwhile (a writer stores it
    before the file's entries, see ``IndexBackend.write``) is looked up again after it, so
    a write in progress is never taken for garbage.
    """
    found = [(rid, fkey) for rid, fkey, *_ in index.backend.scan_entries() if fkey not in files or fkey in also]
    unknown = {fkey for _, fkey in found if fkey not in files}
    if unknown:
        now = {k[len(FILE_PREFIX):] for k in index.backend.get_meta([FILE_PREFIX + k for k in unknown])}
        found = [(rid, fkey) for rid, fkey in found if fkey not in now or fkey in also]
    return found


def sweep(catalog: Any, state: FamilyState, index: IdIndex, report: "RebuildReport") -> None:
    """Delete what ``verify`` calls dangling at the latest version ``state``: dead runs (their
    entries, file records and run records) and entries of no file."""
    dead = invisible_runs(catalog, state, index, _visible_runs(catalog, state)).dead
    files = {k[len(FILE_PREFIX):]: FileRecord.from_bytes(v) for k, v in index.backend.scan_meta(FILE_PREFIX)}
    unreadable: dict[bytes, FileRecord] = {}
    for run in dead:
        records = {k: files[k] for k in map(bytes.fromhex, run.files) if k in files and files[k].run == run.run}
        try:
            io = catalog.load_table(run.table).io
        except Exception:  # noqa: BLE001 - a table dropped from the catalog: its files are read without its io
            io = None
        deleted, left = index.withdraw_files(records, io)
        report.entries_swept += deleted
        unreadable.update({k: records[k] for k in left})
        index.backend.delete_meta([run_key(run.table, run.run)])
        report.runs_swept += 1
    known = {k: v for k, v in files.items() if k not in unreadable}
    doomed = _orphans(index, known, set(unreadable))
    if doomed:
        index.backend.delete_entries(doomed)
        report.entries_swept += len(doomed)
    if unreadable:
        index.backend.delete_meta([FILE_PREFIX + k for k in unreadable])
    if dead or doomed:
        index.forget_caches()


def seal_if_due(index: IdIndex, *, force: bool = False, dry_run: bool = False,
                progress: bool | None = None) -> dict[str, Any] | None:
    """Seal the index when due (see :data:`SEAL_MIN_ENTRIES`) or ``force``; None where the backend does not seal.

    Returns ``{"due", "unsealed", "sealed"}`` plus, when it ran, the seal's report.
    """
    counts = index.backend.sealing()
    if counts is None:
        return None
    unsealed, sealed = counts
    due = unsealed > 0 and (force or unsealed >= max(SEAL_MIN_ENTRIES, SEAL_SHARE * sealed))
    out: dict[str, Any] = {"due": due, "unsealed": unsealed, "sealed": sealed}
    if due and not dry_run:
        out["report"] = index.backend.seal(progress=progress).to_dict()
    return out


def rebuild(catalog: Any, state: FamilyState, index: IdIndex, *, fresh: bool = False,
            progress: bool | None = None) -> RebuildReport:
    """Index every run visible at ``state`` (see module docstring); returns what it did."""
    from omni_iceberg.ui.progress import progress_bar

    report = RebuildReport(state.table.identifier, state.version, dropped_first=fresh)
    if fresh:
        index.backend.drop()
        index.forget_caches()
    plans = []
    for meta in state.tables:
        if meta.snapshot_id is None:
            continue
        table = catalog.load_table(meta.identifier)
        chain = snapshots_between(table, None, meta.snapshot_id)
        runs: dict[str, tuple[list[Any], list[Any]]] = {}
        below = _files_below_cut(table, chain)
        if below is not None:  # every run of the cut gets a (complete) record; one holds the files
            cut_runs, files = below
            for run in cut_runs:
                runs[run] = ([], [])
            runs[cut_runs[-1]] = (files, [])
        for snap in chain:
            if not visibility.changes_data(snap):
                continue
            added, deleted = snapshot_data_changes(table, snap.snapshot_id)
            bucket = runs.setdefault(visibility.run_id_of(snap), ([], []))
            bucket[0].extend(added)
            bucket[1].extend(deleted)
        plans.append((meta.identifier, runs))
    total = sum(len(a) for _, runs in plans for a, _ in runs.values())
    bar = progress_bar(progress, f"index rebuild {state.table.identifier}", "file", total=total)
    try:
        for identifier, runs in plans:
            table = catalog.load_table(identifier)
            for run, (added, deleted) in runs.items():
                writer = index.writer(identifier, run, source="rebuild")
                writer.io = table.io
                if writer.record.complete:
                    report.runs_skipped += 1
                    if bar is not None:
                        bar.update(len(added))
                    continue
                for df in added:
                    report.rows += writer.add_file(df.file_path, batch=file_batch(table, df) or "")
                    report.files += 1
                    if bar is not None:
                        bar.update(1)
                if deleted:
                    writer.retire_files(df.file_path for df in deleted)
                writer.finish()
                report.runs_indexed += 1
    finally:
        if bar is not None:
            bar.close()
    if not fresh:  # a fresh index holds nothing to sweep
        sweep(catalog, state, index, report)
    # a rebuild reads every row anyway: leave its entries sealed, ready for bulk lookups
    report.sealed = seal_if_due(index, force=report.rows > 0 or report.entries_swept > 0, progress=progress)
    return report


@dataclass
class VerifyReport:
    logical_table: str
    version: int
    rows_checked: int = 0
    missing: int = 0
    stale: int = 0
    dangling: int = 0
    #: entries of runs that may still commit or resume: invisible, not a fault (see the module docstring)
    pending: int = 0
    #: entries of runs retention expired (owning no live file): invisible by design
    expired: int = 0
    lagging_tables: dict[str, list[str]] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(
        default_factory=lambda: {"missing": [], "stale": [], "dangling": [], "pending": []})

    @property
    def ok(self) -> bool:
        return not (self.missing or self.stale or self.dangling)

    def _example(self, kind: str, text: str) -> None:
        if len(self.examples[kind]) < EXAMPLES:
            self.examples[kind].append(text)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}

    def text(self) -> str:
        head = (f"index of {self.logical_table} at version {self.version}: {self.rows_checked} rows checked, "
                f"{self.missing} missing, {self.stale} stale, {self.dangling} dangling")
        if self.pending:
            head += f", {self.pending} pending (runs not committed yet, or stopped within the staging grace period)"
        if self.expired:
            head += f" ({self.expired} entries of expired runs, reclaimable with rebuild --fresh)"
        lines = [head + (" - OK" if self.ok else "")]
        for table, reasons in self.lagging_tables.items():
            lines.append(f"  {table}: lookups scan ({'; '.join(reasons)})")
        for kind, ex in self.examples.items():
            for e in ex:
                lines.append(f"  {kind}: {e}")
        if not self.ok:  # rebuild indexes what is missing and sweeps what dangles; only --fresh redoes stale runs
            lines.append(f"  fix: omni index rebuild {self.logical_table}" +
                         (" --fresh" if self.stale else ""))
        return "\n".join(lines)


def verify(catalog: Any, state: FamilyState, index: IdIndex, *, progress: bool | None = None) -> VerifyReport:
    """Compare the index with every physical table at ``state`` (see module docstring)."""
    from omni_iceberg.index.inline import read_for_index, split_rows
    from omni_iceberg.ui.progress import progress_bar

    report = VerifyReport(state.table.identifier, state.version)
    view = index.at(catalog, state)
    files = {k[len(FILE_PREFIX):]: FileRecord.from_bytes(v) for k, v in index.backend.scan_meta(FILE_PREFIX)}
    visible_runs: dict[str, frozenset[str]] = {}
    for meta in state.tables:
        if meta.snapshot_id is None:
            continue
        cov = view.coverage(meta.key)
        visible_runs[meta.identifier] = cov.visible_runs
        if cov.lag:
            report.lagging_tables[meta.identifier] = cov.lag
        table = catalog.load_table(meta.identifier)
        live = [t.file.file_path for t in table.scan(snapshot_id=meta.snapshot_id).plan_files()]
        live_keys = {file_key(p) for p in live}
        bar = progress_bar(progress, f"verify {meta.identifier}", "file", total=len(live))
        for path in live:
            rows = read_for_index(path, table.io)
            ids = rows.ids
            report.rows_checked += len(ids)
            fkey = file_key(path)
            usable = fkey in files and files[fkey].run in cov.visible_runs and fkey not in cov.retired
            entries = index.backend.get_entries([id_key(i) for i in ids]) if usable else {}
            # inline values must be the file's own: what a lookup returns without opening it
            recorded = files[fkey].inline if usable else []
            expected = (split_rows(rows.matrix) if rows.matrix is not None and recorded == rows.layout.to_json()
                        else None)
            for pos, rid in enumerate(ids):
                mine = [(p, v) for fk, p, v in entries.get(id_key(rid), ()) if fk == fkey]
                at = [v for p, v in mine if p == pos]
                if at and recorded and (expected is None or at[0] != expected[pos]):
                    report.stale += 1
                    report._example("stale", f"{rid}: inline values of {path} row {pos} differ from the row")
                    continue
                if at:
                    continue
                mine = [p for p, _ in mine]
                if mine:  # an entry for this file, at another row: a lookup would read a wrong row
                    report.stale += 1
                    report._example("stale", f"{rid}: entry says {path} row {mine[0]}, the row is {pos}")
                else:
                    report.missing += 1
                    report._example("missing", f"{rid} ({meta.key} {path} row {pos})")
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        # entries a lookup would use but whose file is not live at this snapshot
        for fkey, rec in files.items():
            if (rec.table == meta.identifier and rec.run in cov.visible_runs and fkey not in cov.retired
                    and fkey not in live_keys):
                report.stale += rec.rows
                report._example("stale", f"{rec.rows} entries of {rec.path} (run {rec.run}): file not in "
                                         f"snapshot {meta.snapshot_id}")
    # entries of runs no pinned history contains, and entries without a file record
    runs = invisible_runs(catalog, state, index, visible_runs)
    report.expired = sum(r.rows for r in runs.expired)
    for run in runs.pending:
        report.pending += run.rows
        if run.rows:
            report._example("pending", f"{run.rows} entries of run {run.run} on {run.table}: not committed "
                                       "(running, resumable, or stopped within the staging grace period)")
    for run in runs.dead:
        report.dangling += run.rows
        if run.rows:
            report._example("dangling", f"{run.rows} entries of run {run.run} on {run.table}: never committed "
                                        "(a crashed writer)")
    orphans = _orphans(index, files)
    for rid, fkey in orphans[:EXAMPLES]:
        report._example("dangling", f"{id_of(rid)}: entry for unknown file key {fkey.hex()}")
    report.dangling += len(orphans)
    return report


def runs_that_matter(index: IdIndex, table: Any, snapshot_id: int, runs: list[str]) -> list[str]:
    """The runs of a cut ancestry a reader at ``snapshot_id`` or later still needs, oldest first.

    An index entry counts when its file's run is visible and no visible run retired the
    file. A run none of whose files is live at the cut counts for nothing any more - its
    files are gone from every later snapshot too - unless it retired a file of a run that
    is kept (dropping it would bring that retired file back), and so on to a fixpoint.
    Anything the index cannot answer (a live file it has no record of, a run it has no
    complete record of) keeps every run: unpruned is larger, never wrong.
    """
    ident = ".".join(table.name())
    live = [t.file.file_path for t in table.scan(snapshot_id=snapshot_id).plan_files()]
    records = index.files([file_key(p) for p in live])
    if len(records) < len(set(live)):
        return runs
    keep = {rec.run for rec in records.values()} & set(runs)
    run_records = index.runs_of(ident, runs)
    if any(r not in run_records or not run_records[r].complete for r in runs):
        return runs
    retired = {r: [bytes.fromhex(k) for k in run_records[r].retired] for r in runs}
    owners = {k: rec.run for k, rec in index.files([k for ks in retired.values() for k in ks]).items()}
    changed = True
    while changed:
        changed = False
        for r in runs:
            if r not in keep and any(owners.get(k) in keep for k in retired[r]):
                keep.add(r)
                changed = True
    _mark_expired(index, ident, [run_records[r] for r in runs if r not in keep], snapshot_id)
    return [r for r in runs if r in keep]


def _mark_expired(index: IdIndex, ident: str, dropped: list[Any], snapshot_id: int) -> None:
    """Say in each dropped run's index record why no version sees it any more (verify reads it)."""
    marked = {run_key(ident, rec.run): replace(rec, extra={**rec.extra, EXPIRED_MARK: str(snapshot_id)}).to_bytes()
              for rec in dropped if not rec.extra.get(EXPIRED_MARK)}
    if marked:
        index.backend.put_meta(marked)
