"""Column groups: narrow feature tables merged into shared physical tables (PhysicalTableGroup).

Why: every feature version writes its own physical table, so a logical table with N
features is an N-way join. Engines pay for that width even when a query reads three
columns (Spark resolves and optimises every join of the view: EXPLAIN grew 3.45 s at
100 tables, see benchmarks/RESULTS.md). The paper keeps an 800-column table in 4-6
physical tables; so do we, without changing how features are written.

How (Prepare-Execute-Commit, like compaction):

- **prepare** (:func:`plan_column_groups`): the system picks the feature tables that
  hold rows and are *narrow* (bytes per row from snapshot metadata at most
  ``narrow_bytes_per_row``: scores, labels, small arrays - not parsed text), grouped by
  their PhysicalTableGroup (CPU or GPU features: computed by the same engine). A table
  whose columns already have a column group goes to that group; others fill a group of
  their kind up to ``max_columns`` or start a new one (only when at least two tables
  merge: a group of one saves no join).
- **execute**: bucket by bucket (memory follows a bucket), the members' rows are
  full-outer-joined by the keys with the group's files *of the same batches* (found by
  the files' batch bounds - so moving a new batch costs that batch, not the group's
  history), and written as replacement group files sorted by (batch, id). The members'
  files are deleted on their own staging branches.
- the execute step is a rewrite engine's (:mod:`governance.rewrite`, ``--engine``): the
  local one does the above; Spark's (:mod:`spark_udfs.regroup`) joins the members into the
  group's touched buckets on the cluster - the same rows, other files.
- **commit**: ONE logical version adds the group's physical columns, re-pins the group
  and the members, and marks the members ``emptied``: readers then skip them.

A feature keeps writing its own table (its binding does not move), so backfills, retries,
resumes and races work exactly as before. Until the next regroup a column has two
parts, its group and its feature table; readers COALESCE them (``FamilyState.read_parts``).
They are disjoint: a moved value leaves the feature table in the same commit, a retry
writes only values that failed (null in the group), and a recomputed (stale) batch is
nulled in the group by the backfill's own commit
(:func:`catalog_ext.group_values.null_recomputed`). Older
logical versions keep their pins, so they keep reading the old layout.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext import settings
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, PHYSICAL_SEPARATOR, split_qualified
from catalog_ext.errors import OmniError
from catalog_ext.family import FamilyState, PhysicalColumn, PhysicalTable, PhysicalTableGroup
from catalog_ext.group_values import bucket_files, overlaps_batches
from catalog_ext.physical import create_physical_table, first_snapshot_id, iceberg_type
from catalog_ext.store import FamilyStore
from catalog_ext.physical import StagedWrite
from governance.attempt import staged_attempt
from governance.rewrite import RegroupJob, RegroupMember, run_rewrite
from catalog_ext.updates import (AddPhysicalColumns, AddPhysicalTable, DropPhysicalColumns, ExpectMapping, ExpectPin,
                                 MarkEmptied, PinSnapshot)

KEYS = [ID_COLUMN, BATCH_COLUMN]
#: a feature table is narrow (worth merging) at most this many stored bytes per row, keys included
NARROW_BYTES_PER_ROW = 96
#: a column group holds at most this many columns (the paper: 200-300 per physical table)
MAX_GROUP_COLUMNS = 256
#: ``omni maintain`` regroups once this many feature tables would move (each one is a join saved)
GROUP_DUE_TABLES = settings.value("OMNI_GROUP_DUE_TABLES")


class ColumnGroupError(OmniError):
    """A column-group request that cannot run (unknown table, nothing to move)."""


@dataclass
class GroupMove:
    """Feature tables whose columns move into one column group."""

    group_key: str  # the column-group table (new or existing)
    identifier: str
    kind: str  # the PhysicalTableGroup of its members (features-cpu / features-gpu)
    new: bool
    members: list[str] = field(default_factory=list)  # feature table keys
    columns: dict[str, str] = field(default_factory=dict)  # logical path -> column name in the group
    member_columns: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # key -> [(physical, logical)]
    rows: int = 0
    bytes: int = 0


@dataclass
class ColumnGroupPlan:
    logical_table: str
    version: int
    moves: list[GroupMove] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # table key -> why it stays alone

    @property
    def empty(self) -> bool:
        return not self.moves

    def describe(self) -> str:
        if self.empty:
            lines = [f"{self.logical_table} v{self.version}: no feature tables to merge into column groups"]
        else:
            lines = [f"column groups for {self.logical_table} at version {self.version}:"]
            for m in self.moves:
                verb = "new group" if m.new else "into group"
                lines.append(f"  {verb} {m.identifier} ({m.kind}): {len(m.members)} table(s), "
                             f"{len(m.columns)} column(s), {m.rows} rows, {m.bytes / 2**20:.2f} MiB")
                for key in m.members[:8]:
                    lines.append(f"    {key}: {', '.join(lg for _, lg in m.member_columns[key])}")
                if len(m.members) > 8:
                    lines.append(f"    ... and {len(m.members) - 8} more")
        for key, why in list(self.skipped.items())[:8]:
            lines.append(f"  stays alone: {key} ({why})")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_column_name(logical: str, taken: set[str]) -> str:
    """A column name in a group for logical column ``logical`` (``ProcessedData.lang`` -> ``ProcessedData_lang``)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", logical)
    name, i = base, 1
    while name in taken or name in KEYS:
        i += 1
        name = f"{base}_{i}"
    return name


