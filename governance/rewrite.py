"""Governance's rewrites: the one skeleton every rewrite of a family's tables runs, and the local engine.

A rewrite (compaction, re-bucketing, materialization, regroup; split and drop-batch are
the next to move here) is Prepare-Execute-Commit. Its own module prepares: a printable
plan, the engine choice, and per physical table a :class:`RewriteJob` saying which rows
to write anew and how. :func:`run_rewrite` does what every rewrite shares: a staged
writer per table on a private branch from the pinned snapshot, the engine's rewrite of
each job onto it, the undo when anything fails (nothing was pinned: every new file
goes), and the ONE logical commit that re-pins the tables. A rewrite cannot be rebased:
a writer that moved a table meanwhile fails the commit, and the rewrite runs again later.

Who writes the files is an engine's ``rewrite`` capability (:mod:`omni_iceberg.engines`),
asked for by name (:func:`rewrite_engine`): :class:`LocalRewrite` (pyarrow, this process),
registered by this module, or an installed engine (Spark). The same engine finds a
family's orphan files for the maintenance sweep.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, split_qualified
from catalog_ext.errors import ConfigError
from catalog_ext.family import FamilyState
from catalog_ext.iceberg_io import PLANS, bucket_position, read_data_files
from catalog_ext.physical import StagedWrite
from catalog_ext.staging import SweepReport, sweep_orphan_files
from catalog_ext.store import FamilyStore
from catalog_ext.updates import PinSnapshot
from governance.attempt import staged_attempt
from omni_iceberg import engines

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

#: a local re-bucketing unit (files read together, then written out) is cut at this many input bytes
UNIT_BYTES = 128 * 2**20


# ---- what an engine is handed -------------------------------------------------------------------
@dataclass(frozen=True)
class RewriteJob:
    """One physical table's rewrite: its rows at ``snapshot_id``, written anew onto ``writer``'s branch."""

    #: what the rewrite does; an engine lists the operations it runs (``RewriteEngine.operations``)
    operation: ClassVar[str] = ""
    store: FamilyStore
    writer: StagedWrite
    snapshot_id: int
    #: files the rewrite replaces (what the progress bar counts)
    files: int
    #: properties of the snapshot the rewrite leaves on the branch
    properties: dict[str, str]

    @property
    def work(self) -> int:
        """What the progress bar counts for the job once done (files replaced)."""
        return self.files


@dataclass(frozen=True)
class CompactJob(RewriteJob):
    """Merge small files: ``groups`` of them into as few files as each allows, rows sorted by (batch, id)."""

    operation: ClassVar[str] = "compact"
    #: the small files merged together, group by group (a file-level rewrite merges these)
    groups: tuple[tuple[str, ...], ...] = ()
    #: every live file of the partitions holding them (a whole-partition overwrite replaces these)
    partition_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class RebucketJob(RewriteJob):
    """Every row of the table into ``target`` id buckets (from ``current``); the writer carries the new spec."""

    operation: ClassVar[str] = "rebucket"
    current: int = 0
    target: int = 0


@dataclass(frozen=True)
class MaterializeSource:
    """One physical table a materialization reads: its pinned snapshot and the columns taken from it."""

    key: str
    identifier: str
    #: None: the table holds no rows yet (its columns read as NULL)
    snapshot_id: int | None
    #: (physical column, name in the joined result) as :func:`omni_iceberg.read.reader.plan_columns`
    #: gives them: a second part of a column is ``path\x1fpartN``, COALESCEd into ``path``
    columns: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class MaterializeJob(RewriteJob):
    """The logical rows of ``batches`` (``columns``, flat, keys first) written onto the copy's branch.

    The base table's rows LEFT JOIN every other source on the keys, parts COALESCEd; the
    writer's table is the copy (``bucket_count``'s spec, as every family table). ``clear``:
    the batches a rebuild removes from the copy first (every row it held).
    """

    operation: ClassVar[str] = "materialize"
    #: the logical version read (the local engine's sliced reader plans from it)
    state: FamilyState | None = None
    columns: tuple[str, ...] = ()
    #: the copy's column for each of ``columns``, in order
    targets: tuple[str, ...] = ()
    batches: tuple[str, ...] = ()
    #: base table first
    sources: tuple[MaterializeSource, ...] = ()
    bucket_count: int = 0
    clear: tuple[str, ...] = ()
    #: what the job writes, for the progress bar (rows, not files)
    rows: int = 0

    @property
    def work(self) -> int:
        return self.rows


@dataclass(frozen=True)
class RegroupMember:
    """A feature table whose columns move into a column group: emptied on ``writer``'s branch."""

    key: str
    identifier: str
    snapshot_id: int | None
    writer: StagedWrite
    #: (physical column in the member, column in the group)
    columns: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RegroupJob(RewriteJob):
    """The members' rows full-outer-joined by the keys into the group (the writer's table; moved
    values win over the group's), every member file deleted on the member's own branch.

    The group's files of the buckets the members touch are replaced; ``bucket_count`` is the
    family's. ``local(bar)`` is how this process does it (:func:`governance.column_groups`'s
    bucket-by-bucket slices); ``empty_members()`` deletes the members' files (catalog
    metadata only, the same for every engine).
    """

    operation: ClassVar[str] = "regroup"
    members: tuple[RegroupMember, ...] = ()
    bucket_count: int = 0
    rows: int = 0
    local: Callable[[Any], None] | None = None
    empty_members: Callable[[], None] | None = None

    @property
    def work(self) -> int:
        return self.rows


