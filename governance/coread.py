"""Co-read column groups: columns that logged reads keep joining across groups move into one.

Why: :mod:`governance.column_groups` first groups features by kind and registration
order, up to 256 columns a group. A query naming 15 features registered far apart then
joins one group per feature: at 2,500 columns it joined 11 tables and took 4.4x what
the same query took at 200 columns, where one group held them all (Spark: 8.1x;
benchmarks/RESULTS.md#width). The paper groups columns by co-access, and the query log
(``omni_sys.query_log``: every ``omni sql`` query and export, the logical columns it read)
says which columns are read together.

How:

- **plan** (:func:`plan_coread`): from the logged reads, the feature columns living in
  column groups that reads joining at least :data:`MIN_TABLES_JOINED` tables named. The
  set is then trimmed greedily against the WHOLE logged workload: a column stays where it
  is when moving it adds as many joins to other reads (a column also read with its present
  group-mates) as it saves. Cost model: a read joins one table per distinct table its
  columns live in. Reads are counted per distinct column set, so the plan costs the
  number of query shapes, not the number of queries. A column kept back that way (say a
  filter column that another read also reads with its group-mates) can still move with
  that other read's columns: the plan then takes whole reads along, one at a time, when
  that makes the workload join fewer tables (both reads then read the new table alone).
- **move**: :func:`governance.column_groups.split_columns` - the columns leave their
  groups for one new table in ONE logical commit (Prepare-Execute-Commit, no copy kept,
  older versions keep reading the old layout; a concurrent writer makes it fail cleanly).
- **due** (``omni maintain``): when at least :data:`MIN_READS` logged reads would join fewer
  tables. ``omni regroup NAME --co-read`` and ``omni advise`` propose the same move.

A move, unlike a materialized copy (:mod:`governance.materialize`), costs no storage and
does not go stale when batches arrive; it makes the other reads of the moved columns join
one more table, which is what the cost model weighs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from catalog_ext import settings
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES, split_qualified
from catalog_ext.family import FamilyState

#: a read "joins" when its columns live in at least this many physical tables
MIN_TABLES_JOINED = 3
#: ``omni maintain`` moves columns once this many logged reads would join fewer tables
MIN_READS = settings.value("OMNI_COREAD_MIN_READS")
#: at most this many columns move in one plan (a bigger co-read set is rarely one workload)
MAX_COLUMNS = 64
#: only reads logged within this many days count: the workload of now, and a bounded scan
WINDOW_DAYS = float(settings.value("OMNI_COREAD_WINDOW_DAYS"))
NEW_TABLE = "<co-read group>"


@dataclass
class CoreadPlan:
    logical_table: str
    version: int
    columns: list[str] = field(default_factory=list)  # what moves, in the order first read
    reads: int = 0  # logged reads considered
    served: int = 0  # of them, reads that join fewer tables after the move
    joins_before: int = 0  # tables joined by all logged reads, summed, today
    joins_after: int = 0  # the same after the move
    why_not: str = ""
    engines: dict[str, int] = field(default_factory=dict)  # served reads by the engine they came from

    @property
    def empty(self) -> bool:
        return not self.columns

    def describe(self) -> str:
        if self.empty:
            return f"co-read groups for {self.logical_table} v{self.version}: nothing to move ({self.why_not})"
        return (f"co-read group for {self.logical_table} at version {self.version}: move "
                f"{len(self.columns)} column(s) into one table ({', '.join(self.columns[:12])}"
                f"{', ...' if len(self.columns) > 12 else ''}); {self.served} of {self.reads} logged reads "
                f"join fewer tables ({engine_counts(self.engines)}), the workload's tables read "
                f"{self.joins_before} -> {self.joins_after}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def engine_counts(engines: dict[str, int]) -> str:
    """``spark 3, trino 2``: how many reads came from each engine."""
    return ", ".join(f"{e} {n}" for e, n in sorted(engines.items())) or "none"


def read_of(state: FamilyState, row: dict[str, Any]) -> dict[str, Any]:
    """One query-log row as a read of ``state``: its logical leaf columns that still exist."""
    from omni_iceberg.read.reader import leaf_paths

    # columns of an older version may have left the table since: they are not advised on
    asked = [c for c in json.loads(row["columns"]) if c not in (ID_COLUMN, BATCH_COLUMN)]
    known = [p for p in leaf_paths(state, [c for c in asked if c in STAGES or state.has_column(c)])
             if state.has_column(p)]
    return {"kind": row["kind"], "columns": known, "engine": row["engine"], "latency_ms": int(row["latency_ms"]),
            "tables": len(json.loads(row["physical_tables"])),
            # the engine the query came from (rows logged before Spark and Trino were recorded: omni)
            "query_engine": row.get("query_engine") or "omni"}


def logged_reads(catalog: Any, state: FamilyState, *, window_days: float | None = None) -> list[dict[str, Any]]:
    """The reads of ``state``'s logical table in ``omni_sys.query_log`` (all, or the last ``window_days``)."""
    from catalog_ext import system_tables

    flt = f"logical_table == '{state.table.identifier}'"
    if window_days is not None:
        since = datetime.now(timezone.utc) - timedelta(days=window_days)
        flt += f" and at >= '{since.isoformat()}'"
    rows = system_tables.read_rows(catalog, system_tables.QUERY_LOG, flt).to_pylist()
    return [read_of(state, row) for row in rows]