def _size(catalog: Any, t: PhysicalTable) -> tuple[int, int]:
    """(rows, bytes) of the pinned snapshot, from its summary (no file listing)."""
    if t.snapshot_id is None:
        return 0, 0
    snap = catalog.load_table(t.identifier).snapshot_by_id(t.snapshot_id)
    summary = snap.summary.additional_properties if snap is not None and snap.summary else {}
    return int(summary.get("total-records", 0) or 0), int(summary.get("total-files-size", 0) or 0)


#: values of these types have a fixed, small width: a table of them is narrow whatever its files say
FIXED_WIDTH_TYPES = frozenset({"long", "int", "double", "float", "boolean", "date", "timestamp", "timestamptz"})


def _narrow(state: FamilyState, pcols: list[PhysicalColumn]) -> bool:
    """Every value column has a fixed-width type (a score, a count, a flag, a time).

    Strings and lists may be short labels or whole documents; for those the snapshot's
    bytes per row decide (small files overstate it, which only keeps a table alone).
    """
    return all(state.column(pc.logical).type in FIXED_WIDTH_TYPES for pc in pcols)


def plan_column_groups(store: FamilyStore, name: str, *, narrow_bytes_per_row: int = NARROW_BYTES_PER_ROW,
                       max_columns: int = MAX_GROUP_COLUMNS, tables: list[str] | None = None) -> ColumnGroupPlan:
    """Which feature tables move into which column group (see the module docstring).

    ``tables`` (feature table keys) restricts the choice to those, narrow or not.
    """
    ns, table = split_qualified(name)
    state = store.load(ns, table)
    plan = ColumnGroupPlan(state.table.identifier, state.version)
    known = {t.key for t in state.tables if t.role == "feature"}
    for key in tables or ():
        if key not in known:
            raise ColumnGroupError(f"{key!r} is not a feature table of {state.table.identifier} "
                                   f"(feature tables: {', '.join(sorted(known)) or 'none'})")
    groups = [t for t in state.tables if t.role == "column-group"]
    width = {g.key: len(state.columns_of_table(g.key)) for g in groups}
    moves: dict[str, GroupMove] = {}
    fresh: dict[str, list[tuple[PhysicalTable, list[PhysicalColumn], int, int]]] = {}
    for t in state.tables:
        if t.role != "feature" or t.emptied or (tables and t.key not in tables):
            continue
        pcols = state.columns_of_table(t.key)
        rows, size = _size(store.catalog, t)
        if not pcols or not rows:
            plan.skipped[t.key] = "holds no rows" if pcols else "no column maps to it"
            continue
        if not tables and not _narrow(state, pcols) and size / rows > narrow_bytes_per_row:
            plan.skipped[t.key] = f"{size / rows:.0f} bytes per row > {narrow_bytes_per_row} (not narrow)"
            continue
        homes = [{p.table for p in state.physical_columns_of(pc.logical)
                  if state.physical_table(p.table).role == "column-group"} for pc in pcols]
        if any(homes):
            common = set.intersection(*homes)
            if not common:  # after a split: its rows would have to be cut between tables
                plan.skipped[t.key] = "its columns live in several column groups (after a split): left as a part"
                continue
            g = state.physical_table(sorted(common)[0])
            move = moves.setdefault(g.key, GroupMove(g.key, g.identifier, t.group, False))
            _add_member(state, move, t, pcols, rows, size)
        else:
            fresh.setdefault(t.group, []).append((t, pcols, rows, size))
    for kind, candidates in fresh.items():
        pending: list[tuple[PhysicalTable, list[PhysicalColumn], int, int]] = []
        for g in [g for g in groups if g.group == kind]:  # fill existing groups of this kind first
            while candidates and width[g.key] + len(candidates[0][1]) <= max_columns:
                t, pcols, rows, size = candidates.pop(0)
                move = moves.setdefault(g.key, GroupMove(g.key, g.identifier, kind, False))
                _add_member(state, move, t, pcols, rows, size)
                width[g.key] += len(pcols)
        for item in candidates:
            if pending and sum(len(p[1]) for p in pending) + len(item[1]) > max_columns:
                _new_group(state, ns, table, kind, pending, moves, plan)
                pending = []
            pending.append(item)
        _new_group(state, ns, table, kind, pending, moves, plan)
    plan.moves = list(moves.values())
    return plan


