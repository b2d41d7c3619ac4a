"""The family's physical table count, kept under ``OMNI_FAMILY_MAX_TABLES`` by merging feature tables.

Why: Trino resolves and analyses every table the view names before its optimizer drops
any, and a ``SELECT *`` over the view passes Trino's default cap of 150 stages near 50
physical tables (each table lookup is 2-3 stages; benchmarks/RESULTS.md#view_pruning,
README "Spark and Trino"). :mod:`governance.column_groups` merges only *narrow* feature
tables, and only once enough of them would move; wide ones (parsed text, embeddings)
and a few narrow ones stay alone, so a family can keep growing past the cap. This step
is the bound: whatever the other steps left, the view names at most the setting's
number of tables.

How:

- **count**: the tables the view reads - the driver (the base, or a fresh materialized
  copy) and every table a logical column reads a part from
  (:meth:`catalog_ext.family.FamilyState.read_parts`): what the Trino body names, one
  lookup each (``catalog_ext.view_sql``).
- **choose**: the family's live feature tables, least read first (reads of the query log
  window that touched each, :func:`governance.coread.logged_reads`), so the tables people
  read alone stay alone and the cold ones share a group; ties go by registration order,
  which keeps features registered together (and so usually read together) together. The
  shortest such prefix whose merge brings the count under the bound is taken: merging
  more would only widen groups for nothing.
- **merge**: :func:`governance.column_groups.regroup` with ``tables=`` that prefix (narrow
  or not): the same plan (existing groups of the kind filled first, new groups of at
  most 256 columns, a group of one never made), the same rewrite and ONE logical commit;
  older versions keep their pins, so time travel reads the old layout.

What it cannot merge is said, never hidden: column groups are not merged with each other
(regroup moves feature tables only), a table without rows has nothing to move, and a
kind (CPU or GPU features) with one candidate makes no group. When those leave the count
over the bound the report names the count it reaches and why.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from catalog_ext import settings
from catalog_ext.contract import split_qualified
from catalog_ext.errors import ConfigError
from catalog_ext.family import FamilyState

SETTING = "OMNI_FAMILY_MAX_TABLES"


@dataclass
class TableBoundPlan:
    """Which feature tables merge so that the view reads at most ``max_tables`` tables."""

    logical_table: str
    version: int
    max_tables: int
    tables_before: int  # tables the view reads today
    tables_after: int  # the same once ``merge`` moved (== tables_before when nothing moves)
    merge: list[str] = field(default_factory=list)  # feature table keys, least read first
    reads: dict[str, int] = field(default_factory=dict)  # logged reads that touched each merged table
    groups: dict[str, list[str]] = field(default_factory=dict)  # target group key -> its members
    why_not: str = ""  # nothing to do, or why the bound is not reached

    @property
    def empty(self) -> bool:
        return not self.merge

    def describe(self) -> str:
        head = (f"table bound for {self.logical_table} v{self.version}: the view reads {self.tables_before} "
                f"physical table(s), bound {self.max_tables} ({SETTING})")
        if self.empty:
            return f"{head}: nothing to merge ({self.why_not})"
        lines = [f"{head}: merge {len(self.merge)} least-read feature table(s) into column groups -> "
                 f"{self.tables_after} table(s)"]
        for group, members in self.groups.items():
            lines.append(f"  into {group}: " + ", ".join(f"{k} ({self.reads.get(k, 0)} reads)" for k in members[:12])
                         + (f", ... and {len(members) - 12} more" if len(members) > 12 else ""))
        if self.why_not:
            lines.append(f"  bound not reached: {self.why_not}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def max_tables_setting(value: int | None = None) -> int:
    """The bound: ``value`` or ``OMNI_FAMILY_MAX_TABLES``; a :class:`ConfigError` when below 2.

    Two is the least a family can reach (its base and one column group): a smaller bound
    could never be met, and maintenance would rewrite on every run chasing it.
    """
    bound = settings.value(SETTING) if value is None else value
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < 2:
        raise ConfigError(f"{SETTING}={bound!r}: the physical table bound must be a whole number >= 2 "
                          "(the base table and one column group)")
    return bound


def view_tables(state: FamilyState) -> set[str]:
    """Keys of the physical tables the family's view reads (see the module docstring)."""
    from catalog_ext.view_sql import view_driver

    keys = {view_driver(state).key}
    for col in state.columns:
        keys.update(pc.table for pc in state.read_parts(col.path))
    return keys