@runtime_checkable
class RewriteEngine(Protocol):
    """An engine's ``rewrite`` capability: ``factory(ctx=None, **options)`` in :mod:`omni_iceberg.engines`.

    It executes; governance plans, chooses and commits. Use it as a context manager:
    :meth:`close` releases what it started (a Spark session).
    """

    name: str
    #: the :attr:`RewriteJob.operation` values it runs
    operations: frozenset[str]

    def rewrite(self, job: RewriteJob, bar: Any) -> None:
        """Write ``job``'s rows anew on its writer's branch (committed there, never published: the
        caller's ONE logical commit does that), advancing ``bar`` by the files replaced."""

    def sweep_orphans(self, catalog: Any, state: FamilyState, *, older_than_s: float, dry_run: bool) -> SweepReport:
        """Delete the data files no snapshot of ``state``'s tables reaches, older than ``older_than_s``."""

    def orphan_sweep_blocker(self, older_than_s: float) -> str | None:
        """Why the engine cannot sweep orphans with this grace period, or None."""

    def close(self) -> None:
        """Release the engine's resources."""

    def __enter__(self) -> RewriteEngine: ...

    def __exit__(self, *exc: object) -> None: ...


# ---- asking the registry --------------------------------------------------------------------------
def rewrite_engine(name: str, ctx: OmniContext | None = None, **options: Any) -> RewriteEngine:
    """The ``rewrite`` capability of engine ``name``, built with ``options`` (Spark's: ``session``, a callable
    giving the session to use; or ``master``/``spark`` to run on one of its own for ``ctx``'s catalog)."""
    register()  # the core's own engine needs no package metadata
    return engines.lookup("rewrite", name)(ctx, **options)


def rewrite_unavailable(name: str, config: Any) -> str | None:
    """Why engine ``name`` cannot rewrite here for ``config`` (not installed, or its own check), or None."""
    register()
    return engines.unavailable("rewrite", name, config)


def orphan_sweep_blocker(name: str, older_than_s: float) -> str | None:
    """Why engine ``name`` cannot sweep orphans with this grace period (not installed included), or None."""
    try:
        with rewrite_engine(name) as engine:
            return engine.orphan_sweep_blocker(older_than_s)
    except ConfigError as e:
        return str(e)


def register() -> None:
    """Register the local engine's ``rewrite`` capability."""
    engines.register("rewrite", "local", LocalRewrite)


# ---- the skeleton -----------------------------------------------------------------------------------
class RewriteTarget(Protocol):
    """A physical table a rewrite plan covers (``TableCompaction``, ``TableRebucket``)."""

    key: str
    identifier: str
    snapshot_id: int | None