def _add_member(state: FamilyState, move: GroupMove, t: PhysicalTable, pcols: list[PhysicalColumn],
                rows: int, size: int) -> None:
    taken = set(move.columns.values()) | {pc.name for pc in state.columns_of_table(move.group_key)}
    existing = {pc.logical: pc.name for pc in state.columns_of_table(move.group_key)}
    move.members.append(t.key)
    move.member_columns[t.key] = [(pc.name, pc.logical) for pc in pcols]
    for pc in pcols:
        if pc.logical not in move.columns:
            move.columns[pc.logical] = existing.get(pc.logical) or group_column_name(pc.logical, taken)
            taken.add(move.columns[pc.logical])
    move.rows += rows
    move.bytes += size


def _new_group(state: FamilyState, ns: str, table: str, kind: str, members: list, moves: dict[str, GroupMove],
               plan: ColumnGroupPlan) -> None:
    if len(members) < 2:  # a group of one table saves no join
        for t, *_ in members:
            plan.skipped[t.key] = "the only narrow table of its kind (a group of one saves no join)"
        return
    digest = hashlib.sha1(",".join(t.key for t, *_ in members).encode()).hexdigest()[:10]
    key = f"g_{kind.rsplit('-', 1)[-1]}_{digest}"
    move = GroupMove(key, f"{ns}.{table}{PHYSICAL_SEPARATOR}{key}", kind, True)
    for t, pcols, rows, size in members:
        _add_member(state, move, t, pcols, rows, size)
    moves[key] = move


