"""Choosing hot columns and keeping the hot store in step with the logical table.

``omni accelerate NAME --hot COLS`` records the choice in the logical table (one
logical commit: every reader of the family knows it without asking ClickHouse), then
syncs. A sync is incremental and versioned:

- Prepare: per batch, the coverage signature of the hot columns at the latest version
  (which feature version and data version wrote each column there) against the one
  loaded. New or changed batches are loaded, dropped batches leave; a changed column set
  rebuilds the table.
- Execute: the store's state is first marked "syncing" (signature ""), so no reader
  uses rows half replaced; then each batch's partition is replaced by the rows read at
  that version; then the row counts are checked against the batches' own.
- Commit: the state records the new per-batch and overall signatures and the version.

A query at version N reads the store only when the overall signature equals N's: rows
of version N are loaded before N becomes the store's version, and a query never mixes
versions. A failure anywhere leaves the state "syncing" (readers fall back to Iceberg)
and the next sync redoes what is missing.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, split_qualified
from catalog_ext.errors import SchemaConflictError
from catalog_ext.family import FamilyState, HotColumns
from catalog_ext.physical import arrow_type
from catalog_ext.suggest import did_you_mean
from omni_iceberg.hot.store import SCALAR_TYPES, HotState, HotStore, HotStoreError, store_for

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


@dataclass
class HotSyncPlan:
    """What a sync would do (``--dry-run`` prints it)."""

    logical_table: str
    version: int
    store: str
    columns: list[str]
    action: str  # create | rebuild | update | fresh | remove
    load: list[str] = field(default_factory=list)  # batches whose rows are (re)loaded
    drop: list[str] = field(default_factory=list)  # batches that left the table
    rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        head = f"hot store {self.store}: {self.logical_table} at version {self.version}"
        if self.action == "remove":
            return f"{head}: no hot columns; its hot data is dropped"
        lines = [f"{head}: {self.action} [{', '.join(self.columns)}]"]
        if self.load:
            lines.append(f"  load {len(self.load)} batch(es), {self.rows:,} rows: {', '.join(self.load[:10])}"
                         + (" ..." if len(self.load) > 10 else ""))
        if self.drop:
            lines.append(f"  drop {len(self.drop)} batch(es): {', '.join(self.drop[:10])}")
        if self.action == "fresh":
            lines.append("  nothing to load: the store already holds these values")
        return "\n".join(lines)


def check_hot_columns(state: FamilyState, columns: list[str]) -> tuple[str, ...]:
    """The columns, checked: each a scalar feature column of the table (a clear error otherwise)."""
    out: list[str] = []
    features = [c.path for c in state.columns if c.kind == "feature"]
    for name in (c.strip() for c in columns):
        if not name or name in out:
            continue
        if not state.has_column(name):
            raise SchemaConflictError(f"no column {name!r} in {state.table.identifier}{did_you_mean(name, features)}")
        col = state.column(name)
        if col.kind != "feature":
            raise SchemaConflictError(f"{name!r} is a {col.kind} column of {state.table.identifier}: only feature "
                                      "columns can be hot (the keys always are; stage fields stay in Iceberg)")
        if col.type not in SCALAR_TYPES:
            raise SchemaConflictError(f"{name!r} is {col.type}: hot columns are scalar "
                                      f"({', '.join(sorted(SCALAR_TYPES))})")
        out.append(name)
    if not out:
        raise SchemaConflictError("--hot needs at least one column")
    return tuple(out)


def set_hot_columns(ctx: OmniContext, name: str, columns: list[str] | None, *, sync_on_commit: bool = False,
                    command: str = "", progress: bool | None = None) -> dict[str, Any]:
    """Record ``columns`` as the table's hot columns (None: none) in one logical commit, then sync."""
    from catalog_ext.updates import SetHotColumns

    ns, table = split_qualified(name)
    state = ctx.store.load(ns, table)
    hot = None if columns is None else HotColumns(columns=check_hot_columns(state, columns),
                                                  sync_on_commit=sync_on_commit)
    if hot != state.hot:
        state = ctx.store.commit(ns, table, lambda latest: (SetHotColumns(hot),), operation="hot-columns",
                                 command=command, summary=lambda _: {
                                     "omni.hot-columns": ",".join(hot.columns) if hot else ""})
    return sync(ctx, name, state=state, progress=progress)


def plan_sync(store: HotStore, state: FamilyState) -> HotSyncPlan:
    logical = state.table.identifier
    held = store.state(logical)
    if state.hot is None:
        return HotSyncPlan(logical, state.version, store.where, [], "remove" if held else "fresh")
    columns = list(state.hot.columns)
    want = {b.name: state.coverage_signature(columns, [b.name]) for b in state.batches}
    rows = {b.name: b.rows for b in state.batches}
    if held is None or list(held.columns) != columns:
        load = sorted(want)
        action = "create" if held is None else "rebuild"
        return HotSyncPlan(logical, state.version, store.where, columns, action, load, [], sum(rows[b] for b in load))
    load = sorted(b for b, sig in want.items() if held.batches.get(b) != sig)
    drop = sorted(b for b in held.batches if b not in want)
    action = "update" if load or drop or held.signature != state.coverage_signature(columns) else "fresh"
    return HotSyncPlan(logical, state.version, store.where, columns, action, load, drop, sum(rows[b] for b in load))


