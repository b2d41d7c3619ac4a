"""Typed changes to a :class:`FamilyState`, each with its precondition.

A logical commit is a tuple of updates applied to the latest state. When a commit
loses the race, the same updates are re-applied to the new latest state; a
precondition that no longer holds either asks for a rebase (:class:`PinConflict`:
another writer moved a physical table we also wrote) or fails the commit cleanly.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog_ext.family import (
    Batch, ComputedUnit, FamilyState, FeatureBinding, HotColumns, LogicalColumn, MaterializedCopy, PhysicalColumn,
    PhysicalTable, PhysicalTableGroup,
)
from catalog_ext.errors import CommitConflictError


class PreconditionFailed(CommitConflictError):
    """The latest state no longer allows this update; retrying cannot help."""


class PinConflict(CommitConflictError):
    """A physical table we wrote was moved by another commit: rebase, then retry."""

    def __init__(self, table_key: str, expected: int | None, actual: int | None):
        super().__init__(
            f"physical table {table_key!r} moved from snapshot {expected} to {actual} during this commit"
        )
        self.table_key = table_key
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True)
class AddBatch:
    batch: Batch

    def apply(self, s: FamilyState) -> dict:
        if s.batch(self.batch.name) is not None:
            raise PreconditionFailed(
                f"batch {self.batch.name!r} of {s.table.identifier} was committed by another writer "
                f"at version {s.batch(self.batch.name).version}"
            )
        return {"batches": s.batches + (self.batch,)}


@dataclass(frozen=True)
class PinSnapshot:
    """Move a physical table's pin from ``expected`` to ``snapshot_id``."""

    table_key: str
    snapshot_id: int
    expected: int | None

    def apply(self, s: FamilyState) -> dict:
        current = s.physical_table(self.table_key).snapshot_id
        if current != self.expected:
            raise PinConflict(self.table_key, self.expected, current)
        # a new snapshot may hold rows again: an emptied table (column groups) is read again
        tables = tuple(
            t.model_copy(update={"snapshot_id": self.snapshot_id, "emptied": False}) if t.key == self.table_key
            else t for t in s.tables
        )
        return {"tables": tables}


@dataclass(frozen=True)
class SetBucketCount:
    """The family's id-bucket count becomes ``count`` (a re-bucketing rewrote every table)."""

    expected: int
    count: int

    def apply(self, s: FamilyState) -> dict:
        if s.table.bucket_count != self.expected:
            raise PreconditionFailed(
                f"{s.table.identifier} has {s.table.bucket_count} id buckets now, not {self.expected}: "
                f"another re-bucketing committed first")
        return {"table": s.table.model_copy(update={"bucket_count": self.count})}


@dataclass(frozen=True)
class AddLogicalColumns:
    columns: tuple[LogicalColumn, ...]

    def apply(self, s: FamilyState) -> dict:
        new = []
        for col in self.columns:
            if s.has_column(col.path):
                existing = s.column(col.path)
                if existing.type != col.type:
                    raise PreconditionFailed(
                        f"column {col.path!r} of {s.table.identifier} is {existing.type}, not {col.type}"
                    )
                continue  # same column added concurrently: idempotent
            new.append(col)
        return {"columns": s.columns + tuple(new)}


@dataclass(frozen=True)
class AddPhysicalTable:
    table: PhysicalTable
    group: PhysicalTableGroup

    def apply(self, s: FamilyState) -> dict:
        if any(t.key == self.table.key for t in s.tables):
            raise PreconditionFailed(f"physical table {self.table.key!r} already belongs to {s.table.identifier}")
        groups = s.groups if any(g.name == self.group.name for g in s.groups) else s.groups + (self.group,)
        return {"tables": s.tables + (self.table,), "groups": groups}


@dataclass(frozen=True)
class AddPhysicalColumns:
    columns: tuple[PhysicalColumn, ...]

    def apply(self, s: FamilyState) -> dict:
        existing = {(p.table, p.name) for p in s.physical_columns}
        new = []
        for pc in self.columns:
            if not s.has_column(pc.logical):
                raise PreconditionFailed(f"physical column {pc.table}.{pc.name} maps to unknown column {pc.logical!r}")
            if (pc.table, pc.name) not in existing:
                new.append(pc)
        return {"physical_columns": s.physical_columns + tuple(new)}