# ---- execute and commit ------------------------------------------------------------------------
def regroup(store: FamilyStore, name: str, *, dry_run: bool = False, progress: bool | None = None,
            command: str = "", due_tables: int = 1, engine: str = "local", spark: Callable[[], Any] | None = None,
            spark_blocker: str | None = None, threshold_bytes: int | None = None,
            **plan_options: Any) -> dict[str, Any]:
    """Plan and (unless ``dry_run``) run the column-group moves in ONE logical commit.

    Runs only when at least ``due_tables`` feature tables would move (maintenance waits
    for enough of them). Loses cleanly to a concurrent writer of any table it rewrites
    (the commit fails and its files are deleted): run it again. Returns the plan, the
    engine and why, and the new logical version.

    ``engine``: ``local`` (bucket by bucket in this process), ``spark`` (the Spark engine's
    ``rewrite`` capability: :mod:`spark_udfs.regroup` joins the members into the group on the
    same staging branches), or ``auto``: Spark when the moving tables hold at least the Spark
    threshold and Spark can run here (``spark_blocker`` None), as for compaction.
    """
    from omni_iceberg.backfill.choose import choose_rewrite_engine

    plan = plan_column_groups(store, name, **plan_options)
    moving = sum(len(m.members) for m in plan.moves)
    due = not (moving and moving < due_tables)
    chosen, reason = choose_rewrite_engine(engine, lambda: sum(m.bytes for m in plan.moves), spark=spark,
                                           spark_blocker=spark_blocker, what="the moving tables hold",
                                           threshold_bytes=threshold_bytes,
                                           nothing="" if not plan.empty and due else "nothing to move")
    report: dict[str, Any] = {"plan": plan.to_dict(), "logical_version": plan.version,
                              "describe": plan.describe(), "engine": chosen, "engine_reason": reason}
    if not due:
        report["describe"] += f"\n  not due: {moving} table(s) would move, fewer than {due_tables}"
        return report
    if plan.empty or dry_run:
        return report
    if chosen == "spark" and spark is not None:
        spark()  # an unreachable master fails here, before any group table is created or changed
    ns, table = split_qualified(name)
    state = store.load(ns, table, plan.version)
    # a new group's table stays when anything fails: the next regroup of these tables reuses it
    # (a concurrent one may have adopted it already: see governance.attempt)
    groups = {move.group_key: _group_table(store, state, ns, table, move) for move in plan.moves}
    created = {move.group_key: groups[move.group_key] for move in plan.moves if move.new}
    targets: list[_Target] = []
    for move in plan.moves:
        g = groups[move.group_key]
        targets.append(_Target(g.key, g.identifier, g.snapshot_id))
        targets += [_Target(k, state.physical_table(k).identifier, state.physical_table(k).snapshot_id)
                    for k in move.members]

    def jobs(writers: dict[str, StagedWrite]) -> list[RegroupJob]:
        out = []
        for move in plan.moves:
            g = groups[move.group_key]
            members = tuple(RegroupMember(k, state.physical_table(k).identifier, state.physical_table(k).snapshot_id,
                                          writers[k], tuple((p, move.columns[lg]) for p, lg in move.member_columns[k]))
                            for k in move.members)
            out.append(RegroupJob(
                store, writers[g.key], g.snapshot_id, 0, {"omni.operation": "regroup", "omni.groups": g.key},
                members=members, bucket_count=state.table.bucket_count, rows=move.rows,
                local=lambda bar, move=move, g=g: _move_rows(store, state, move, g, writers, bar),
                empty_members=lambda move=move: _empty_members(store, state, move, writers)))
        return out

    def updates(latest: FamilyState, writers: dict[str, StagedWrite]) -> tuple[Any, ...]:
        ups: list[Any] = []
        for move in plan.moves:
            ups.append(ExpectMapping(tuple((k, tuple(move.member_columns[k])) for k in move.members)))
            if move.new:
                g = created[move.group_key]
                ups.append(AddPhysicalTable(g, PhysicalTableGroup(name=g.group, purpose="")))
            ups.append(AddPhysicalColumns(tuple(PhysicalColumn(table=move.group_key, name=col, logical=path)
                                                for path, col in move.columns.items())))
            base = created[move.group_key].snapshot_id if move.new else \
                state.physical_table(move.group_key).snapshot_id
            ups.append(PinSnapshot(move.group_key, writers[move.group_key].staged_snapshot_id, base))
            for key in move.members:
                ups.append(PinSnapshot(key, writers[key].staged_snapshot_id, state.physical_table(key).snapshot_id))
            ups.append(MarkEmptied(tuple(move.members)))
        return tuple(ups)

    summary = {"omni.groups": ",".join(m.group_key for m in plan.moves),
               "omni.moved-tables": ",".join(k for m in plan.moves for k in m.members)[:1000]}
    new_state, _ = run_rewrite(
        store, name, plan.version, targets, None, engine=chosen, spark=spark, what="regroup", verb="regroup",
        properties={"omni.operation": "regroup"}, command=command or f"regroup {name}", summary=summary,
        label=f"regroup {plan.logical_table}", total=sum(m.rows for m in plan.moves), progress=progress,
        commit_updates=updates, unit="row", state=state, jobs=jobs)
    report["logical_version"] = new_state.version
    return report


