"""Maintenance of a logical table's family: every due governance task, in order.

:func:`maintain` (``omni maintain``) runs every due task of a logical table in order:
leftover branches, compaction, column groups, co-read groups, cold columns split out of read
groups (:mod:`governance.cold_split`), the physical table bound
(:mod:`governance.table_bound`) once stale materializations are refreshed, re-bucketing, retention (:mod:`governance.retention`),
then orphan files (:func:`sweep_orphans`: here, or found by
Iceberg's ``remove_orphan_files`` on Spark for a big family).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from catalog_ext import settings
from catalog_ext.contract import split_qualified
from catalog_ext.errors import ConfigError
from catalog_ext.staging import SweepReport, sweep_stale_branches
from catalog_ext.store import FamilyStore
from governance.leftovers import CleanupReport


#: ``omni maintain`` keeps this many logical versions unless told otherwise
DEFAULT_KEEP_LAST = settings.value("OMNI_RETENTION_KEEP_LAST")
#: ``omni maintain`` compacts a partition once it holds this many small files
DEFAULT_COMPACT_MIN_FILES = settings.value("OMNI_COMPACT_MIN_FILES")


@dataclass
class MaintainReport:
    """What :func:`maintain` found (``dry_run``) or did, task by task."""

    logical_table: str
    dry_run: bool
    tasks: list[str] = field(default_factory=list)
    cleanup: CleanupReport | None = None
    retention: Any = None  # governance.retention.RetentionReport
    compaction: dict[str, Any] | None = None  # governance.compaction.compact's report
    column_groups: dict[str, Any] | None = None  # governance.column_groups.regroup's report
    coread: dict[str, Any] | None = None  # governance.coread.coread_regroup's report
    cold_split: dict[str, Any] | None = None  # governance.cold_split.split_cold_columns's report
    table_bound: dict[str, Any] | None = None  # governance.table_bound.bound_tables's report
    #: governance.materialize.refresh_materializations's reports, one per stale copy (None: not started)
    refreshed: list[dict[str, Any]] | None = None
    rebucket: dict[str, Any] | None = None  # governance.rebucket.rebucket's report
    #: physical tables that did not yet declare their unique keys (made before omni set it)
    unique_keys_declared: list[str] = field(default_factory=list)
    #: who found the orphan files, and why that engine ("local: requested --engine local")
    orphan_engine: str = ""
    #: omni_iceberg.index.maintenance.seal_if_due's answer (None: no index, or one that does not seal)
    index_seal: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"logical_table": self.logical_table, "dry_run": self.dry_run, "tasks": self.tasks,
                "unique_keys_declared": self.unique_keys_declared,
                "cleanup": self.cleanup.to_dict() if self.cleanup else None,
                "compaction": self.compaction, "column_groups": self.column_groups, "coread": self.coread,
                "cold_split": self.cold_split, "table_bound": self.table_bound,
                "refreshed": self.refreshed,
                "rebucket": self.rebucket, "orphan_engine": self.orphan_engine, "index_seal": self.index_seal,
                "retention": self.retention.to_dict() if self.retention else None}

    def describe(self) -> str:
        lines = [f"maintenance of {self.logical_table}" + (" (dry run: nothing changed)" if self.dry_run else "")
                 + f": {', '.join(self.tasks)}"]
        if self.cleanup is not None:
            lines.append("staging leftovers:\n  " + self.cleanup.branches.describe().replace("\n", "\n  "))
        if self.unique_keys_declared:
            lines.append(f"unique keys {'to declare' if self.dry_run else 'declared'} on "
                         f"{len(self.unique_keys_declared)} table(s): {', '.join(self.unique_keys_declared)}")
        if self.compaction is not None:
            tables = self.compaction["plan"]["tables"]
            merged = sum(p["files"] for t in tables for p in t["partitions"])
            after = self.compaction.get("files_after") or {}
            lines.append(f"compaction: {merged} small files in {len(tables)} table(s) "
                         + ("would be merged" if self.dry_run else
                            f"merged -> {sum(after.values())} files" if after else "(nothing due)"))
        if self.column_groups is not None:
            lines.append(self.column_groups["describe"])
        if self.coread is not None:
            lines.append(self.coread["describe"])
        if self.cold_split is not None:
            lines.append(self.cold_split["describe"])
        if self.refreshed is not None:
            copies = [r["plan"]["identifier"] + f" ({r['plan']['action']})" for r in self.refreshed]
            lines.append("stale materializations: " + (", ".join(copies) + (" would be refreshed" if self.dry_run
                                                                           else " refreshed") if copies else "none"))
        if self.table_bound is not None:
            lines.append(self.table_bound["describe"])
        if self.rebucket is not None:
            lines.append(self.rebucket["describe"])
        if self.retention is not None:
            lines.append(self.retention.plan.describe() if self.dry_run else self.retention.describe())
        if self.index_seal is not None:
            s = self.index_seal
            rep = s.get("report")
            lines.append(f"id index: {s['unsealed']} unsealed entries next to {s['sealed']} sealed; "
                         + (f"sealed in {rep['seconds']:.1f} s" if rep else
                            "would be sealed" if s["due"] else "sealing not due"))
        if self.cleanup is not None:
            o = self.cleanup.orphans
            lines.append(f"orphan data files (unreferenced, past the grace period): {o.orphan_files_deleted} "
                         f"{'found' if self.dry_run else 'deleted'} ({o.orphan_bytes_freed} bytes)")
        return "\n".join(lines)


def declare_unique_keys(catalog: Any, state: Any, *, dry_run: bool = False) -> list[str]:
    """Set ``omni.unique-keys`` on the family's physical tables made before omni set it at creation.

    It tells omni's Spark extension that a table holds one row per key, so the view's
    per-key aggregate around it can go (spark_udfs/java). A table property is table
    metadata, not data: no snapshot, no logical commit, and readers pinned to any version
    read the same rows. A commit lost to a concurrent writer is left to the next run.
    """
    from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

    from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
    from catalog_ext.physical import UNIQUE_KEYS_PROPERTY

    declared = []
    for meta in state.tables:
        try:
            table = catalog.load_table(meta.identifier)
        except NoSuchTableError:  # dropped by a concurrent governance run: nothing to declare
            continue
        if UNIQUE_KEYS_PROPERTY in table.metadata.properties:
            continue
        declared.append(meta.identifier)
        if dry_run:
            continue
        try:
            with table.transaction() as tx:
                tx.set_properties({UNIQUE_KEYS_PROPERTY: f"{ID_COLUMN},{BATCH_COLUMN}"})
        except CommitFailedException:  # lost to a concurrent commit: the next run declares it
            declared.pop()
    return declared


#: after a commit, ``maintain`` runs when the new version is a multiple of this (0: never)
AUTO_MAINTAIN_EVERY = settings.value("OMNI_AUTO_MAINTAIN_EVERY")
#: seconds an automatic maintenance may start tasks in (a task started runs to its end)
AUTO_MAINTAIN_BUDGET_S = float(settings.value("OMNI_AUTO_MAINTAIN_BUDGET_S"))


def maintain_if_due(store: FamilyStore, name: str, version: int, *, every: int | None = None,
                    budget_s: float | None = None) -> MaintainReport | None:
    """The automatic trigger: :func:`maintain` after the commit that made ``version``, every
    ``every`` versions (``OMNI_AUTO_MAINTAIN_EVERY``), within ``budget_s`` (``OMNI_AUTO_MAINTAIN_BUDGET_S``).

    Versions only grow by one per commit, so of several writers exactly the one whose
    commit made a multiple of ``every`` maintains: no coordination needed. The caller's
    commit is already done; what maintenance does is its own logical commits.
    """
    every = AUTO_MAINTAIN_EVERY if every is None else every
    if every <= 0 or version % every:
        return None
    return maintain(store, name, budget_s=AUTO_MAINTAIN_BUDGET_S if budget_s is None else budget_s,
                    progress=False, command=f"maintain {name} (automatic, every {every} versions)")


def maintain(store: FamilyStore, name: str, *, keep_last: int | None = None, policy: Any = None,
             compact_min_files: int | None = None, dry_run: bool = False, progress: bool | None = None,
             command: str = "", budget_s: float | None = None, engine: str = "local",
             spark: Any = None, spark_blocker: str | None = None,
             orphan_grace_s: float | None = None, max_tables: int | None = None) -> MaintainReport:
    """Run the due maintenance of ``name``: stale branches, compaction, column groups,
    co-read groups (from the query log as flushed so far), cold columns out of read groups, stale
    materializations, the physical
    table bound, re-bucketing, retention, orphan files.

    ``max_tables``: the bound on the physical tables the view reads (default
    ``OMNI_FAMILY_MAX_TABLES``; checked before any task runs, so a bad value changes nothing):
    past it, the least-read feature tables merge into column groups
    (:mod:`governance.table_bound`).

    ``budget_s``: a task starts only while the run is within it (the rest is left to the
    next run and named in the report); stale branches are always swept.

    Compaction is due where a partition holds ``compact_min_files`` small files (default
    :data:`DEFAULT_COMPACT_MIN_FILES`, env ``OMNI_COMPACT_MIN_FILES``); it loses cleanly
    to a concurrent writer, in which case the rest still runs and the next run retries.

    ``engine``, ``spark``, ``spark_blocker``: who runs the compaction and the re-bucketing, as
    for :func:`governance.compaction.compact` (``auto``: Spark from the bytes to rewrite), and
    the orphan sweep (:func:`sweep_orphans`; ``auto``: Spark from the family's data size).
    ``orphan_grace_s``: files younger than this are never orphans (default
    ``OMNI_ORPHAN_GRACE_S``, 3 days).

    ``policy`` (a :class:`governance.retention.RetentionPolicy`) wins over ``keep_last``
    (default :data:`DEFAULT_KEEP_LAST`, env ``OMNI_RETENTION_KEEP_LAST``). Branches go
    first, since a dropped branch frees snapshots that retention may then expire;
    orphans go last, to find files that neither left any metadata.
    """
    from governance.retention import RetentionPolicy, apply_retention
    from governance.table_bound import max_tables_setting

    started = time.perf_counter()
    bound = max_tables_setting(max_tables)  # a bad setting fails here, before any task changed anything
    ns, table = split_qualified(name)
    state = store.load(ns, table)
    policy = policy or RetentionPolicy(keep_last=keep_last or DEFAULT_KEEP_LAST)
    report = MaintainReport(state.table.identifier, dry_run, cleanup=CleanupReport(state.table.identifier))

    def within_budget(task: str) -> bool:
        if budget_s is None or time.perf_counter() - started <= budget_s:
            report.tasks.append(task)
            return True
        report.tasks.append(f"{task} - not started: past the {budget_s:g} s budget, left to the next run")
        return False

    report.tasks.append("stale staging branches")
    report.cleanup.branches = sweep_stale_branches(store.catalog, state, dry_run=dry_run)
    report.tasks.append("unique keys declared")
    report.unique_keys_declared = declare_unique_keys(store.catalog, state, dry_run=dry_run)
    # after the leftovers, before retention: the small files it replaces are expired in this run
    from catalog_ext.errors import CommitConflictError
    from catalog_ext.updates import PinConflict
    from governance.compaction import compact

    min_files = compact_min_files or DEFAULT_COMPACT_MIN_FILES
    if within_budget(f"compaction (partitions with >= {min_files} small files)"):
        try:
            report.compaction = compact(store, name, min_files, dry_run=dry_run, clean=False, progress=progress,
                                        engine=engine, spark=spark, spark_blocker=spark_blocker)
        except (PinConflict, CommitConflictError) as e:
            report.tasks[-1] += f" - lost to a concurrent writer, retried next run ({e})"
    from governance.column_groups import GROUP_DUE_TABLES, regroup

    if within_budget(f"column groups (when >= {GROUP_DUE_TABLES} narrow feature tables would merge)"):
        try:
            report.column_groups = regroup(store, name, dry_run=dry_run, progress=progress, due_tables=GROUP_DUE_TABLES,
                                           command=command or f"maintain {state.table.identifier}")
        except (PinConflict, CommitConflictError) as e:
            report.tasks[-1] += f" - lost to a concurrent writer, retried next run ({e})"
    import governance.coread as coread

    # after the regroup (it moves only columns already in groups), before re-bucketing (which
    # then sizes the moved table with the rest)
    if within_budget(f"co-read groups (when >= {coread.MIN_READS} logged reads would join fewer tables)"):
        try:
            report.coread = coread.coread_regroup(store, name, dry_run=dry_run, progress=progress,
                                                  min_reads=coread.MIN_READS,
                                                  command=command or f"maintain {state.table.identifier}")
        except (PinConflict, CommitConflictError) as e:
            report.tasks[-1] += f" - lost to a concurrent writer, retried next run ({e})"
    from governance.cold_split import MIN_COLD_SHARE, MIN_SPLIT_READS, split_cold_columns

    # after the co-read move (the reads it serves then read the new table, not the group), and
    # only within the table bound (a split adds a table): checked by split_cold_columns
    if within_budget(f"cold columns (a group read >= {MIN_SPLIT_READS} times, >= {MIN_COLD_SHARE:.0%} of its "
                     "bytes never read)"):
        try:
            report.cold_split = split_cold_columns(store, name, max_tables=bound, dry_run=dry_run, progress=progress,
                                                   command=command or f"maintain {state.table.identifier}")
        except (PinConflict, CommitConflictError) as e:
            report.tasks[-1] += f" - lost to a concurrent writer, retried next run ({e})"
    from governance.materialize import refresh_materializations

    # before the table bound: a fresh copy is read (it drives the view) in place of the tables
    # it covers, so the bound must count the layout the refresh leaves; moves never make a copy
    # stale (freshness is the values' data versions, not where they live)
    if within_budget("stale materializations refreshed"):
        try:
            report.refreshed = refresh_materializations(store, name, dry_run=dry_run, progress=progress)
        except (PinConflict, CommitConflictError) as e:
            report.tasks[-1] += f" - lost to a concurrent writer, retried next run ({e})"
    from governance.table_bound import bound_tables

    # after the regroup, the co-read move (which adds a table) and the refresh, so the count they
    # leave is the one bounded; before re-bucketing, which then sizes the merged group with the rest
    if within_budget(f"physical table bound (the view reads at most {bound} tables)"):
        try:
            report.table_bound = bound_tables(store, name, max_tables=bound, dry_run=dry_run, progress=progress,
                                              command=command or f"maintain {state.table.identifier}")
        except (PinConflict, CommitConflictError) as e:
            report.tasks[-1] += f" - lost to a concurrent writer, retried next run ({e})"
    from governance.rebucket import rebucket

    # after compaction and regrouping: it rewrites every file anyway, and sizes what they left
    if within_budget("re-bucketing (when the data's size calls for another id-bucket count)"):
        try:
            report.rebucket = rebucket(store, name, dry_run=dry_run, progress=progress,
                                       command=command or f"maintain {state.table.identifier}",
                                       engine=engine, spark=spark, spark_blocker=spark_blocker)
        except (PinConflict, CommitConflictError) as e:
            report.tasks[-1] += f" - lost to a concurrent writer, retried next run ({e})"
    if within_budget(f"retention (keep last {policy.keep_last})"):
        report.retention = apply_retention(store, name, policy, dry_run=dry_run, progress=progress,
                                           command=command or f"maintain {state.table.identifier}")
    from omni_iceberg.index.maintenance import SEAL_MIN_ENTRIES, seal_if_due

    if within_budget(f"id index sealing (when >= {SEAL_MIN_ENTRIES} unsealed entries and a quarter of the sealed)"):
        from omni_iceberg.index.errors import IndexUnavailableError

        try:
            index = store.open_index(state)
            if index is not None:
                report.index_seal = seal_if_due(index, dry_run=dry_run, progress=progress)
        except IndexUnavailableError as e:  # lookups fall back to scans meanwhile; the next run retries
            report.tasks[-1] += f" - index unavailable, retried next run ({e})"
    if within_budget("orphan data files"):
        report.cleanup.orphans, report.orphan_engine = sweep_orphans(
            store, store.load(ns, table), engine=engine, spark=spark, spark_blocker=spark_blocker,
            older_than_s=orphan_grace_s, dry_run=dry_run)
        report.tasks[-1] += f" ({report.orphan_engine})"
    return report


def sweep_orphans(store: FamilyStore, state: Any, *, engine: str = "local", spark: Any = None,
                  spark_blocker: str | None = None, older_than_s: float | None = None,
                  dry_run: bool = False, threshold_bytes: int | None = None) -> tuple[SweepReport, str]:
    """Delete the family's orphan data files; returns the report and which engine found them, and why.

    ``local``: :func:`catalog_ext.staging.sweep_orphan_files` (this process reads every
    manifest of every snapshot and lists storage). ``spark``: Iceberg's
    ``remove_orphan_files`` procedure finds them (the Spark engine's ``rewrite`` capability,
    ``spark_udfs/orphans.py``). ``auto``: Spark
    when the family's data files (at the pinned snapshots) hold at least the Spark threshold
    backfills use, Spark can run here, and the grace period is one Iceberg accepts.
    """
    from catalog_ext.staging import orphan_grace_s
    from governance.rewrite import orphan_sweep_blocker, rewrite_engine
    from omni_iceberg.backfill.choose import choose_rewrite_engine

    grace = orphan_grace_s(older_than_s)
    if engine == "auto":
        spark_blocker = spark_blocker or orphan_sweep_blocker("spark", grace)
    chosen, reason = choose_rewrite_engine(engine, lambda: _family_bytes(store, state), spark=spark,
                                           spark_blocker=spark_blocker, what="the family's data files hold",
                                           threshold_bytes=threshold_bytes)
    if chosen == "spark" and spark is None:
        raise ConfigError("the orphan sweep on Spark needs a Spark session: call Omni.maintain(..., "
                          "engine='spark'), which starts one on this catalog, or pass spark=")
    with rewrite_engine(chosen, **({"session": spark} if chosen != "local" else {})) as sweeper:
        found = sweeper.sweep_orphans(store.catalog, state, older_than_s=grace, dry_run=dry_run)
    return found, f"{chosen}: {reason}"


def _family_bytes(store: FamilyStore, state: Any) -> int:
    """Data bytes of the family's tables at their pinned snapshots (snapshot summaries only)."""
    total = 0
    for t in state.tables:
        if t.snapshot_id is None:
            continue
        snap = store.catalog.load_table(t.identifier).snapshot_by_id(t.snapshot_id)
        props = snap.summary.additional_properties if snap is not None and snap.summary is not None else {}
        total += int(props.get("total-files-size", 0) or 0)
    return total
