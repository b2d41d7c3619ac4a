"""Small-file compaction of a logical table's physical family.

Ingest chunks and backfill checkpoints add files to every id-bucket partition they
touch; small batches leave many small files, and scans pay per file. Compaction
merges the small files of each partition:

- prepare: list the data files per partition at the pinned snapshots and pick the
  partitions holding at least ``min_files`` small files (a printable plan, also JSON);
- execute: on a private branch starting at the pinned snapshot, replace each chosen
  group of files by the same rows in as few files as ``target_file_bytes`` allows
  (group by group, committed as one snapshot per table, so the table is left with a
  couple of manifests, not two per group). Rows are written sorted by (batch, id), so a merged
  file covers a narrow batch range and batch pruning by file statistics stays sharp.
  On Spark (``engine="spark"``, or ``"auto"`` from the bytes to rewrite) the same plan
  is executed by the Spark engine's ``rewrite`` capability on the same branch: whole
  chosen partitions, rewritten with Iceberg's Spark writer (``spark_udfs/compaction.py``
  says why not ``rewrite_data_files``);
- commit: one logical version re-pins the compacted snapshots. Readers of older
  versions keep their snapshots (and the id index resolves them to the old files); a
  writer that committed meanwhile makes the commit fail cleanly (its branch is dropped)
  and compaction simply runs again later.

Family tables are partitioned by id bucket only (see :mod:`catalog_ext.physical`), so a
partition spans every batch: 300 batches of 10 records end up as at most N files per
table. Tables created with the older (batch, bucket) spec are compacted per
(batch, bucket) partition, as before.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from catalog_ext.contract import split_qualified
from catalog_ext.family import FamilyState
from catalog_ext.iceberg_io import PLANS
from catalog_ext.physical import file_batch
from catalog_ext.store import FamilyStore
from governance.leftovers import clean_leftovers
from governance.rewrite import CompactJob, run_rewrite

#: files at least this big are left alone: merging them buys little and rewrites a lot
SMALL_FILE_BYTES = 32 * 2**20
#: a merged file is cut when its inputs reach this size
TARGET_FILE_BYTES = 128 * 2**20


@dataclass
class PartitionRewrite:
    """One group of small files of one partition, merged into new files."""

    partition: str  # e.g. "_ai_id_bucket=3"
    files: int
    bytes: int
    paths: list[str] = field(default_factory=list, repr=False)


@dataclass
class TableCompaction:
    identifier: str
    key: str
    snapshot_id: int
    files_before: int
    partitions: list[PartitionRewrite] = field(default_factory=list)
    #: every live file of the chosen partitions, big ones included, with their bytes: what a
    #: whole-partition rewrite (the Spark engine's overwrite) reads
    partition_files: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def files_rewritten(self) -> int:
        return sum(p.files for p in self.partitions)


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
            groups = len(t.partitions)
            lines.append(f"  {t.identifier} ({t.files_before} files): merge {t.files_rewritten} small files "
                         f"in {groups} partition group(s), "
                         f"{sum(p.bytes for p in t.partitions) / 2**20:.1f} MiB")
            for p in t.partitions[:8]:
                lines.append(f"    {p.partition}: {p.files} files, {p.bytes / 2**20:.2f} MiB")
            if groups > 8:
                lines.append(f"    ... and {groups - 8} more")
        return "\n".join(lines)

    @property
    def bytes_to_rewrite(self) -> int:
        """Bytes a whole-partition rewrite reads: what the engine choice is made from."""
        return sum(sum(t.partition_files.values()) for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for t in out["tables"]:
            t.pop("partition_files", None)
            for p in t["partitions"]:
                p.pop("paths", None)
        out["bytes_to_rewrite"] = self.bytes_to_rewrite
        return out


def _partition_label(table: Any, data_file: Any) -> str:
    try:
        spec = table.specs()[data_file.spec_id]
    except (AttributeError, KeyError):
        spec = table.spec()
    return ", ".join(f"{f.name}={data_file.partition[i]}" for i, f in enumerate(spec.fields))


def plan_compaction(store: FamilyStore, name: str, min_files: int = 2, *,
                    small_file_bytes: int = SMALL_FILE_BYTES, target_file_bytes: int = TARGET_FILE_BYTES
                    ) -> CompactionPlan:
    """Per physical table, the partitions holding at least ``min_files`` small files, in merge groups."""
    ns, table = split_qualified(name)
    state: FamilyState = store.load(ns, table)
    plan = CompactionPlan(state.table.identifier, state.version)
    for t in state.tables:
        if t.snapshot_id is None:
            continue
        ice = store.catalog.load_table(t.identifier)
        small: dict[str, list[Any]] = {}
        every: dict[str, dict[str, int]] = {}
        total = 0
        for task in PLANS.tasks(ice.scan(snapshot_id=t.snapshot_id)):  # planned once: execute reuses it
            total += 1
            label = _partition_label(ice, task.file)
            every.setdefault(label, {})[task.file.file_path] = task.file.file_size_in_bytes
            if task.file.file_size_in_bytes < small_file_bytes:
                small.setdefault(label, []).append(task.file)
        groups: list[PartitionRewrite] = []
        for label, files in sorted(small.items()):
            if len(files) < max(min_files, 2):  # one file merged into one changes nothing
                continue
            group: list[Any] = []
            size = 0
            # in batch order: each merged file then covers a contiguous range of batches, which
            # keeps its batch bounds (file statistics) useful for pruning
            for f in sorted(files, key=lambda f: (file_batch(ice, f) or "", f.file_path)):
                group.append(f)
                size += f.file_size_in_bytes
                if size >= target_file_bytes:
                    groups.append(PartitionRewrite(label, len(group), size, [g.file_path for g in group]))
                    group, size = [], 0
            if len(group) >= 2:
                groups.append(PartitionRewrite(label, len(group), size, [g.file_path for g in group]))
        if groups:
            chosen = {path: size for label in {g.partition for g in groups} for path, size in every[label].items()}
            plan.tables.append(TableCompaction(t.identifier, t.key, t.snapshot_id, total, groups, chosen))
    return plan


def compact(store: FamilyStore, name: str, min_files: int = 2, dry_run: bool = False,
            clean: bool = True, progress: bool | None = None, *, engine: str = "local",
            spark: Callable[[], Any] | None = None, spark_blocker: str | None = None,
            threshold_bytes: int | None = None) -> dict[str, Any]:
    """Run a compaction plan; returns the plan, the engine, files after, and the new logical version.

    With ``clean`` (default) the leftovers of killed runs are removed first (see
    :func:`governance.leftovers.clean_leftovers`); the report lists them.

    ``engine``: ``local`` (pyarrow, this process), ``spark`` (the Spark engine's ``rewrite``
    capability: Iceberg's Spark writer rewrites the chosen partitions on the staging branch), or
    ``auto``: Spark when the partitions to rewrite hold at least the Spark threshold (the
    one backfills use, ``OMNI_SPARK_THRESHOLD_BYTES``) and Spark can run here
    (``spark_blocker`` None). ``spark`` returns the SparkSession to use, started only
    when Spark is chosen. Either way the plan, the staging branches and the ONE logical
    commit are the same (:func:`governance.rewrite.run_rewrite`).
    """
    from omni_iceberg.backfill.choose import choose_rewrite_engine

    report: dict[str, Any] = {}
    if clean:
        report["cleanup"] = clean_leftovers(store, name, dry_run=dry_run).to_dict()
    plan = plan_compaction(store, name, min_files)
    chosen, reason = choose_rewrite_engine(engine, lambda: plan.bytes_to_rewrite, spark=spark,
                                           spark_blocker=spark_blocker, what="the partitions to rewrite hold",
                                           threshold_bytes=threshold_bytes,
                                           nothing="nothing to compact" if plan.empty else "")
    report.update({"plan": plan.to_dict(), "logical_version": plan.version, "files_after": {},
                   "engine": chosen, "engine_reason": reason})
    if plan.empty or dry_run:
        return report

    def job(t: TableCompaction, writer: Any) -> CompactJob:
        partitions = ",".join(sorted({g.partition for g in t.partitions}))[:1000]
        return CompactJob(store, writer, t.snapshot_id, t.files_rewritten, {"omni.partitions": partitions},
                          groups=tuple(tuple(g.paths) for g in t.partitions),
                          partition_files=tuple(t.partition_files))

    new_state, report["files_after"] = run_rewrite(
        store, name, plan.version, plan.tables, job, engine=chosen, spark=spark, what="compaction", verb="compact",
        properties={"omni.operation": "compact"}, command=f"compact {name}",
        summary={"omni.tables": ",".join(t.key for t in plan.tables)}, label=f"compact {plan.logical_table}",
        total=sum(t.files_rewritten for t in plan.tables), progress=progress)
    report["logical_version"] = new_state.version
    return report