@dataclass(frozen=True)
class _Target:
    """A table a regroup rewrites (a group or a member), as :func:`governance.rewrite.run_rewrite` names it."""

    key: str
    identifier: str
    snapshot_id: int | None


def _empty_members(store: FamilyStore, state: FamilyState, move: GroupMove, writers: dict[str, Any]) -> None:
    """Delete every file of the move's members on their branches (what :func:`_move_rows` does bucket by
    bucket), for an engine that wrote the group elsewhere."""
    for key in move.members:
        _, files = bucket_files(store, state.physical_table(key))
        writers[key].delete_files([f for bucket in sorted(files) for f in files[bucket]])
        if writers[key].replacing:  # emptied: no scan reads them, so their deleted-entry manifests may stay
            writers[key].commit_replacements({"omni.groups": move.group_key}, live_only=False)


def _group_table(store: FamilyStore, state: FamilyState, ns: str, table: str, move: GroupMove) -> PhysicalTable:
    """The group's physical table: created for a new group, given the new columns for an existing one."""
    from pyiceberg.exceptions import TableAlreadyExistsError

    types = {col: iceberg_type(state.column(path).type) for path, col in move.columns.items()}
    if move.new:
        props = {"omni.logical-table": state.table.identifier, "omni.role": "column-group"}
        try:
            _, snapshot = create_physical_table(store.catalog, move.identifier, types, state.table.bucket_count, props)
            return PhysicalTable(key=move.group_key, identifier=move.identifier, group=move.kind,
                                 snapshot_id=snapshot, role="column-group")
        except TableAlreadyExistsError:
            # left by a regroup of the same tables that lost its commit: never pinned, so ours to reuse
            ice = store.catalog.load_table(move.identifier)
            if {k: ice.properties.get(k) for k in props} != props:
                raise ColumnGroupError(f"physical table {move.identifier} exists and belongs to something else") \
                    from None
        _add_columns(ice, types)
        return PhysicalTable(key=move.group_key, identifier=move.identifier, group=move.kind,
                             snapshot_id=first_snapshot_id(store.catalog, move.identifier), role="column-group")
    _add_columns(store.catalog.load_table(move.identifier), types)
    return state.physical_table(move.group_key)


def _add_columns(ice: Any, types: dict[str, Any]) -> None:
    """Give a group table the columns it lacks (a schema change only: old snapshots read them as nulls)."""
    have = {f.name for f in ice.schema().fields}
    missing = {c: t for c, t in types.items() if c not in have}
    if missing:
        with ice.update_schema() as update:
            for col, typ in missing.items():
                update.add_column(col, typ)


