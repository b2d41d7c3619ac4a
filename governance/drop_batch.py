"""Drop one ingest batch: its rows leave every physical table and the id index, in one logical commit.

A bad crawl, a licence withdrawn, a test batch pushed to production: the batch must go
from the logical table without touching anything else, and readers of older versions
must keep seeing it (an export manifest that pinned it still replays byte for byte).

- prepare: per physical table, the data files at the pinned snapshot that can hold the
  batch, from the batch column's bounds (kept in full for that reason,
  :mod:`catalog_ext.physical`): a file that holds only the batch is deleted whole; a
  file whose bounds span it (a compacted file) is rewritten without its rows. Files
  whose bounds exclude the batch are never opened. A printable plan, also JSON.
- execute: on a private branch per table starting at the pinned snapshot, ONE
  overwrite snapshot deletes and rewrites those files (``StagedWrite.rewrite_files``).
  The write hooks of the store update the id index before the commit: the batch's
  ids are retired, the rewritten rows get their new positions.
- commit: one logical version re-pins the tables and drops the batch and its computed
  feature units from the mapping (:class:`catalog_ext.updates.DropBatch`). A writer
  that moved a table meanwhile makes the commit fail cleanly; the branches are dropped
  and nothing changed. That covers every table holding the batch at commit time, not
  only those the plan found: a table another writer moved or added since the plan (a
  backfill's new feature table, a materialized copy) is read again at each commit
  attempt, and one holding the batch now fails the drop the same way
  (:class:`BatchWrittenMeanwhileError`). The other direction - a backfill committing
  rows of a batch dropped while it ran - is refused by the store
  (``FamilyStore.commit``, batches that left).

The batch's rejects, errors and lineage rows stay: they are history, and say which
version dropped it (``omni log`` names the batch).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.compute as pc

from catalog_ext.contract import BATCH_COLUMN, split_qualified
from catalog_ext.errors import CommitConflictError, InvalidIdentifierError
from catalog_ext.family import FamilyState, PhysicalTable
from catalog_ext.iceberg_io import read_data_files
from catalog_ext.physical import file_batch_bounds
from catalog_ext.store import FamilyStore
from catalog_ext.updates import DropBatch, PinSnapshot
from governance.attempt import staged_attempt

OPERATION = "drop-batch"


class NoSuchBatchError(InvalidIdentifierError):
    """The batch to drop is not in the logical table's latest version (bad input: exit 2, as an unknown
    batch given to ``backfill --batches`` is)."""


class BatchWrittenMeanwhileError(CommitConflictError):
    """A physical table the plan did not cover holds the batch at commit time; nothing was dropped."""


@dataclass
class TableDrop:
    identifier: str
    key: str
    snapshot_id: int
    files_deleted: list[str] = field(default_factory=list)  # hold only the batch
    files_rewritten: list[str] = field(default_factory=list)  # hold the batch among others
    files_untouched: int = 0


@dataclass
class DropBatchPlan:
    logical_table: str
    version: int
    batch: str
    rows: int
    tables: list[TableDrop] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"drop batch {self.batch!r} ({self.rows:,} rows) from {self.logical_table} at version "
                 f"{self.version}:"]
        for t in self.tables:
            lines.append(f"  {t.identifier}: delete {len(t.files_deleted)} file(s), rewrite "
                         f"{len(t.files_rewritten)} without the batch, leave {t.files_untouched}")
        if not self.tables:
            lines.append("  no physical table holds its rows (they are already gone)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_drop_batch(store: FamilyStore, name: str, batch: str) -> DropBatchPlan:
    """Which files of which physical tables hold ``batch`` at the latest version."""
    from catalog_ext.suggest import did_you_mean

    ns, table = split_qualified(name)
    state: FamilyState = store.load(ns, table)
    found = state.batch(batch)
    if found is None:
        known = [b.name for b in state.batches]
        raise NoSuchBatchError(f"{state.table.identifier} has no batch {batch!r}{did_you_mean(batch, known)} "
                               f"(batches: {', '.join(known) or 'none'}; see 'omni status {state.table.identifier}')")
    plan = DropBatchPlan(state.table.identifier, state.version, batch, found.rows)
    for t in state.tables:
        entry = _table_drop(store, t, batch)
        if entry is not None:
            plan.tables.append(entry)
    return plan


def _table_drop(store: FamilyStore, t: PhysicalTable, batch: str) -> TableDrop | None:
    """The files of ``t`` at its pinned snapshot that hold ``batch``, or None when none can."""
    if t.snapshot_id is None:
        return None
    ice = store.catalog.load_table(t.identifier)
    entry = TableDrop(t.identifier, t.key, t.snapshot_id)
    for task in ice.scan(snapshot_id=t.snapshot_id).plan_files():
        lower, upper = file_batch_bounds(ice, task.file)
        if lower is None or upper is None:  # no statistics: it may hold the batch
            entry.files_rewritten.append(task.file.file_path)
        elif lower == upper == batch:
            entry.files_deleted.append(task.file.file_path)
        elif lower <= batch <= upper:
            entry.files_rewritten.append(task.file.file_path)
        else:
            entry.files_untouched += 1
    return entry if entry.files_deleted or entry.files_rewritten else None


def _check_no_new_holder(store: FamilyStore, plan: DropBatchPlan, planned: dict[str, int | None],
                         latest: FamilyState, seen: dict[tuple[str, int], bool]) -> None:
    """Refuse the commit when a table the plan does not re-pin holds ``plan.batch`` in ``latest``.

    Only tables whose pin differs from the one the plan read (moved, or added to the
    family since) are read, and each (table, snapshot) once per drop: without this a
    backfill that committed the batch's rows to a new feature table between the plan and
    the commit kept them there, under no batch entry, and a later re-ingest of the same
    content put each of its ids in that table twice.
    """
    dropping = {t.key for t in plan.tables}
    for t in latest.tables:
        if t.key in dropping or t.snapshot_id is None or (t.key in planned and planned[t.key] == t.snapshot_id):
            continue
        key = (t.key, t.snapshot_id)
        if key not in seen:
            seen[key] = _table_drop(store, t, plan.batch) is not None
        if seen[key]:
            raise BatchWrittenMeanwhileError(
                f"{t.identifier} now holds rows of batch {plan.batch!r} of {plan.logical_table} at "
                f"version {latest.version} (snapshot {t.snapshot_id}), which this drop, planned at version "
                f"{plan.version}, did not cover; nothing was dropped - run the command again")


def drop_batch(store: FamilyStore, name: str, batch: str, *, dry_run: bool = False,
               progress: bool | None = None, command: str = "") -> dict[str, Any]:
    """Drop ``batch`` from logical table ``name`` (see the module docstring); returns the report."""
    from omni_iceberg.ui.progress import progress_bar

    plan = plan_drop_batch(store, name, batch)
    report: dict[str, Any] = {"plan": plan.to_dict(), "logical_version": plan.version, "rows_removed": {}}
    if dry_run:
        return report
    ns, table = split_qualified(name)
    state = store.load(ns, table, plan.version)
    run_id = f"drop-batch-{uuid.uuid4().hex[:12]}"
    writers = {t.key: store.staged_write(state, t.identifier, t.snapshot_id, run_id,
                                         {"omni.operation": OPERATION, "omni.batch": batch}, rebasable=False)
               for t in plan.tables}
    bar = progress_bar(progress, f"drop batch {batch} from {plan.logical_table}", "file",
                       total=sum(len(t.files_deleted) + len(t.files_rewritten) for t in plan.tables))
    with staged_attempt(bar, writers.values):  # never pinned: what was written is deleted on failure
        for t in plan.tables:
            ice = store.catalog.load_table(t.identifier)
            live = {task.file.file_path: task.file for task in ice.scan(snapshot_id=t.snapshot_id).plan_files()}
            deleted = [live[p] for p in t.files_deleted]
            mixed = [live[p] for p in t.files_rewritten]
            kept = None
            removed = sum(f.record_count for f in deleted)
            if mixed:
                rows = read_data_files(ice, mixed)
                keep = pc.invert(pc.fill_null(pc.equal(rows.column(BATCH_COLUMN), batch), False))
                kept = rows.filter(keep)
                removed += rows.num_rows - kept.num_rows
            if kept is None:
                kept = ice.schema().as_arrow().empty_table()
            writers[t.key].rewrite_files(deleted + mixed, kept, {"omni.batch-dropped": batch})
            report["rows_removed"][t.identifier] = removed
            if bar is not None:
                bar.update(len(deleted) + len(mixed))

        planned = {t.key: t.snapshot_id for t in state.tables}
        seen: dict[tuple[str, int], bool] = {}

        def updates(latest: FamilyState):
            # not rebasable: a table moved by another writer fails this commit (PinConflict), and
            # so does a table the plan did not cover that holds the batch now
            _check_no_new_holder(store, plan, planned, latest, seen)
            return (DropBatch(batch),) + tuple(
                PinSnapshot(t.key, writers[t.key].staged_snapshot_id, t.snapshot_id) for t in plan.tables)

        new_state = store.commit(ns, table, updates, operation=OPERATION,
                                 command=command or f"drop-batch {plan.logical_table} {batch}",
                                 summary=lambda _: {"omni.batch": batch, "omni.rows": str(plan.rows)},
                                 staged=list(writers.values()))
    report["logical_version"] = new_state.version
    return report
