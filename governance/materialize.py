"""Materialized wide tables: columns that are read together, pre-joined into one family table.

Every feature has its own physical table, so a query over k features joins k tables, and
an engine reading the view resolves every table the view names. A materialization copies
a chosen column set into ONE physical table (``role="materialized"``, keys + one flat
column per logical column) pinned by the logical version like any other. While its values
equal their sources' (:meth:`catalog_ext.family.FamilyState.coverage_signature`: the same
batches and the same data version of every value), every reader prefers it: ``omni sql``,
``omni export``, ``Omni.read`` and the Spark and Trino view bodies read the copy instead
of the join (``physical_columns_of`` puts a fresh copy first). Once a batch arrives or a
column is recomputed the copy is stale and readers go back to the sources, so no reader
ever sees a value the sources do not hold. ``omni accelerate NAME --refresh`` brings it
back:

- **append**: only new batches arrived and the copied batches' values are unchanged -
  the new batches' rows are appended (cost: the new rows);
- **rebuild**: a copied column was recomputed (new data version) - the copy is cleared
  and rewritten from the sources.

Prepare-Execute-Commit like every governance operation: the plan is printable (and JSON),
rows go to a staging branch, ONE logical commit adds or re-pins the table and records
what it covers. The rows are written by a rewrite engine (:mod:`governance.rewrite`):
the local one joins the sources slice by slice in this process, Spark's joins them on the
cluster (``--engine local|spark|auto``); the plan and the commit are the same. A
concurrent writer makes the commit fail cleanly (the branch is dropped and the next
refresh starts over). Older versions keep reading what they read; retention
expires the copy's snapshots like the rest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES, split_qualified
from catalog_ext.errors import OmniError
from catalog_ext.family import FamilyState, MaterializedCopy, PhysicalColumn, PhysicalTable, PhysicalTableGroup
from catalog_ext.physical import StagedWrite
from catalog_ext.store import FamilyStore
from catalog_ext.updates import AddPhysicalColumns, AddPhysicalTable, PinSnapshot, RecordMaterialization
from governance.rewrite import MaterializeJob, MaterializeSource, run_rewrite

OPERATION = "materialize"
GROUP = PhysicalTableGroup(name="materialized", purpose="pre-joined copies of co-read columns")


class MaterializeError(OmniError):
    """A materialization that cannot be made: unknown or key columns, nothing to copy."""

    exit_code = 2  # bad input, as an unknown column anywhere else (SchemaConflictError)


@dataclass
class MaterializePlan:
    logical_table: str
    version: int
    columns: list[str]
    table_key: str
    identifier: str
    action: str  # build | append | rebuild | fresh
    batches: list[str] = field(default_factory=list)  # the batches whose rows are written
    rows: int = 0
    sources: list[str] = field(default_factory=list)  # the tables the copy replaces in reads

    def describe(self) -> str:
        what = {"build": "build", "append": "append new batches to", "rebuild": "rebuild",
                "fresh": "nothing to do for"}[self.action]
        lines = [f"{what} {self.identifier} ({len(self.columns)} column(s) of {self.logical_table}, version "
                 f"{self.version})"]
        if self.action != "fresh":
            lines.append(f"  writes {self.rows:,} rows of batch(es) {', '.join(self.batches) or '-'}")
        lines.append(f"  replaces reads of: {', '.join(self.sources)}")
        lines.append(f"  columns: {', '.join(self.columns)}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def physical_name(path: str) -> str:
    """The flat column name of logical ``path`` in a materialized table (``RawData.url`` -> ``RawData__url``)."""
    return path.replace(".", "__")


def table_key_for(columns: list[str]) -> str:
    return "m_" + hashlib.sha256("\n".join(sorted(columns)).encode()).hexdigest()[:12]


def resolve_columns(state: FamilyState, columns: list[str]) -> list[str]:
    """Logical leaf paths of ``columns`` (stage names expand to their fields), checked."""
    from catalog_ext.suggest import did_you_mean

    known = [c.path for c in state.columns]
    out: list[str] = []
    for name in columns:
        name = name.strip()
        if name in (ID_COLUMN, BATCH_COLUMN):
            continue  # every physical table holds the keys
        if name in STAGES:
            leaves = [c.path for c in state.stage_fields(name)]
            if not leaves:
                raise MaterializeError(f"stage {name} of {state.table.identifier} has no fields yet")
            out += [p for p in leaves if p not in out]
            continue
        if not state.has_column(name):
            raise MaterializeError(f"{state.table.identifier} has no column {name!r}{did_you_mean(name, known)}")
        if not state.physical_columns_of(name):
            raise MaterializeError(f"column {name!r} of {state.table.identifier} has no values anywhere yet "
                                   "(backfill its feature first)")
        if name not in out:
            out.append(name)
    if not out:
        raise MaterializeError("name at least one column to materialize (the keys are always included)")
    return out


def plan_materialization(store: FamilyStore, name: str, columns: list[str]) -> MaterializePlan:
    ns, table = split_qualified(name)
    state = store.load(ns, table)
    paths = resolve_columns(state, columns)
    key = table_key_for(paths)
    existing = next((m for m in state.materializations if m.table_key == key), None)
    all_batches = [b.name for b in state.batches]
    plan = MaterializePlan(state.table.identifier, state.version, paths, key,
                           f"{ns}.{table}__{key}", "build", list(all_batches))
    if existing is not None:
        if key in state.fresh_materialized_tables():
            plan.action, plan.batches = "fresh", []
        elif existing.batches and set(existing.batches) <= set(all_batches) and \
                state.coverage_signature(paths, existing.batches) == existing.signature:
            plan.action = "append"
            plan.batches = [b for b in all_batches if b not in existing.batches]
        else:
            plan.action = "rebuild"
    plan.rows = sum(b.rows for b in state.batches if b.name in plan.batches)
    sources = {}
    for path in paths:
        for pc in state.physical_columns_of(path):
            if pc.table != key:
                sources[state.physical_table(pc.table).identifier] = None
                break
    plan.sources = list(sources)
    return plan


def materialize(store: FamilyStore, name: str, columns: list[str], *, dry_run: bool = False,
                progress: bool | None = None, command: str = "", engine: str = "local",
                spark: Callable[[], Any] | None = None, spark_blocker: str | None = None,
                threshold_bytes: int | None = None) -> dict[str, Any]:
    """Build, append to or rebuild the materialization of ``columns`` (see the module docstring).

    ``engine``: ``local`` (the sliced join in this process), ``spark`` (the Spark engine's
    ``rewrite`` capability joins the sources at their pinned snapshots and writes the copy on
    the same staging branch: :mod:`spark_udfs.materialize`), or ``auto``: Spark when the
    source columns of the batches to write hold at least the Spark threshold and Spark can
    run here (``spark_blocker`` None), as for compaction. Same plan, same ONE commit.
    """
    from omni_iceberg.backfill.choose import choose_rewrite_engine

    plan = plan_materialization(store, name, columns)
    ns, table = split_qualified(name)
    state = store.load(ns, table, plan.version)
    chosen, reason = choose_rewrite_engine(engine, lambda: source_bytes(store, state, plan), spark=spark,
                                           spark_blocker=spark_blocker, what="the source columns to join hold",
                                           threshold_bytes=threshold_bytes,
                                           nothing="the copy is fresh" if plan.action == "fresh" else "")
    report: dict[str, Any] = {"plan": plan.to_dict(), "logical_version": plan.version, "rows_written": 0,
                              "engine": chosen, "engine_reason": reason}
    if dry_run or plan.action == "fresh":
        return report
    if chosen == "spark" and spark is not None:
        spark()  # an unreachable master fails here, before the copy's table is created
    existing = state.physical_table(plan.table_key) if plan.table_key in {t.key for t in state.tables} else None
    target = _Target(plan.table_key, plan.identifier,
                     _create_copy(store, state, plan) if existing is None else existing.snapshot_id)
    copy = MaterializedCopy(table_key=plan.table_key, columns=tuple(plan.columns),
                            batches=tuple(b.name for b in state.batches),
                            signature=state.coverage_signature(plan.columns), built_version=state.version)
    clear = ([b.name for b in state.batches] + list(_copied_batches(state, plan.table_key))
             if plan.action == "rebuild" else [])

    written: dict[str, StagedWrite] = {}

    def job(t: _Target, writer: StagedWrite) -> MaterializeJob:
        written["copy"] = writer
        return MaterializeJob(store, writer, t.snapshot_id, 0, {"omni.operation": OPERATION}, state=state,
                              columns=tuple(plan.columns), targets=tuple(physical_name(p) for p in plan.columns),
                              batches=tuple(plan.batches), sources=materialize_sources(state, plan.columns),
                              bucket_count=state.table.bucket_count, clear=tuple(dict.fromkeys(clear)),
                              rows=plan.rows)

    def updates(latest: FamilyState, writers: dict[str, StagedWrite]) -> tuple[Any, ...]:
        if latest.version != state.version:
            # values may have changed under the copy: refuse rather than record a wrong signature
            from catalog_ext.updates import PreconditionFailed

            raise PreconditionFailed(f"{state.table.identifier} moved to version {latest.version} while "
                                     f"{plan.identifier} was written from version {state.version}; run it again")
        staged = writers[plan.table_key].staged_snapshot_id
        out: list[Any] = []
        if existing is None:
            out.append(AddPhysicalTable(PhysicalTable(key=plan.table_key, identifier=plan.identifier,
                                                      group=GROUP.name, snapshot_id=staged,
                                                      role="materialized"), GROUP))
            out.append(AddPhysicalColumns(tuple(PhysicalColumn(table=plan.table_key, name=physical_name(p),
                                                               logical=p) for p in plan.columns)))
        else:
            out.append(PinSnapshot(plan.table_key, staged, existing.snapshot_id))
        out.append(RecordMaterialization(copy))
        return tuple(out)

    def summary() -> dict[str, str]:
        # the rows the copy's branch gained, whoever wrote them (the Spark engine reports no count)
        report["rows_written"] = sum(int(f.record_count) for f in written["copy"].run_changes().live.values())
        return {"omni.materialized": plan.identifier, "omni.action": plan.action,
                "omni.rows": str(report["rows_written"]), "omni.engine": chosen}

    new_state, _ = run_rewrite(
        store, name, plan.version, [target], job, engine=chosen, spark=spark, what="materialization",
        verb=OPERATION, properties={"omni.operation": OPERATION},
        command=command or f"accelerate {plan.logical_table} --materialize {','.join(plan.columns)}",
        summary=summary, label=f"materialize {plan.identifier}", total=plan.rows, progress=progress,
        commit_updates=updates, unit="row", state=state)
    report["logical_version"] = new_state.version
    return report


@dataclass(frozen=True)
class _Target:
    """The copy, as :func:`governance.rewrite.run_rewrite` names what it rewrites."""

    key: str
    identifier: str
    snapshot_id: int


def _create_copy(store: FamilyStore, state: FamilyState, plan: MaterializePlan) -> int:
    """Create the copy's table (the family's bucket spec); returns its empty first snapshot."""
    from pyiceberg.exceptions import TableAlreadyExistsError

    from catalog_ext.physical import create_physical_table, first_snapshot_id
    from catalog_ext.types import to_iceberg

    value_columns = {physical_name(p): to_iceberg(state.column(p).type) for p in plan.columns}
    try:
        create_physical_table(store.catalog, plan.identifier, value_columns, state.table.bucket_count,
                              {"omni.logical-table": state.table.identifier, "omni.role": "materialized",
                               "omni.columns": ",".join(plan.columns)})
    except TableAlreadyExistsError:
        # left by a build that died before its commit: ours if it copies the same columns
        if store.catalog.load_table(plan.identifier).properties.get("omni.columns") != ",".join(plan.columns):
            raise MaterializeError(f"table {plan.identifier} exists and is not this materialization") from None
    return first_snapshot_id(store.catalog, plan.identifier)


def materialize_sources(state: FamilyState, columns: list[str]) -> tuple[MaterializeSource, ...]:
    """What the copy of ``columns`` reads: every physical table the logical read of them joins
    (:func:`omni_iceberg.read.reader.plan_columns`, base table first), at its pinned snapshot."""
    from omni_iceberg.read.reader import plan_columns

    out = []
    for key, cols in plan_columns(state, columns).items():
        meta = state.physical_table(key)
        out.append(MaterializeSource(key, meta.identifier, meta.snapshot_id, tuple((p, n) for p, n in cols)))
    return tuple(out)


def source_bytes(store: FamilyStore, state: FamilyState, plan: MaterializePlan) -> int:
    """Stored bytes of the columns the copy reads, in the batches it writes (planning only:
    file metadata, no data read) - what ``--engine auto`` weighs against the Spark threshold."""
    from pyiceberg.expressions import In

    if not plan.batches:
        return 0
    total = 0
    for source in materialize_sources(state, plan.columns):
        if source.snapshot_id is None:
            continue
        table = store.catalog.load_table(source.identifier)
        schema = table.schema()
        names = [ID_COLUMN, BATCH_COLUMN] + [p for p, _ in source.columns]
        ids = {schema.find_field(n).field_id for n in names}
        for task in table.scan(snapshot_id=source.snapshot_id, row_filter=In(BATCH_COLUMN, set(plan.batches))
                               ).plan_files():
            sizes = task.file.column_sizes or {}
            found = [sizes[i] for i in ids if i in sizes]
            total += sum(found) if found else task.file.file_size_in_bytes
    return total


def _copied_batches(state: FamilyState, key: str) -> tuple[str, ...]:
    return next((m.batches for m in state.materializations if m.table_key == key), ())


def refresh_materializations(store: FamilyStore, name: str, *, dry_run: bool = False,
                             progress: bool | None = None, **engine: Any) -> list[dict[str, Any]]:
    """Bring every stale materialization of ``name`` back (append or rebuild); one commit each.
    ``engine``: :func:`materialize`'s engine options (``engine``, ``spark``, ``spark_blocker``)."""
    ns, table = split_qualified(name)
    state = store.load(ns, table)
    fresh = state.fresh_materialized_tables()
    return [materialize(store, name, list(m.columns), dry_run=dry_run, progress=progress,
                        command=f"accelerate {state.table.identifier} --refresh", **engine)
            for m in state.materializations if m.table_key not in fresh]