def _move_rows(store: FamilyStore, state: FamilyState, move: GroupMove, group: PhysicalTable,
               writers: dict[str, Any], bar: Any) -> None:
    from governance import slices

    group_ice, group_files = bucket_files(store, group)
    members = {key: bucket_files(store, state.physical_table(key)) for key in move.members}
    group_ice = store.catalog.load_table(group.identifier)  # after a schema change
    schema = group_ice.schema().as_arrow()
    buckets = sorted({b for _, files in members.values() for b in files})
    for bucket in buckets:
        moving = [key for key in move.members if members[key][1].get(bucket)]
        parts = [slices.Part(members[key][0], members[key][1][bucket],
                             tuple(KEYS + [p for p, _ in move.member_columns[key]])) for key in moving]
        in_group = group_files.get(bucket, [])
        limit = slices.slice_bytes()
        if slices.estimate_bytes(parts + [slices.Part(group_ice, in_group, None)]) <= limit:
            # fits: read whole, as always (the batches moved are those the rows name)
            read = [slices.read(p) for p in parts]
            moved_batches = {b for data in read for b in pc.unique(data.column(BATCH_COLUMN)).to_pylist()}
            pieces: Any = None
        else:
            read = None
            moved_batches = set().union(*(slices.distinct_batches(p) for p in parts))
        # group files of the same batches may hold the same ids: they are merged, the rest untouched
        overlapping = [f for f in in_group if overlaps_batches(group_ice, f, moved_batches)]
        old = slices.Part(group_ice, overlapping, None)
        if read is not None:
            pieces = [[slices.read(old)] + read] if overlapping else [[None] + read]
        else:
            pieces = slices.iter_slices([old] + parts, limit=limit, what=f"regroup of {move.identifier}")
        out = _SliceWriter(writers[move.group_key], overlapping, limit)
        for got in pieces:
            tables = []
            if got[0] is not None and got[0].num_rows:
                keys = [got[0].column(k).cast(pa.string()) for k in KEYS]
                names = KEYS + [f.name for f in schema if f.name not in KEYS]
                values = [got[0].column(f.name) for f in schema if f.name not in KEYS]
                tables.append(pa.table(keys + values, names=names))  # first: the moved values win over it
            for key, data in zip(moving, got[1:]):
                cols = move.member_columns[key]
                keys = [data.column(k).cast(pa.string()) for k in KEYS]
                tables.append(pa.table(keys + [data.column(p) for p, _ in cols],
                                       names=KEYS + [move.columns[lg] for _, lg in cols]))
                if bar is not None:
                    bar.update(data.num_rows)
            if any(t.num_rows for t in tables):
                out.add(_merge_by_keys(tables, schema))
        out.close(schema)
        for key in moving:
            writers[key].delete_files(members[key][1][bucket])
    if writers[move.group_key].replacing:
        writers[move.group_key].commit_replacements({"omni.groups": move.group_key})
    for key in move.members:  # emptied: no scan reads them, so their deleted-entry manifests may stay
        if writers[key].replacing:
            writers[key].commit_replacements({"omni.groups": move.group_key}, live_only=False)


class _SliceWriter:
    """Merged slices of one bucket to a writer: held until they weigh ``limit``, so a bucket
    that fits is still written in one piece (the files it always had), and the first write
    names the files the bucket's rows replace."""

    def __init__(self, writer: Any, replaced: list[Any], limit: int) -> None:
        self.writer, self.replaced, self.limit = writer, list(replaced), limit
        self.held: list[pa.Table] = []
        self.written = False

    def add(self, table: pa.Table) -> None:
        self.held.append(table)
        if sum(t.nbytes for t in self.held) >= self.limit:
            self._write()

    def _write(self) -> None:
        data = self.held[0] if len(self.held) == 1 else pa.concat_tables(self.held)
        self.held = []
        self.writer.write_replacement([] if self.written else self.replaced, data)
        self.written = True

    def close(self, schema: pa.Schema) -> None:
        if self.held:
            self._write()
        elif not self.written and self.replaced:  # every row left: the old files go all the same
            self.writer.write_replacement(self.replaced, schema.empty_table())