def plan_coread(state: FamilyState, reads: list[dict[str, Any]], *, max_columns: int = MAX_COLUMNS) -> CoreadPlan:
    """The columns to move into one table for ``reads`` (see the module docstring)."""
    plan = CoreadPlan(state.table.identifier, state.version, reads=len(reads))
    homes: dict[str, frozenset[str]] = {}

    def home(path: str) -> frozenset[str]:
        if path not in homes:
            homes[path] = frozenset(pc.table for pc in state.read_parts(path))
        return homes[path]

    def movable(path: str) -> bool:
        # a feature whose values all sit in column groups (a part still in its feature table is
        # a batch the next regroup moves first; a fresh materialized copy is read instead)
        col = state.column(path)
        tables = home(path)
        return (col.kind == "feature" and bool(tables)
                and all(state.physical_table(t).role == "column-group" for t in tables))

    shapes = Counter(frozenset(r["columns"]) for r in reads if r["columns"] and r.get("engine") != "hot")

    def joins(shape: frozenset[str], moved: frozenset[str]) -> int:
        tables = {t for c in shape - moved for t in home(c)}
        return len(tables) + (1 if shape & moved else 0)

    def cost(moved: frozenset[str]) -> int:
        return sum(n * joins(shape, moved) for shape, n in shapes.items())

    counts: Counter[str] = Counter()
    for shape, n in shapes.items():
        if joins(shape, frozenset()) >= MIN_TABLES_JOINED:
            for c in shape:
                if movable(c):
                    counts[c] += n
    chosen = frozenset(c for c, _ in counts.most_common(max_columns))
    if not chosen:
        plan.why_not = (f"no logged read joined {MIN_TABLES_JOINED} or more tables over columns in column groups"
                        if reads else "no read of it is logged yet")
        return plan
    def trim(chosen: frozenset[str]) -> tuple[frozenset[str], int]:
        best = cost(chosen)
        while chosen:  # drop the column whose move saves least, while dropping it costs nothing
            trial = min(((cost(chosen - {c}), c) for c in chosen), key=lambda x: (x[0], x[1]))
            if trial[0] > best:
                break
            best, chosen = trial[0], chosen - {trial[1]}
        return chosen, best

    def extend(chosen: frozenset[str], best: int) -> tuple[frozenset[str], int]:
        # Trimming keeps a column where another read also needs it (a tie: the move saves one
        # join and costs one). Taking that other read's columns along can beat the tie: both
        # reads then read the new table alone. Tried read by read (one column at a time never
        # pays: the read still needs its old table for the rest), on the reads sharing a column
        # with a read the move serves - a bounded neighbourhood, not the whole log - each alone
        # and together with the served reads it shares columns with.
        def along(shape: frozenset[str]) -> frozenset[str]:
            return frozenset(c for c in shape if movable(c))

        grown = True
        while grown:
            grown = False
            served = [s for s in shapes if s & chosen]
            near = sorted({s for s in shapes for t in served if s & t and not s <= chosen},
                          key=lambda s: (-shapes[s], sorted(s)))
            for shape in near:
                tries = [chosen | along(shape)]
                tries.append(tries[0].union(*(along(t) for t in served if t & shape)))
                trial = min(((cost(t), sorted(t)) for t in tries if t != chosen and len(t) <= max_columns),
                            default=None)
                if trial is not None and trial[0] < best:
                    chosen, best, grown = frozenset(trial[1]), trial[0], True
                    break
        return chosen, best

    chosen, best = extend(*trim(chosen))
    chosen, best = trim(chosen)  # what the reads taken along made redundant
    before = cost(frozenset())
    already = len({t for c in chosen for t in home(c)}) <= 1  # they already share one table
    if len(chosen) < 2 or best >= before or already:
        plan.why_not = "moving the co-read columns would not make the logged reads join fewer tables"
        return plan
    order = {c: i for i, c in enumerate(dict.fromkeys(c for r in reads for c in r["columns"]))}
    plan.columns = sorted(chosen, key=lambda c: order.get(c, len(order)))
    plan.served = sum(n for shape, n in shapes.items() if joins(shape, chosen) < joins(shape, frozenset()))
    plan.joins_before, plan.joins_after = before, best
    plan.engines = dict(Counter(r.get("query_engine", "omni") for r in reads if r["columns"] and r.get("engine") != "hot"
                                and joins(frozenset(r["columns"]), chosen) < joins(frozenset(r["columns"]), frozenset())))
    return plan


def coread_regroup(store: Any, name: str, *, dry_run: bool = False, progress: bool | None = None,
                   command: str = "", min_reads: int = 1, window_days: float | None = WINDOW_DAYS
                   ) -> dict[str, Any]:
    """Plan from the query log and (unless ``dry_run``, or fewer than ``min_reads`` reads are
    served) move the co-read columns into one table in ONE logical commit."""
    from governance.column_groups import split_columns

    ns, table = split_qualified(name)
    state = store.load(ns, table)
    plan = plan_coread(state, logged_reads(store.catalog, state, window_days=window_days))
    report: dict[str, Any] = {"plan": plan.to_dict(), "describe": plan.describe(), "logical_version": state.version}
    if plan.empty:
        return report
    if plan.served < min_reads:
        report["describe"] += f" - not due: fewer than {min_reads} logged reads served"
        return report
    if dry_run:
        report["describe"] += "\n" + split_columns(store, name, plan.columns, dry_run=True)["describe"]
        return report
    moved = split_columns(store, name, plan.columns, progress=progress,
                          command=command or f"regroup {state.table.identifier} --co-read")
    report["split"] = moved
    report["logical_version"] = moved["logical_version"]
    report["describe"] += "\n" + moved["describe"]
    return report
