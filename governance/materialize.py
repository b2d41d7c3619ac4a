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
what it covers; a concurrent writer makes the commit fail cleanly (the branch is dropped
and the next refresh starts over). Older versions keep reading what they read; retention
expires the copy's snapshots like the rest.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES, split_qualified
from catalog_ext.errors import OmniError
from catalog_ext.family import FamilyState, MaterializedCopy, PhysicalColumn, PhysicalTable, PhysicalTableGroup
from catalog_ext.store import FamilyStore
from catalog_ext.updates import AddPhysicalColumns, AddPhysicalTable, PinSnapshot, RecordMaterialization
from governance.attempt import staged_attempt

OPERATION = "materialize"
GROUP = PhysicalTableGroup(name="materialized", purpose="pre-joined copies of co-read columns")


class MaterializeError(OmniError):
    """A materialization that cannot be made: unknown or key columns, nothing to copy."""


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
                progress: bool | None = None, command: str = "") -> dict[str, Any]:
    """Build, append to or rebuild the materialization of ``columns`` (see the module docstring)."""
    from catalog_ext.physical import create_physical_table
    from catalog_ext.types import to_iceberg
    from governance.slices import iter_logical_slices
    from omni_iceberg.ui.progress import progress_bar
    from pyiceberg.exceptions import TableAlreadyExistsError

    plan = plan_materialization(store, name, columns)
    report: dict[str, Any] = {"plan": plan.to_dict(), "logical_version": plan.version, "rows_written": 0}
    if dry_run or plan.action == "fresh":
        return report
    ns, table = split_qualified(name)
    state = store.load(ns, table, plan.version)
    existing = state.physical_table(plan.table_key) if plan.table_key in {t.key for t in state.tables} else None
    if existing is None:
        value_columns = {physical_name(p): to_iceberg(state.column(p).type) for p in plan.columns}
        try:
            create_physical_table(store.catalog, plan.identifier, value_columns, state.table.bucket_count,
                                  {"omni.logical-table": state.table.identifier, "omni.role": "materialized",
                                   "omni.columns": ",".join(plan.columns)})
        except TableAlreadyExistsError:
            # left by a build that died before its commit: ours if it copies the same columns
            if store.catalog.load_table(plan.identifier).properties.get("omni.columns") != ",".join(plan.columns):
                raise MaterializeError(f"table {plan.identifier} exists and is not this materialization") from None
        from catalog_ext.physical import first_snapshot_id

        base_snapshot = first_snapshot_id(store.catalog, plan.identifier)
    else:
        base_snapshot = existing.snapshot_id
    run_id = f"materialize-{uuid.uuid4().hex[:12]}"
    writer = store.staged_write(state, plan.identifier, base_snapshot, run_id,
                                {"omni.operation": OPERATION}, rebasable=False)
    from governance.slices import slice_bytes

    # the rows held before a flush count against the operation's memory too (#37): at
    # OMNI_MEMORY_LIMIT_MB=64 the 128 MiB write buffer, not the read, set the peak
    writer.buffer_bytes = min(writer.buffer_bytes, slice_bytes())
    bar = progress_bar(progress, f"materialize {plan.identifier}", "row", total=plan.rows)
    with staged_attempt(bar, lambda: [writer]):
        if plan.action == "rebuild":
            writer.clear_batches([b.name for b in state.batches] + list(_copied_batches(state, plan.table_key)))
        arrow_schema = writer.table.schema().as_arrow()
        for batch in plan.batches:
            for part in iter_logical_slices(store.catalog, state, plan.columns, batch):
                part = part.rename_columns([ID_COLUMN, BATCH_COLUMN] + [physical_name(p) for p in plan.columns])
                writer.write(part.cast(arrow_schema))
                report["rows_written"] += part.num_rows
                if bar is not None:
                    bar.update(part.num_rows)
        staged = writer.stage()
        copy = MaterializedCopy(table_key=plan.table_key, columns=tuple(plan.columns),
                                batches=tuple(b.name for b in state.batches),
                                signature=state.coverage_signature(plan.columns), built_version=state.version)

        def updates(latest: FamilyState):
            if latest.version != state.version:
                # values may have changed under the copy: refuse rather than record a wrong signature
                from catalog_ext.updates import PreconditionFailed

                raise PreconditionFailed(f"{state.table.identifier} moved to version {latest.version} while "
                                         f"{plan.identifier} was written from version {state.version}; run it again")
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

        new_state = store.commit(ns, table, updates, operation=OPERATION,
                                 command=command or f"accelerate {plan.logical_table} --materialize "
                                                    f"{','.join(plan.columns)}",
                                 summary=lambda _: {"omni.materialized": plan.identifier, "omni.action": plan.action,
                                                    "omni.rows": str(report["rows_written"])},
                                 staged=[writer])
    report["logical_version"] = new_state.version
    return report


def _copied_batches(state: FamilyState, key: str) -> tuple[str, ...]:
    return next((m.batches for m in state.materializations if m.table_key == key), ())


def refresh_materializations(store: FamilyStore, name: str, *, dry_run: bool = False,
                             progress: bool | None = None) -> list[dict[str, Any]]:
    """Bring every stale materialization of ``name`` back (append or rebuild); one commit each."""
    ns, table = split_qualified(name)
    state = store.load(ns, table)
    fresh = state.fresh_materialized_tables()
    return [materialize(store, name, list(m.columns), dry_run=dry_run, progress=progress,
                        command=f"accelerate {state.table.identifier} --refresh")
            for m in state.materializations if m.table_key not in fresh]
