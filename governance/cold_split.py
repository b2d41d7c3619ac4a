"""Cold columns out of a read column group: what ``omni advise`` proposes and ``omni maintain`` applies.

Why: every merge of a new batch rewrites a column group's files of that batch, all its
columns, and a query on the group's columns scans a schema widened by all of them. A group
that logged reads keep using while most of its bytes sit in columns no logged read asked
for pays that for nothing: the cold columns move to a table of their own
(:func:`governance.column_groups.split_columns`: one logical commit, a move, no copy; older
versions read them where they were).

When: a group read at least :data:`MIN_SPLIT_READS` times whose never-read columns hold at
least :data:`MIN_COLD_SHARE` of its bytes (Parquet column sizes of the pinned data files,
measured, not guessed). One group per run: the one with the most cold bytes.

A split adds one physical table, so maintenance applies it only while the view then still
reads at most ``OMNI_FAMILY_MAX_TABLES`` tables (:mod:`governance.table_bound`); the
advice shows it all the same, with the reason it waits.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from catalog_ext.contract import split_qualified
from catalog_ext.family import FamilyState

#: a group read at least this often in the log is judged
MIN_SPLIT_READS = 3
#: ... and split when its never-read columns hold at least this share of its bytes
MIN_COLD_SHARE = 0.5
#: at most this many columns in one split
MAX_COLUMNS = 32


@dataclass
class ColdSplit:
    """The cold columns of one column group, and the reads that make them cold."""

    group_key: str
    group: str  # its identifier
    columns: list[str]
    cold_bytes: int
    total_bytes: int
    readers: int  # logged reads that used the group
    latency_ms: int  # what those reads took in all
    engines: dict[str, int] = field(default_factory=dict)  # those reads by the engine they came from

    def reason(self, reads: int) -> str:
        return (f"{self.readers} of {reads} logged reads used column group {self.group}, none of them these "
                f"{len(self.columns)} column(s): {self.cold_bytes / self.total_bytes:.0%} of its bytes "
                f"({self.cold_bytes / 2**20:.2f} MiB), which every merge of a new batch rewrites with the group")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_cold_split(state: FamilyState, reads: list[dict[str, Any]], by_table: dict[tuple[str, str], int]
                    ) -> ColdSplit | None:
    """The column group whose reads skip the most bytes, if one is due (see the module docstring)."""
    best = None
    for t in state.tables:
        if t.role != "column-group" or t.emptied:
            continue
        members = [c.path for c in state.columns if any(pc.table == t.key for pc in state.physical_columns_of(c.path))]
        readers = [r for r in reads if any(pc.table == t.key for c in r["columns"] for pc in state.read_parts(c))]
        used = {c for r in readers for c in r["columns"]}
        cold = [c for c in members if c not in used]
        total = sum(by_table.get((c, t.key), 0) for c in members)
        cold_bytes = sum(by_table.get((c, t.key), 0) for c in cold)
        if (len(readers) < MIN_SPLIT_READS or not cold or len(cold) == len(members) or not total
                or cold_bytes / total < MIN_COLD_SHARE):
            continue
        if best is None or cold_bytes > best.cold_bytes:
            best = ColdSplit(t.key, t.identifier, cold[:MAX_COLUMNS], cold_bytes, total, len(readers),
                             sum(r["latency_ms"] for r in readers),
                             dict(Counter(r.get("query_engine", "omni") for r in readers)))
    return best


def column_bytes_by_table(catalog: Any, state: FamilyState) -> dict[tuple[str, str], int]:
    """(logical column, physical table key) -> Parquet bytes of its values there at ``state``
    (data file column sizes; materialized copies left out)."""
    out: dict[tuple[str, str], int] = {}
    for t in state.tables:
        if t.snapshot_id is None or t.role == "materialized":
            continue
        table = catalog.load_table(t.identifier)
        schema = table.schema()
        by_id: dict[int, int] = {}
        for task in table.scan(snapshot_id=t.snapshot_id).plan_files():
            for fid, size in (task.file.column_sizes or {}).items():
                by_id[fid] = by_id.get(fid, 0) + size
        for col in state.columns:
            for pc in state.physical_columns_of(col.path):
                if pc.table != t.key:
                    continue
                try:
                    field_id = schema.find_field(pc.name).field_id
                except ValueError:
                    continue
                out[(col.path, t.key)] = out.get((col.path, t.key), 0) + by_id.get(field_id, 0)
    return out


def split_cold_columns(store: Any, name: str, *, max_tables: int | None = None, dry_run: bool = False,
                       progress: bool | None = None, command: str = "",
                       reads: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Plan from the query log and (unless ``dry_run``, or the split would pass the table
    bound) move the cold columns out of their group in ONE logical commit."""
    from governance.column_groups import split_columns
    from governance.coread import WINDOW_DAYS, logged_reads
    from governance.table_bound import max_tables_setting, view_tables

    bound = max_tables_setting(max_tables)
    ns, table = split_qualified(name)
    state = store.load(ns, table)
    if reads is None:
        reads = logged_reads(store.catalog, state, window_days=WINDOW_DAYS)
    report: dict[str, Any] = {"plan": None, "logical_version": state.version}
    plan = plan_cold_split(state, reads, column_bytes_by_table(store.catalog, state)) if reads else None
    if plan is None:
        report["describe"] = (f"cold columns of {state.table.identifier} v{state.version}: none to split (no column "
                              f"group read >= {MIN_SPLIT_READS} times with >= {MIN_COLD_SHARE:.0%} of its bytes in "
                              "columns no logged read asked for)")
        return report
    report["plan"] = plan.to_dict()
    report["describe"] = (f"cold columns of {state.table.identifier} v{state.version}: split "
                          f"{', '.join(plan.columns)} out of {plan.group} ({plan.reason(len(reads))})")
    count = len(view_tables(state))
    if count + 1 > bound:
        report["describe"] += (f" - not applied: the view reads {count} physical tables and a split adds one, past "
                               f"OMNI_FAMILY_MAX_TABLES={bound}")
        return report
    if dry_run:
        return report
    moved = split_columns(store, name, plan.columns, progress=progress,
                          command=command or f"regroup {state.table.identifier} --split {','.join(plan.columns)}")
    report["split"] = moved
    report["logical_version"] = moved["logical_version"]
    report["describe"] += "\n" + moved["describe"]
    return report