@dataclass(frozen=True)
class BindFeature:
    """Make ``binding`` the current version of its feature; older versions stay as aliases.

    ``remap`` moves logical columns to the new version's physical columns (the logical
    name follows the current version); ``aliases`` are the logical columns that keep
    the previous version queryable.
    """

    binding: FeatureBinding
    remap: tuple[PhysicalColumn, ...] = ()
    aliases: tuple[tuple[LogicalColumn, PhysicalColumn], ...] = ()

    def apply(self, s: FamilyState) -> dict:
        b = self.binding
        same = s.feature(b.name, b.version)
        if same is not None:
            if same.code_hash != b.code_hash or same.definition != b.definition:
                raise PreconditionFailed(
                    f"feature {b.key} is already registered on {s.table.identifier} with different code or "
                    f"definition; give the new code a new version"
                )
            return {}
        features = tuple(f.model_copy(update={"current": False}) if f.name == b.name else f for f in s.features)
        remapped_logicals = {pc.logical for pc in self.remap}
        pcols = tuple(pc for pc in s.physical_columns if pc.logical not in remapped_logicals) + self.remap
        columns = s.columns
        added: set[str] = set()
        for alias_col, alias_pc in self.aliases:  # an alias may have several parts (column groups)
            if alias_col.path not in added and not any(c.path == alias_col.path for c in columns):
                columns = columns + (alias_col,)
                added.add(alias_col.path)
            if alias_col.path in added:
                pcols = pcols + (alias_pc,)
        return {"features": features + (b,), "physical_columns": pcols, "columns": columns}


@dataclass(frozen=True)
class RecordFeatureSource:
    """Store ``definition`` for the registered ``name@version``: the same feature, its UDF file moved.

    Only the definition's ``source`` (where a user's .py file lives) may differ; the code
    hash must be the one registered, so no other process runs different code under
    this version.
    """

    name: str
    version: str
    definition: str  # canonical JSON, as in FeatureBinding.definition
    code_hash: str

    def apply(self, s: FamilyState) -> dict:
        import json

        same = s.feature(self.name, self.version)
        if same is None:
            raise PreconditionFailed(f"feature {self.name}@{self.version} is not registered on {s.table.identifier}")

        def without_source(text: str) -> dict:
            data = json.loads(text)
            data.pop("source", None)
            return data

        if same.code_hash != self.code_hash or without_source(same.definition) != without_source(self.definition):
            raise PreconditionFailed(
                f"feature {same.key} is registered on {s.table.identifier} with different code or parameters; "
                f"only where its UDF file lives may change without a new version")
        features = tuple(f.model_copy(update={"definition": self.definition}) if f is same else f
                         for f in s.features)
        return {"features": features}


@dataclass(frozen=True)
class MarkComputed:
    """Record computed units. A unit recomputed with another data version (it was stale)
    replaces the earlier record of the same feature version and batch; the same data
    version recorded twice (two runs raced) is kept once. A unit of a batch the table no
    longer has (dropped while the run computed it) is not recorded: the store left its
    rows out of the commit (``FamilyStore.commit``), and a record would mark a batch
    submitted again under that name as computed."""

    units: tuple[ComputedUnit, ...]

    def apply(self, s: FamilyState) -> dict:
        for u in self.units:
            if s.feature(u.feature, u.version) is None:
                raise PreconditionFailed(f"feature {u.feature}@{u.version} is not registered on {s.table.identifier}")
        latest = {(u.feature, u.version, u.batch): u for u in s.computed}
        batches = {b.name for b in s.batches}
        replaced: set[tuple[str, str, str]] = set()
        new: list[ComputedUnit] = []
        for u in self.units:
            if u.batch not in batches:
                continue
            key = (u.feature, u.version, u.batch)
            old = latest.get(key)
            if old is not None and old.data_version == u.data_version:
                continue
            if old is not None:
                replaced.add(key)
            new.append(u)
        kept = tuple(u for u in s.computed if (u.feature, u.version, u.batch) not in replaced)
        return {"computed": kept + tuple(new)}


@dataclass(frozen=True)
class MarkRetried:
    """A retry run added values to computed units: ``(feature, version, batch, values added)``.

    Their data version is the same, but their values are not: the unit's ``retried``
    count moves, which changes the coverage signature, so a materialized copy or the hot
    store holding the old NULLs is seen as stale. Units are updated in place (a sealed
    segment of the family document changes, none after it shifts).
    """

    units: tuple[tuple[str, str, str, int], ...]

    def apply(self, s: FamilyState) -> dict:
        added = {(f, v, b): n for f, v, b, n in self.units if n}
        return {"computed": tuple(
            u.model_copy(update={"retried": u.retried + 1, "errors": max(0, u.errors - added[key])})
            if (key := (u.feature, u.version, u.batch)) in added else u for u in s.computed)}