def sync(ctx: OmniContext, name: str, *, dry_run: bool = False, progress: bool | None = None,
         state: FamilyState | None = None) -> dict[str, Any]:
    """Bring the hot store to the latest version of ``name`` (see the module docstring)."""
    from omni_iceberg.read.reader import iter_logical_slices
    from omni_iceberg.ui.progress import progress_bar

    if state is None:
        ns, table = split_qualified(name)
        state = ctx.store.load(ns, table)
    store = store_for(ctx)
    plan = plan_sync(store, state)
    report: dict[str, Any] = {"plan": plan.to_dict(), "dry_run": dry_run, "rows_loaded": 0, "seconds": 0.0}
    if dry_run:
        return report
    if plan.action == "fresh":
        _record_version(store, state)
        return report
    started = time.perf_counter()
    logical = state.table.identifier
    if plan.action == "remove":
        store.forget(logical)
        return report
    held = store.state(logical)
    columns = tuple(plan.columns)
    hot_table = store.table_name(logical)
    if plan.action in ("create", "rebuild"):
        store.save_state(HotState(logical, hot_table, columns))  # "syncing": nothing loaded is trusted
        store.create_table(hot_table, {c: state.column(c).type for c in columns})
        loaded: dict[str, str] = {}
    else:
        loaded = dict(held.batches)
        for b in plan.load + plan.drop:
            loaded.pop(b, None)
        store.save_state(HotState(logical, hot_table, columns, loaded, "", held.version))
        store.drop_batches(hot_table, plan.load + plan.drop)
    bar = progress_bar(progress, f"hot sync {logical}", "row", total=plan.rows)
    try:
        for b in plan.load:
            # slice by slice (OMNI_MEMORY_LIMIT_MB), not the batch at once: the batch's
            # partition counts as loaded only after its last slice, and the row check below
            # catches a batch cut short
            for data in iter_logical_slices(ctx.catalog, state, list(columns), b):
                store.insert(hot_table, _typed(state, data, columns))
                report["rows_loaded"] += data.num_rows
                if bar is not None:
                    bar.update(data.num_rows)
            loaded[b] = state.coverage_signature(columns, [b])
    finally:
        if bar is not None:
            bar.close()
    counts = store.batch_rows(hot_table, plan.load) if plan.load else {}
    expected = {b.name: b.rows for b in state.batches if b.name in plan.load}
    wrong = {b: (counts.get(b, 0), n) for b, n in expected.items() if counts.get(b, 0) != n}
    if wrong:  # another sync loaded the same batch meanwhile, or the insert was cut short
        b, (got, n) = next(iter(wrong.items()))
        raise HotStoreError(f"hot store of {logical}: batch {b!r} holds {got} rows, the table {n}; it stays "
                            f"unused until `omni accelerate {logical} --sync` runs again")
    store.save_state(HotState(logical, hot_table, columns, loaded, state.coverage_signature(columns), state.version))
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def _record_version(store: HotStore, state: FamilyState) -> None:
    """The store holds this version's values already (a commit that changed no hot column): only
    the version it reports moves."""
    held = store.state(state.table.identifier)
    if held is not None and held.version < state.version:
        store.save_state(HotState(held.logical_table, held.table, held.columns, held.batches, held.signature,
                                  state.version))


def _typed(state: FamilyState, data: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    arrays = [data.column(ID_COLUMN).cast(pa.string()), data.column(BATCH_COLUMN).cast(pa.string())]
    arrays += [data.column(c).cast(arrow_type(state.column(c).type)) for c in columns]
    return pa.Table.from_arrays(arrays, names=[ID_COLUMN, BATCH_COLUMN, *columns])


def sync_after_commit(ctx: OmniContext, name: str, state: FamilyState | None = None) -> dict[str, Any] | None:
    """After a commit: sync when the table's hot columns ask for it; a failing store is reported, not raised.

    The commit itself is done; a hot store that cannot keep up only makes readers fall
    back to Iceberg until the next sync.
    """
    if state is None:
        ns, table = split_qualified(name)
        state = ctx.store.load(ns, table)
    if state.hot is None or not state.hot.sync_on_commit:
        return None
    try:
        return sync(ctx, name, state=state, progress=False)
    except HotStoreError as e:
        import sys

        print(f"warning: {e}; queries read Iceberg until `omni accelerate {name} --sync`", file=sys.stderr)
        return {"error": str(e)}


class HotSyncHook:
    """A :meth:`catalog_ext.store.FamilyStore.on_commit` hook: :func:`sync_after_commit` with the
    committed state, for tables whose hot columns follow every commit."""

    def __init__(self, ctx: OmniContext):
        self.ctx = ctx

    def __call__(self, state: FamilyState) -> None:
        sync_after_commit(self.ctx, state.table.identifier, state)
