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
from catalog_ext.physical import STAGING_BRANCH_PREFIX
from catalog_ext.updates import PinSnapshot


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


def plan_compaction(omni: Any, name: str, min_files: int = 2) -> CompactionPlan:
    """Partitions (batch, bucket) with at least ``min_files`` data files, per physical table."""
    ns, table = split_qualified(name)
    state: FamilyState = omni.store.load(ns, table)
    plan = CompactionPlan(state.table.identifier, state.version)
    for t in state.tables:
        ice = omni.catalog.load_table(t.identifier)
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


def compact(omni: Any, name: str, min_files: int = 2, dry_run: bool = False) -> dict[str, Any]:
    """Run a compaction plan; returns the plan, files after, and the new logical version."""
    from pyiceberg.expressions import EqualTo

    from catalog_ext import iceberg_io

    plan = plan_compaction(omni, name, min_files)
    report: dict[str, Any] = {"plan": asdict(plan), "logical_version": plan.version, "files_after": {}}
    if plan.empty or dry_run:
        return report
    ns, table = split_qualified(name)
    branch = f"{STAGING_BRANCH_PREFIX}compact-{uuid.uuid4().hex[:12]}"
    staged: dict[str, int] = {}
    committed = False
    try:
        for t in plan.tables:
            iceberg_io.with_table_retry(omni.catalog, t.identifier,
                                        lambda ice, t=t: ice.manage_snapshots().create_branch(t.snapshot_id, branch).commit())
            for batch in sorted(t.batches):
                ice = omni.catalog.load_table(t.identifier)
                rows = ice.scan(row_filter=EqualTo(BATCH_COLUMN, batch), snapshot_id=ice.metadata.refs[branch].snapshot_id
                                ).to_arrow()
                ice.overwrite(rows.cast(ice.schema().as_arrow()), overwrite_filter=EqualTo(BATCH_COLUMN, batch),
                              branch=branch, snapshot_properties={"omni.operation": "compact", "omni.batch": batch})
            ice = omni.catalog.load_table(t.identifier)
            staged[t.key] = ice.metadata.refs[branch].snapshot_id
            report["files_after"][t.identifier] = sum(1 for _ in ice.scan(snapshot_id=staged[t.key]).plan_files())

        def updates(latest: FamilyState):
            return tuple(PinSnapshot(t.key, staged[t.key], t.snapshot_id) for t in plan.tables)

        new_state = omni.store.commit(ns, table, updates, operation="compact", command=f"compact {name}",
                                      summary=lambda _: {"omni.tables": ",".join(t.key for t in plan.tables)})
        committed = True
    finally:
        for t in plan.tables:
            _publish(omni, t.identifier, branch, staged.get(t.key) if committed else None)
    report["logical_version"] = new_state.version
    return report


def _publish(omni: Any, identifier: str, branch: str, snapshot_id: int | None) -> None:
    """Fast-forward ``main`` to the compacted snapshot (when committed) and drop the branch."""
    from catalog_ext import iceberg_io
    from catalog_ext.physical import _is_ancestor

    def finish(ice):
        ops = ice.manage_snapshots()
        main = ice.metadata.refs.get("main")
        if snapshot_id is not None and (main is None or _is_ancestor(ice, main.snapshot_id, snapshot_id)):
            ops = ops.set_current_snapshot(snapshot_id)
        if branch in ice.metadata.refs:
            ops = ops.remove_branch(branch)
        ops.commit()

    iceberg_io.with_table_retry(omni.catalog, identifier, finish)