def table_reads(state: FamilyState, reads: list[dict[str, Any]]) -> Counter[str]:
    """Physical table key -> how many of ``reads`` (query-log reads) touched it."""
    counts: Counter[str] = Counter()
    for r in reads:
        counts.update({pc.table for c in r["columns"] for pc in state.read_parts(c)})
    return counts


def plan_table_bound(store: Any, name: str, *, max_tables: int | None = None,
                     reads: list[dict[str, Any]] | None = None) -> TableBoundPlan:
    """The shortest least-read-first run of feature tables whose merge meets the bound.

    ``reads``: the logged reads to rank by (default: the query log's window, as co-read
    groups use it).
    """
    from governance.column_groups import plan_column_groups
    from governance.coread import WINDOW_DAYS, logged_reads

    bound = max_tables_setting(max_tables)
    ns, table = split_qualified(name)
    state = store.load(ns, table)
    counted = view_tables(state)
    plan = TableBoundPlan(state.table.identifier, state.version, bound, len(counted), len(counted))
    if len(counted) <= bound:
        plan.why_not = f"{len(counted)} <= {bound}"
        return plan
    if reads is None:
        reads = logged_reads(store.catalog, state, window_days=WINDOW_DAYS)
    used = table_reads(state, reads)
    order = {t.key: i for i, t in enumerate(state.tables)}
    candidates = sorted((t.key for t in state.tables if t.role == "feature" and not t.emptied
                         and t.key in counted and state.columns_of_table(t.key)),
                        key=lambda k: (used[k], order[k]))

    def after(k: int) -> tuple[int, Any]:
        if k < 1:
            return len(counted), None
        # plan_column_groups on the prefix (narrow or not): the regroup that will run
        p = plan_column_groups(store, state.table.identifier, tables=candidates[:k])
        gone = {key for m in p.moves for key in m.members}
        return len((counted - gone) | {m.group_key for m in p.moves}), p

    # the count falls (or stays) as the prefix grows: each member leaves one table, and a new
    # group takes at least two - so the shortest prefix meeting the bound is found by halving.
    # One table can be enough: it joins an existing group of its kind (alone it makes none)
    lo, hi = 1, len(candidates)
    best = after(hi)
    if best[0] > bound:
        chosen = best
        skipped = best[1].skipped if best[1] is not None else {}
        reasons = Counter(why.split(" (")[0] for why in skipped.values())
        plan.why_not = (f"merging every feature table that can move leaves {best[0]}: column groups are not "
                        "merged with each other" + "".join(f"; {n} table(s): {why}" for why, n in reasons.items()))
    else:
        while lo < hi:
            mid = (lo + hi) // 2
            if after(mid)[0] <= bound:
                hi = mid
            else:
                lo = mid + 1
        chosen = after(lo)
    count, groups = chosen
    if groups is None or not groups.moves:
        plan.why_not = plan.why_not or "no feature table can move"
        return plan
    plan.tables_after = count
    moved = {key: m.identifier for m in groups.moves for key in m.members}
    plan.merge = [k for k in candidates if k in moved]
    plan.reads = {k: used[k] for k in plan.merge}
    plan.groups = {m.identifier: list(m.members) for m in groups.moves}
    return plan


def bound_tables(store: Any, name: str, *, max_tables: int | None = None, dry_run: bool = False,
                 progress: bool | None = None, command: str = "",
                 reads: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Plan and (unless ``dry_run``) run the merge in ONE logical commit (a column-group regroup).

    Returns the plan, its description and the logical version after; ``regroup``: the
    regroup's own report when it ran. Loses cleanly to a concurrent writer as regroup does.
    """
    from governance.column_groups import regroup

    plan = plan_table_bound(store, name, max_tables=max_tables, reads=reads)
    report: dict[str, Any] = {"plan": plan.to_dict(), "describe": plan.describe(), "logical_version": plan.version}
    if plan.empty or dry_run:
        return report
    moved = regroup(store, name, tables=plan.merge, progress=progress,
                    command=command or f"maintain {plan.logical_table} (table bound)")
    report["regroup"] = moved
    report["logical_version"] = moved["logical_version"]
    return report
