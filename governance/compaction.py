"""Small-file compaction of a logical table's physical family.

Ingest chunks and backfill checkpoints each add files per (batch, bucket) partition;
over time a partition holds many small files and scans slow down. Compaction rewrites
the partitions with more than ``min_files`` files into one file each:

- prepare: count data files per partition at the pinned snapshots (a printable plan);
- execute: on a private branch starting at the pinned snapshot, overwrite each chosen
  batch's rows with the same rows in fewer files (one snapshot per batch);
- commit: one logical version re-pins the compacted snapshots. Readers of older
  versions keep their snapshots; a writer that committed meanwhile makes the commit
  fail cleanly (its branch is dropped) and compaction simply runs again later.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from catalog_ext.contract import BATCH_COLUMN, split_qualified
from catalog_ext.family import FamilyState
from catalog_ext.store import FamilyStore
from catalog_ext.updates import PinSnapshot
from governance.maintenance import clean_leftovers


@dataclass
class TableCompaction:
    identifier: str
    key: str
    snapshot_id: int
    files_before: int
    batches: dict[str, int]  # batch -> files in partitions that will be rewritten


@dataclass
class CompactionPlan:
    logical_table: str
    version: int
    tables: list[TableCompaction] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.tables

    def describe(self) -> str:
        if self.empty:
            return f"{self.logical_table} v{self.version}: nothing to compact"
        lines = [f"compaction plan for {self.logical_table} at version {self.version}:"]
        for t in self.tables:
            lines.append(f"  {t.identifier} ({t.files_before} files): rewrite batches "
                         + ", ".join(f"{b} ({n} files)" for b, n in sorted(t.batches.items())))
        return "\n".join(lines)


def plan_compaction(store: FamilyStore, name: str, min_files: int = 2) -> CompactionPlan:
    """Partitions (batch, bucket) with at least ``min_files`` data files, per physical table."""
    ns, table = split_qualified(name)
    state: FamilyState = store.load(ns, table)
    plan = CompactionPlan(state.table.identifier, state.version)
    for t in state.tables:
        ice = store.catalog.load_table(t.identifier)
        per_partition: dict[tuple, int] = {}
        total = 0
        for task in ice.scan(snapshot_id=t.snapshot_id).plan_files():
            key = tuple(task.file.partition)
            per_partition[key] = per_partition.get(key, 0) + 1
            total += 1
        batches: dict[str, int] = {}
        for key, n in per_partition.items():
            if n >= min_files:
                batches[key[0]] = batches.get(key[0], 0) + n
        if batches:
            plan.tables.append(TableCompaction(t.identifier, t.key, t.snapshot_id, total, batches))
    return plan


def compact(store: FamilyStore, name: str, min_files: int = 2, dry_run: bool = False,
            clean: bool = True) -> dict[str, Any]:
    """Run a compaction plan; returns the plan, files after, and the new logical version.

    With ``clean`` (default) the leftovers of killed runs are removed first (see
    :func:`governance.maintenance.clean_leftovers`); the report lists them.
    """
    from pyiceberg.expressions import EqualTo

    report: dict[str, Any] = {}
    if clean:
        report["cleanup"] = clean_leftovers(store, name, dry_run=dry_run).to_dict()
    plan = plan_compaction(store, name, min_files)
    report.update({"plan": asdict(plan), "logical_version": plan.version, "files_after": {}})
    if plan.empty or dry_run:
        return report
    ns, table = split_qualified(name)
    state = store.load(ns, table, plan.version)
    run_id = f"compact-{uuid.uuid4().hex[:12]}"
    writers = {t.key: store.staged_write(state, t.identifier, t.snapshot_id, run_id,
                                         {"omni.operation": "compact"}, rebasable=False)
               for t in plan.tables}
    try:
        for t in plan.tables:
            w = writers[t.key]
            for batch in sorted(t.batches):
                head = w.staged_snapshot_id or t.snapshot_id
                rows = store.catalog.load_table(t.identifier).scan(
                    row_filter=EqualTo(BATCH_COLUMN, batch), snapshot_id=head).to_arrow()
                w.overwrite(rows, EqualTo(BATCH_COLUMN, batch), {"omni.batch": batch})
            report["files_after"][t.identifier] = sum(
                1 for _ in store.catalog.load_table(t.identifier).scan(snapshot_id=w.staged_snapshot_id).plan_files())

        def updates(latest: FamilyState):
            # a rewrite cannot be rebased: if another writer moved a table, PinConflict fails
            # this commit (StagedWrite.rebasable is False) and compaction runs again later
            return tuple(PinSnapshot(t.key, writers[t.key].staged_snapshot_id, t.snapshot_id) for t in plan.tables)

        new_state = store.commit(ns, table, updates, operation="compact", command=f"compact {name}",
                                 summary=lambda _: {"omni.tables": ",".join(t.key for t in plan.tables)},
                                 staged=list(writers.values()))
    except BaseException:
        for w in writers.values():  # the rewritten files were never pinned: delete them
            try:
                w.abandon()
            except Exception:  # noqa: BLE001 - the original error matters more; the sweep retries
                pass
        raise
    report["logical_version"] = new_state.version
    return report