def run_rewrite(store: FamilyStore, name: str, version: int, targets: Iterable[RewriteTarget],
                job: Callable[[RewriteTarget, StagedWrite], RewriteJob] | None, *, engine: str,
                spark: Callable[[], Any] | None, what: str, verb: str, properties: dict[str, str],
                command: str, summary: dict[str, str] | Callable[[], dict[str, str]], label: str, total: int,
                progress: bool | None = None,
                updates: Callable[[dict[str, StagedWrite]], tuple[Any, ...]] | None = None,
                bucket_count: int | None = None, prepare: Callable[[FamilyState], None] | None = None,
                commit_updates: Callable[[FamilyState, dict[str, StagedWrite]], tuple[Any, ...]] | None = None,
                unit: str = "file", state: FamilyState | None = None,
                jobs: Callable[[dict[str, StagedWrite]], list[RewriteJob]] | None = None
                ) -> tuple[FamilyState, dict[str, int]]:
    """Rewrite ``targets`` at version ``version`` of ``name`` on engine ``engine``; ONE logical commit.

    ``job(target, writer)`` says what to write for one table (its writer is on a fresh
    private branch, carrying ``properties`` and, for a new count, ``bucket_count``'s
    spec); ``prepare(state)`` runs first (re-bucketing adds the new spec to every table).
    The commit re-pins every target (plus ``updates(writers)``), with operation ``verb``,
    ``command`` and ``summary``. ``spark`` gives the session the Spark engine uses;
    ``what`` names the rewrite when one is missing. Returns the new state and the files
    each rewritten table holds after.

    ``commit_updates(latest, writers)``, when given, is the whole commit instead of the
    re-pins (a materialization adds its table the first time). ``summary`` may be a
    callable, asked after the rewrite (what it wrote). ``unit`` is what the bar counts;
    ``state``: the version ``version`` of ``name`` when the caller loaded it already.
    ``jobs(writers)``, instead of ``job``: the jobs from every target's writer at once (a
    regroup's job writes its group and empties its members, each a target).
    """
    from omni_iceberg.ui.progress import progress_bar

    if engine == "spark" and spark is None:
        raise ConfigError(f"{what} on Spark needs a Spark session: call Omni.{verb}(..., engine='spark'), "
                          "which starts one on this catalog, or pass spark=")
    targets = list(targets)
    ns, table = split_qualified(name)
    if state is None or state.version != version:
        state = store.load(ns, table, version)
    if prepare is not None:
        prepare(state)
    run_id = f"{verb}-{uuid.uuid4().hex[:12]}"
    writers = {t.key: store.staged_write(state, t.identifier, t.snapshot_id, run_id, properties, rebasable=False,
                                         **({"bucket_count": bucket_count} if bucket_count is not None else {}))
               for t in targets}
    files_after: dict[str, int] = {}
    bar = progress_bar(progress, label, unit, total=total)
    with staged_attempt(bar, writers.values), \
            rewrite_engine(engine, **({"session": spark} if engine != "local" else {})) as rewriter:
        # the rewritten files were never pinned: staged_attempt deletes them on failure
        for one in (jobs(writers) if jobs is not None else (job(t, writers[t.key]) for t in targets)):  # type: ignore[misc]
            rewriter.rewrite(one, bar)
        for t in targets:
            files_after[t.identifier] = sum(1 for _ in store.catalog.load_table(t.identifier).scan(
                snapshot_id=writers[t.key].staged_snapshot_id).plan_files())

        def pins(latest: FamilyState) -> tuple[Any, ...]:
            if commit_updates is not None:
                return commit_updates(latest, writers)
            # a rewrite cannot be rebased: a writer that moved a table meanwhile fails this commit
            # (PinConflict; StagedWrite.rebasable is False), and the next run plans from its version
            return (*(updates(writers) if updates is not None else ()),
                    *(PinSnapshot(t.key, writers[t.key].staged_snapshot_id, t.snapshot_id) for t in targets))

        said = summary() if callable(summary) else summary
        new_state = store.commit(ns, table, pins, operation=verb, command=command, summary=lambda _: said,
                                 staged=list(writers.values()))
    return new_state, files_after


# ---- the local engine -------------------------------------------------------------------------------
class LocalRewrite:
    """The local ``rewrite`` capability: pyarrow in this process, one group of files in memory at a time."""

    name = "local"
    operations = frozenset({"compact", "rebucket", "materialize", "regroup"})

    def __init__(self, ctx: OmniContext | None = None, **_ignored: Any):
        # other engines' options (a session) mean nothing here
        pass

    def __enter__(self) -> LocalRewrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def rewrite(self, job: RewriteJob, bar: Any) -> None:
        if isinstance(job, CompactJob):
            _compact(job, bar)
        elif isinstance(job, RebucketJob):
            _rebucket(job, bar)
        elif isinstance(job, MaterializeJob):
            _materialize(job, bar)
        elif isinstance(job, RegroupJob) and job.local is not None:
            job.local(bar)  # the planning module's own bucket-by-bucket code
        else:
            raise ConfigError(f"the local engine cannot run a {job.operation!r} rewrite "
                              f"(it runs: {', '.join(sorted(self.operations))})")

    def sweep_orphans(self, catalog: Any, state: FamilyState, *, older_than_s: float, dry_run: bool) -> SweepReport:
        """:func:`catalog_ext.staging.sweep_orphan_files`: every manifest of every snapshot, and a storage listing."""
        return sweep_orphan_files(catalog, state, older_than_s=older_than_s, dry_run=dry_run)

    def orphan_sweep_blocker(self, older_than_s: float) -> str | None:
        return None


