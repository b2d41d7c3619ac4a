"""Re-bucketing: the family's id-bucket count follows the data's size.

Every physical table of a family is partitioned by ``bucket(N, _ai_unique_id_)`` with
one N, so tables join bucket by bucket (storage-partitioned joins in Spark, bounded
memory in omni's own joins) and an id names the files that can hold it. A fixed N is
wrong at both ends: a small table written in 16 buckets is 16 tiny files per batch and
per table (and a wide query opens them all), while a table that grew to terabytes has
buckets no worker can hold. So N is chosen from the data and changed by rewriting.

Why counts that divide each other: Iceberg's bucket is ``hash(id) mod N``, so with
``M = k * N`` bucket ``b`` of N splits exactly into buckets ``b, b + N, ... b + (k-1)N``
of M (a hash row split), and k buckets of M merge into one of N. Each new file then
draws from a known, bounded set of old files: growing rewrites old bucket by old bucket,
shrinking new bucket by new bucket, and memory follows one bucket, never the table.

Prepare-Execute-Commit, like compaction:

- **prepare** (:func:`plan_rebucket`): per physical table at the pinned snapshots, the
  bytes per bucket; the new N is the smallest count (a multiple or divisor of N) whose
  buckets stay under ``target_bucket_bytes`` in the largest table. It is due when that
  count is at least twice N (buckets too big) or at most a quarter of it (too many
  tiny buckets); the gap keeps a table from flapping between counts.
- **execute**: each table gets a partition spec of the new count (a new Iceberg spec;
  old files keep theirs), then its files are rewritten on a staging branch - split or
  merged, rows sorted by (batch, id) so batch pruning by file bounds stays sharp.
- **commit**: ONE logical version re-pins every rewritten table and sets the family's
  count (:class:`~catalog_ext.updates.SetBucketCount`). Older versions keep their pins,
  so they keep reading - and looking up ids in - the old layout with the old count.

Concurrency: the rewrite is not rebasable - a writer that committed meanwhile fails this
commit (run it again). A writer that staged files under the old count and commits after
the re-bucketing is refused by the logical commit (its files would mix counts in one
version; see ``FamilyStore.commit``), and every writer partitions and labels its files
with the spec of its own version's count (``StagedWrite.spec_id``), whatever the table's
default spec is at that moment.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from catalog_ext import settings
from catalog_ext.contract import split_qualified
from catalog_ext.errors import OmniError
from catalog_ext.family import FamilyState
from catalog_ext.iceberg_io import PLANS, bucket_position
from catalog_ext.physical import ensure_bucket_spec
from catalog_ext.store import FamilyStore
from catalog_ext.updates import SetBucketCount
from governance.rewrite import RebucketJob, run_rewrite

#: a bucket of the largest table should hold at most this many bytes (OMNI_BUCKET_TARGET_MB)
TARGET_BUCKET_BYTES = int(settings.value("OMNI_BUCKET_TARGET_MB") * 2**20)
MAX_BUCKETS = 1024


class RebucketError(OmniError):
    """A re-bucketing that cannot be planned (bad count, nothing to rewrite)."""

    exit_code = 2  # the count the user gave is bad input, as the README's exit codes say


@dataclass
class TableRebucket:
    identifier: str
    key: str
    snapshot_id: int | None
    files: int
    bytes: int
    largest_bucket_bytes: int


@dataclass
class RebucketPlan:
    logical_table: str
    version: int
    current: int
    target: int
    reason: str
    due: bool
    tables: list[TableRebucket] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.due or self.target == self.current

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "empty": self.empty}

    def describe(self) -> str:
        head = (f"re-bucket {self.logical_table} at version {self.version}: {self.current} -> {self.target} "
                f"id buckets" if not self.empty else
                f"re-bucket {self.logical_table} at version {self.version}: stays at {self.current} id buckets")
        lines = [head, f"  why: {self.reason}"]
        for t in self.tables:
            if t.files:
                lines.append(f"  {t.identifier}: {t.files} files, {t.bytes:,} bytes, "
                             f"largest bucket {t.largest_bucket_bytes:,} bytes")
        return "\n".join(lines)


def _related(current: int) -> list[int]:
    """Counts a family at ``current`` buckets can move to: multiples and divisors by powers of two."""
    out = {current}
    n = current
    while n * 2 <= MAX_BUCKETS:
        n *= 2
        out.add(n)
    n = current
    while n % 2 == 0:
        n //= 2
        out.add(n)
    return sorted(out)


def _check_count(identifier: str, current: int, buckets: int) -> None:
    options = ", ".join(str(n) for n in _related(current) if n != current)
    if not 1 <= buckets <= MAX_BUCKETS:
        raise RebucketError(f"invalid bucket count {buckets} for {identifier} (it has {current} id buckets; counts "
                            f"go from 1 to {MAX_BUCKETS}): use one of: {options}")
    if max(buckets, current) % min(buckets, current):
        raise RebucketError(
            f"{identifier} has {current} id buckets; {buckets} neither divides nor is a multiple of it, "
            f"so a bucket's rows would come from every old bucket. Use one of: {options}")


def plan_rebucket(store: FamilyStore, name: str, buckets: int | None = None, *,
                  target_bucket_bytes: int = TARGET_BUCKET_BYTES) -> RebucketPlan:
    """What :func:`rebucket` would do: the new count and, per physical table, what it rewrites.

    ``buckets`` forces a count (a multiple or divisor of the current one); without it the
    count is chosen from the data's size (module docstring).
    """
    ns, table = split_qualified(name)
    state: FamilyState = store.load(ns, table)
    current = state.table.bucket_count
    if buckets is not None:  # before any table is listed: a bad count needs no scan planning
        _check_count(state.table.identifier, current, buckets)
    tables: list[TableRebucket] = []
    for t in state.tables:
        files = size = largest = 0
        if t.snapshot_id is not None and not t.emptied:
            ice = store.catalog.load_table(t.identifier)
            per_bucket: dict[int, int] = {}
            specs = ice.metadata.specs()
            for task in PLANS.tasks(ice.scan(snapshot_id=t.snapshot_id)):  # planned once: execute reuses it
                f = task.file
                b = f.partition[bucket_position(specs[f.spec_id])]
                per_bucket[b] = per_bucket.get(b, 0) + f.file_size_in_bytes
                files += 1
                size += f.file_size_in_bytes
            largest = max(per_bucket.values(), default=0)
        tables.append(TableRebucket(t.identifier, t.key, t.snapshot_id, files, size, largest))
    biggest = max((t.bytes for t in tables), default=0)
    if buckets is not None:
        reason = f"asked for {buckets}"
        return RebucketPlan(state.table.identifier, state.version, current, buckets, reason, buckets != current, tables)
    # the smallest related count whose buckets hold at most the target in the largest table
    fitting = [n for n in _related(current) if biggest / n <= target_bucket_bytes]
    target = min(fitting) if fitting else max(_related(current))
    if target >= 2 * current:
        reason = (f"the largest table holds {biggest:,} bytes: {biggest // current:,} per bucket at {current}, "
                  f"over the {target_bucket_bytes:,}-byte target")
        due = True
    elif target * 4 <= current:
        reason = (f"the largest table holds {biggest:,} bytes: {target} bucket(s) keep it under the "
                  f"{target_bucket_bytes:,}-byte target, {current} make {current} small files per batch")
        due = True
    else:
        reason = f"{current} buckets fit the largest table ({biggest:,} bytes); {target} would not change enough"
        due = False
        target = current
    return RebucketPlan(state.table.identifier, state.version, current, target, reason, due, tables)


def rebucket(store: FamilyStore, name: str, buckets: int | None = None, *, dry_run: bool = False,
             progress: bool | None = None, command: str = "",
             target_bucket_bytes: int = TARGET_BUCKET_BYTES, engine: str = "local",
             spark: Callable[[], Any] | None = None, spark_blocker: str | None = None,
             threshold_bytes: int | None = None) -> dict[str, Any]:
    """Plan and (unless ``dry_run`` or not due) rewrite every table to the new count, in ONE logical commit.

    ``engine``: ``local`` (pyarrow, this process, one rewrite unit at a time), ``spark``
    (the Spark engine's ``rewrite`` capability: Spark rewrites each table onto the same staging
    branch), or ``auto``: Spark when the tables to rewrite hold at least the Spark threshold
    backfills use and Spark can run here (``spark_blocker`` None), as for compaction. ``spark``
    returns the SparkSession to use, started only when Spark is chosen.

    Returns the plan, the engine and why, the files each rewritten table holds after, and
    the logical version.
    """
    from omni_iceberg.backfill.choose import choose_rewrite_engine

    plan = plan_rebucket(store, name, buckets, target_bucket_bytes=target_bucket_bytes)
    chosen, reason = choose_rewrite_engine(engine, lambda: sum(t.bytes for t in plan.tables), spark=spark,
                                           spark_blocker=spark_blocker, what="the tables to rewrite hold",
                                           threshold_bytes=threshold_bytes,
                                           nothing="nothing to rewrite" if plan.empty else "")
    report: dict[str, Any] = {"plan": plan.to_dict(), "describe": plan.describe(), "logical_version": plan.version,
                              "files_after": {}, "engine": chosen, "engine_reason": reason}
    if plan.empty or dry_run:
        return report

    def new_spec(state: FamilyState) -> None:
        # every table gets the new spec, also those without files: a later write to them (a
        # backfill of an empty feature table) must find the family's count
        for t in state.tables:
            ensure_bucket_spec(store.catalog, t.identifier, plan.target)

    def job(t: TableRebucket, writer: Any) -> RebucketJob:
        return RebucketJob(store, writer, t.snapshot_id, t.files, {"omni.bucket-count": str(plan.target)},
                           current=plan.current, target=plan.target)

    rewrite = [t for t in plan.tables if t.files]
    new_state, report["files_after"] = run_rewrite(
        store, name, plan.version, rewrite, job, engine=chosen, spark=spark, what="re-bucketing", verb="rebucket",
        properties={"omni.operation": "rebucket", "omni.bucket-count": str(plan.target)},
        command=command or f"rebucket {name} --buckets {plan.target}",
        summary={"omni.bucket-count": f"{plan.current}->{plan.target}"},
        label=f"rebucket {plan.logical_table} {plan.current}->{plan.target}", total=sum(t.files for t in rewrite),
        progress=progress, updates=lambda _writers: (SetBucketCount(plan.current, plan.target),),
        bucket_count=plan.target, prepare=new_spec)
    report["logical_version"] = new_state.version
    return report
