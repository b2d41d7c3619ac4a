"""Remove what killed runs left behind in a logical table's family.

A run killed mid-way leaves an ``omni-stage-*`` branch and the data files it wrote; a
run killed before its first checkpoint leaves files no metadata mentions. Both only
cost storage (readers never see them), so cleanup is a plan you can print
(``dry_run``) and then run. :func:`clean_leftovers` is called by ``omni compact`` and
``omni maintain``; ingest and backfill call the cheap half
(:func:`catalog_ext.staging.sweep_stale_branches`) for the tables they are about to write.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from catalog_ext.contract import split_qualified
from catalog_ext.staging import StagingPolicy, SweepReport, sweep_orphan_files, sweep_stale_branches
from catalog_ext.store import FamilyStore


@dataclass
class CleanupReport:
    logical_table: str
    branches: SweepReport = field(default_factory=SweepReport)
    orphans: SweepReport = field(default_factory=SweepReport)

    def to_dict(self) -> dict[str, Any]:
        return {"logical_table": self.logical_table,
                "branches": [asdict(b) for b in self.branches.branches],
                "orphan_files_deleted": self.orphans.orphan_files_deleted,
                "orphan_bytes_freed": self.orphans.orphan_bytes_freed}

    def describe(self) -> str:
        return f"{self.logical_table}:\n{self.branches.describe()}\n{self.orphans.describe()}"


def clean_leftovers(store: FamilyStore, name: str, *, policy: StagingPolicy | None = None,
                    orphan_grace_s: float | None = None, dry_run: bool = False) -> CleanupReport:
    """Remove stale staging branches (with their files), then unreferenced data files.

    Branches first: dropping one expires its snapshots, which turns its files into
    orphans that the storage sweep would otherwise keep finding referenced.
    """
    ns, table = split_qualified(name)
    state = store.load(ns, table)
    report = CleanupReport(state.table.identifier)
    report.branches = sweep_stale_branches(store.catalog, state, policy=policy, dry_run=dry_run)
    report.orphans = sweep_orphan_files(store.catalog, store.load(ns, table), older_than_s=orphan_grace_s,
                                        dry_run=dry_run)
    return report