def _compact(job: CompactJob, bar: Any) -> None:
    """Merge each group of small files with pyarrow, as ONE snapshot on the job's branch."""
    ice = job.store.catalog.load_table(job.writer.identifier)
    live = {task.file.file_path: task.file for task in PLANS.tasks(ice.scan(snapshot_id=job.snapshot_id))}
    for group in job.groups:
        files = [live[p] for p in group]
        rows = read_data_files(ice, files)
        job.writer.write_replacement(files, rows.sort_by([(BATCH_COLUMN, "ascending"), (ID_COLUMN, "ascending")]))
        if bar is not None:
            bar.update(len(files))
    # one snapshot per table, not per group: see StagedWrite.write_replacement
    job.writer.commit_replacements(job.properties)


def _rebucket(job: RebucketJob, bar: Any) -> None:
    """The table's files rewritten unit by unit (a split or a merge at a time) on the job's branch."""
    ice = job.store.catalog.load_table(job.writer.identifier)
    for unit in _units(ice, job.snapshot_id, job.current, job.target):
        rows = read_data_files(ice, unit)
        job.writer.write_replacement(unit, rows.sort_by([(BATCH_COLUMN, "ascending"), (ID_COLUMN, "ascending")]))
        if bar is not None:
            bar.update(len(unit))
    job.writer.commit_replacements(job.properties)


def _materialize(job: MaterializeJob, bar: Any) -> None:
    """The job's batches read slice by slice (:func:`governance.slices.iter_logical_slices`: memory
    follows ``OMNI_MEMORY_LIMIT_MB``), each slice written as it comes; one snapshot at the end."""
    from governance.slices import iter_logical_slices, slice_bytes

    writer = job.writer
    # the rows held before a flush count against the operation's memory too (#37): at
    # OMNI_MEMORY_LIMIT_MB=64 the 128 MiB write buffer, not the read, set the peak
    writer.buffer_bytes = min(writer.buffer_bytes, slice_bytes())
    if job.clear:
        writer.clear_batches(list(job.clear))
    arrow_schema = writer.table.schema().as_arrow()
    for batch in job.batches:
        for part in iter_logical_slices(job.store.catalog, job.state, list(job.columns), batch):
            part = part.rename_columns([ID_COLUMN, BATCH_COLUMN, *job.targets])
            writer.write(part.cast(arrow_schema))
            if bar is not None:
                bar.update(part.num_rows)
    writer.stage()


def _units(ice: Any, snapshot_id: int, current: int, target: int) -> list[list[Any]]:
    """Groups of live files rewritten together: files of one old bucket (split) or of the old
    buckets that make one new bucket (merge), cut at :data:`UNIT_BYTES` of input."""
    specs = ice.metadata.specs()
    by_unit: dict[int, list[Any]] = {}
    for task in PLANS.tasks(ice.scan(snapshot_id=snapshot_id)):
        f = task.file
        old = f.partition[bucket_position(specs[f.spec_id])]
        by_unit.setdefault(old if target >= current else old % target, []).append(f)
    units: list[list[Any]] = []
    for key in sorted(by_unit):
        unit: list[Any] = []
        size = 0
        for f in sorted(by_unit[key], key=lambda f: f.file_path):
            unit.append(f)
            size += f.file_size_in_bytes
            if size >= UNIT_BYTES:
                units.append(unit)
                unit, size = [], 0
        if unit:
            units.append(unit)
    return units


__all__ = ["CompactJob", "LocalRewrite", "MaterializeJob", "MaterializeSource", "RebucketJob", "RegroupJob", "RegroupMember", "RewriteEngine", "RewriteJob", "orphan_sweep_blocker",
           "register", "rewrite_engine", "rewrite_unavailable", "run_rewrite"]