@dataclass(frozen=True)
class DropBatch:
    """Remove batch ``name`` and the records of the feature units computed for it.

    The rows themselves leave the physical tables through the PinSnapshot updates of
    the same commit (governance/drop_batch.py); this is the mapping's side.
    """

    name: str

    def apply(self, s: FamilyState) -> dict:
        if s.batch(self.name) is None:
            raise PreconditionFailed(f"batch {self.name!r} of {s.table.identifier} was dropped by another writer")
        after = s.model_copy(update={"batches": tuple(b for b in s.batches if b.name != self.name),
                                     "computed": tuple(u for u in s.computed if u.batch != self.name)})
        # a materialized copy that was fresh loses the batch's rows in the same commit: still fresh
        fresh = s.fresh_materialized_tables()
        copies = tuple(m.model_copy(update={"batches": tuple(b for b in m.batches if b != self.name),
                                            "signature": after.coverage_signature(m.columns)})
                       if m.table_key in fresh else m for m in s.materializations)
        return {"batches": after.batches, "computed": after.computed, "materializations": copies}


@dataclass(frozen=True)
class RecordMaterialization:
    """``copy`` now describes its table (built or refreshed); replaces the table's earlier record."""

    copy: MaterializedCopy

    def apply(self, s: FamilyState) -> dict:
        if not any(t.key == self.copy.table_key for t in s.tables):
            raise PreconditionFailed(f"materialized table {self.copy.table_key!r} is not in {s.table.identifier}")
        missing = [c for c in self.copy.columns if not s.has_column(c)]
        if missing:
            raise PreconditionFailed(f"materialized column(s) {', '.join(missing)} left {s.table.identifier}")
        kept = tuple(m for m in s.materializations if m.table_key != self.copy.table_key)
        return {"materializations": kept + (self.copy,)}


@dataclass(frozen=True)
class SetHotColumns:
    """Choose the hot columns of the logical table (None: none); each must still be there."""

    hot: HotColumns | None

    def apply(self, s: FamilyState) -> dict:
        missing = [c for c in (self.hot.columns if self.hot else ()) if not s.has_column(c)]
        if missing:
            raise PreconditionFailed(f"hot column(s) {', '.join(missing)} left {s.table.identifier}")
        return {"hot": self.hot}


@dataclass(frozen=True)
class MarkEmptied:
    """Readers skip these tables: their pinned snapshots hold no rows (all moved to a group)."""

    table_keys: tuple[str, ...]

    def apply(self, s: FamilyState) -> dict:
        return {"tables": tuple(t.model_copy(update={"emptied": True}) if t.key in self.table_keys else t
                                for t in s.tables)}


@dataclass(frozen=True)
class ExpectMapping:
    """The moved tables still hold the logical columns the plan moved (no registration remapped them)."""

    member_columns: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]

    def apply(self, s: FamilyState) -> dict:
        for key, cols in self.member_columns:
            now = tuple((pc.name, pc.logical) for pc in s.columns_of_table(key))
            if now != cols:
                raise PreconditionFailed(f"the columns of {key} changed during the regroup; run it again")
        return {}


@dataclass(frozen=True)
class ExpectPin:
    """The table is still pinned where the operation read it (else its copy would be stale)."""

    table_key: str
    snapshot_id: int | None

    def apply(self, s: FamilyState) -> dict:
        current = s.physical_table(self.table_key).snapshot_id
        if current != self.snapshot_id:
            raise PinConflict(self.table_key, self.snapshot_id, current)
        return {}


@dataclass(frozen=True)
class DropPhysicalColumns:
    """Logical columns stop reading these (table, physical name) places; the values stay in old snapshots."""

    columns: tuple[tuple[str, str], ...]

    def apply(self, s: FamilyState) -> dict:
        gone = set(self.columns)
        return {"physical_columns": tuple(pc for pc in s.physical_columns if (pc.table, pc.name) not in gone)}


Update = (AddBatch | SetBucketCount | SetHotColumns | MarkRetried | DropBatch | RecordMaterialization | PinSnapshot | AddLogicalColumns | AddPhysicalTable | AddPhysicalColumns | BindFeature
          | RecordFeatureSource | MarkComputed | MarkEmptied | ExpectMapping | ExpectPin | DropPhysicalColumns)


def apply_updates(
    base: FamilyState,
    updates: tuple[Update, ...],
    *,
    operation: str,
    command: str,
    summary: dict[str, str],
    now_ms: int,
) -> FamilyState:
    """Return the next version of ``base`` with every update applied, or raise."""
    state = base
    for update in updates:
        state = state.model_copy(update=update.apply(state))
    return state.model_copy(
        update={
            "version": base.version + 1,
            "parent_version": base.version,
            "operation": operation,
            "command": command,
            "summary": dict(summary),
            "committed_ms": now_ms,
        }
    )