def _merge_by_keys(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """Full outer join of ``parts`` on the keys, one row per key, each column the COALESCE of its parts.

    Later parts win: the moved rows (newer values) over the group's existing ones, which
    are null wherever a moved value exists (see the module docstring), so order only
    matters for data that breaks that rule - and then the newest value is the right one.
    """
    from omni_iceberg.read.reader import left_join

    keys = pa.concat_tables([p.select(KEYS) for p in parts]).group_by(KEYS).aggregate([])
    keys = keys.select(KEYS).sort_by([(BATCH_COLUMN, "ascending"), (ID_COLUMN, "ascending")])
    columns: dict[str, Any] = {}
    for part in parts:
        joined = left_join(keys, part)
        for name in part.column_names:
            if name in KEYS:
                continue
            value = joined.column(name)
            columns[name] = value if name not in columns else pc.coalesce(value, columns[name])
    n = keys.num_rows
    arrays = [keys.column(ID_COLUMN), keys.column(BATCH_COLUMN)]
    for f in schema:
        if f.name in KEYS:
            continue
        arrays.append(columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


# ---- column split: columns leave their group ---------------------------------------------------
#: the PhysicalTableGroup of tables holding columns split out of their column groups
SPLIT_GROUP = "column-splits"


@dataclass
class SplitPlan:
    """Columns moved out of their column groups into one table of their own."""

    logical_table: str
    version: int
    columns: dict[str, str]  # logical path -> its column name in the new table
    sources: dict[str, str]  # logical path -> the group table key it leaves
    table_key: str
    identifier: str

    def describe(self) -> str:
        lines = [f"split for {self.logical_table} at version {self.version}: into {self.identifier}"]
        lines += [f"  {path}: out of {self.sources[path]}" for path in self.columns]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_split(store: FamilyStore, name: str, columns: list[str]) -> SplitPlan:
    """Which group each of ``columns`` leaves, and the table they move to."""
    from catalog_ext.suggest import did_you_mean

    ns, table = split_qualified(name)
    state = store.load(ns, table)
    if not columns:
        raise ColumnGroupError("name at least one column to split out of its column group")
    sources: dict[str, str] = {}
    for path in dict.fromkeys(columns):
        if not state.has_column(path):
            known = [c.path for c in state.columns]
            raise ColumnGroupError(f"{state.table.identifier} has no column {path!r}{did_you_mean(path, known)}")
        groups = [p for p in state.physical_columns_of(path) if state.physical_table(p.table).role == "column-group"]
        if not groups:
            raise ColumnGroupError(f"column {path!r} of {state.table.identifier} is in no column group: nothing to "
                                   "split (omni regroup merges narrow feature tables first)")
        sources[path] = groups[0].table
    taken: set[str] = set()
    names = {}
    for path in sources:
        names[path] = group_column_name(path, taken)
        taken.add(names[path])
    key = "g_split_" + hashlib.sha1(",".join(sorted(sources)).encode()).hexdigest()[:10]
    return SplitPlan(state.table.identifier, state.version, names, sources, key,
                     f"{ns}.{table}{PHYSICAL_SEPARATOR}{key}")


def split_columns(store: FamilyStore, name: str, columns: list[str], *, dry_run: bool = False,
                  progress: bool | None = None, command: str = "") -> dict[str, Any]:
    """Move ``columns`` out of their column groups into one new table, in ONE logical commit.

    Their values are copied bucket by bucket from the groups' pinned snapshots; the
    groups keep the old values in their files (old versions read them there) until their
    files are next rewritten. A writer that moved a source group meanwhile fails the
    commit cleanly (the copy would be stale): run it again.
    """
    from omni_iceberg.ui.progress import progress_bar

    plan = plan_split(store, name, columns)
    report: dict[str, Any] = {"plan": plan.to_dict(), "describe": plan.describe(), "logical_version": plan.version}
    if dry_run:
        return report
    ns, table = split_qualified(name)
    state = store.load(ns, table, plan.version)
    types = {plan.columns[p]: iceberg_type(state.column(p).type) for p in plan.columns}
    props = {"omni.logical-table": state.table.identifier, "omni.role": "column-group"}
    run_id = f"split-{uuid.uuid4().hex[:12]}"
    from pyiceberg.exceptions import TableAlreadyExistsError

    try:
        _, first = create_physical_table(store.catalog, plan.identifier, types, state.table.bucket_count, props)
    except TableAlreadyExistsError:  # a split of the same columns that lost its commit left it: never pinned
        first = first_snapshot_id(store.catalog, plan.identifier)
    target = PhysicalTable(key=plan.table_key, identifier=plan.identifier, group=SPLIT_GROUP, snapshot_id=first,
                           role="column-group")
    writer = store.staged_write(state, plan.identifier, first, run_id, {"omni.operation": "split", "omni.run-id": run_id},
                                rebasable=False)
    schema = store.catalog.load_table(plan.identifier).schema().as_arrow()
    by_source: dict[str, list[str]] = {}
    for path, source in plan.sources.items():
        by_source.setdefault(source, []).append(path)
    bar = progress_bar(progress, f"split {plan.logical_table}", "bucket")
    with staged_attempt(bar, lambda: [writer]):  # the new table stays for reuse (see governance.attempt)
        from governance import slices

        scanned = {key: bucket_files(store, state.physical_table(key)) for key in by_source}
        limit = slices.slice_bytes()
        for bucket in sorted({b for _, files in scanned.values() for b in files}):
            sources = [key for key in by_source if scanned[key][1].get(bucket)]
            src = {key: {p.logical: p.name for p in state.columns_of_table(key)} for key in sources}
            parts = [slices.Part(scanned[key][0], scanned[key][1][bucket],
                                 tuple(KEYS + [src[key][p] for p in by_source[key]])) for key in sources]
            out = _SliceWriter(writer, [], limit)
            for got in slices.iter_slices(parts, limit=limit, what=f"split into {plan.identifier}"):
                tables = [pa.table([data.column(k).cast(pa.string()) for k in KEYS] +
                                   [data.column(src[key][p]) for p in by_source[key]],
                                   names=KEYS + [plan.columns[p] for p in by_source[key]])
                          for key, data in zip(sources, got)]
                if not any(t.num_rows for t in tables):
                    continue
                merged = _merge_by_keys(tables, schema)
                valued = None  # a row holding none of the columns reads as NULLs anyway: left out
                for col in plan.columns.values():
                    has = pc.is_valid(merged.column(col))
                    valued = has if valued is None else pc.or_(valued, has)
                merged = merged.filter(valued)
                if merged.num_rows:
                    out.add(merged)
            out.close(schema)
            if bar is not None:
                bar.update(1)
        if writer.replacing:
            writer.commit_replacements({"omni.split": ",".join(plan.columns)[:1000]})

        def updates(latest: FamilyState):
            ups: list[Any] = [ExpectPin(key, state.physical_table(key).snapshot_id) for key in by_source]
            ups.append(AddPhysicalTable(target, PhysicalTableGroup(name=SPLIT_GROUP,
                                                                   purpose="columns split out of column groups")))
            ups.append(AddPhysicalColumns(tuple(PhysicalColumn(table=plan.table_key, name=col, logical=path)
                                                for path, col in plan.columns.items())))
            gone = tuple((key, p.name) for key, paths in by_source.items()
                         for p in state.columns_of_table(key) if p.logical in paths)
            ups.append(DropPhysicalColumns(gone))
            if writer.staged_snapshot_id is not None:  # else every value was NULL: the empty table is right
                ups.append(PinSnapshot(plan.table_key, writer.staged_snapshot_id, first))
            return tuple(ups)

        new_state = store.commit(ns, table, updates, operation="split", command=command or f"regroup {name} --split",
                                 summary=lambda _: {"omni.split": ",".join(plan.columns)[:1000]}, staged=[writer])
    report["logical_version"] = new_state.version
    return report
