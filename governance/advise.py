"""``omni advise``: what the observed workload says to accelerate, and what it would cost.

The advisor reads the table's rows of ``omni_sys.query_log`` (every ``omni sql`` query
and ``omni export`` logs the logical columns it read, the physical tables it scanned,
the engine and its latency) and proposes:

- **hot columns** (:mod:`omni_iceberg.hot`): the scalar feature columns of the logged
  SQL queries that read nothing else - those queries would be answered by ClickHouse.
  Benefit: how many logged queries (and how much of their latency) that covers;
- **column groups** (:mod:`governance.column_groups`): when logged reads joined feature
  tables a regroup would merge. Benefit: the joins it removes; no storage (a move);
- **a co-read group** (:mod:`governance.coread`): columns that logged reads join across
  column groups, moved into one table. Benefit: the joins the whole logged workload saves
  (other reads of those columns may join one more); no storage (a move);
- **a materialization** (:mod:`governance.materialize`): the columns read together by
  queries and exports that joined several physical tables - those reads would scan one
  table. Benefit: the reads and joins it removes;
- **a column split** (:mod:`governance.cold_split`, which ``omni maintain`` applies): a column group that
  logged reads keep using while most of its bytes sit in columns no logged read asked for.
  Benefit: those cold bytes stop being rewritten with the group (every merge of a new
  batch rewrites the group's files of that batch) and stop widening its schema; a move,
  no storage.
- **a table-bound merge** (:mod:`governance.table_bound`): when the view reads more physical
  tables than ``OMNI_FAMILY_MAX_TABLES``, the least-read feature tables that ``omni maintain``
  will merge into column groups, and the count it leaves. Proposed with or without logged
  reads: the bound does not depend on the workload, only the choice of tables does.

Each proposal's storage cost is measured, not guessed: the Parquet bytes of those
columns in the family today (``column_sizes`` of the pinned data files), which is
what a copy costs. Nothing is proposed that already exists (a hot column, a fresh
copy covering the set). ``apply=True`` runs the proposals through the same
Prepare-Execute-Commit code as ``omni accelerate``. Without a logged read there is
nothing to learn from, and the advice says so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from catalog_ext.contract import split_qualified
from catalog_ext.family import FamilyState

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

#: at most this many columns in one proposal (a copy wider than this is rarely co-read)
MAX_COLUMNS = 32
#: a materialization is proposed for reads that joined at least this many physical tables
MIN_TABLES_JOINED = 3


@dataclass
class Proposal:
    kind: str  # "regroup" | "coread" | "hot" | "materialize" | "split" | "bound"
    columns: list[str]
    reads: int  # logged reads it serves
    of_reads: int  # logged reads considered
    latency_ms: int  # what those reads took in all
    storage_bytes: int  # Parquet bytes of these columns today: what a copy costs
    benefit: str
    command: str
    engines: dict[str, int] = field(default_factory=dict)  # the reads it serves, by the engine they came from
    tables: list[str] = field(default_factory=list)  # physical table keys it moves ("bound": the merge)

    def describe(self) -> str:
        from governance.coread import engine_counts

        return (f"{self.kind}: {', '.join(self.columns)}\n  benefit: {self.benefit}\n"
                + (f"  reads served by engine: {engine_counts(self.engines)}\n" if self.engines else "")
                + f"  storage: ~{self.storage_bytes / 2**20:.1f} MiB (the columns' Parquet size today)\n"
                f"  apply: {self.command}")


@dataclass
class Advice:
    logical_table: str
    version: int
    reads_logged: int
    reads_by_engine: dict[str, int] = field(default_factory=dict)  # logged reads by the engine they came from
    proposals: list[Proposal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    applied: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"logical_table": self.logical_table, "version": self.version, "reads_logged": self.reads_logged,
                "reads_by_engine": self.reads_by_engine,
                "proposals": [asdict(p) for p in self.proposals], "notes": self.notes, "applied": self.applied}

    def describe(self) -> str:
        from governance.coread import engine_counts

        lines = [f"advice for {self.logical_table} at version {self.version} from {self.reads_logged} logged read(s)"
                 + (f" ({engine_counts(self.reads_by_engine)})" if self.reads_by_engine else "")]
        lines += [p.describe() for p in self.proposals]
        lines += [f"note: {n}" for n in self.notes]
        if not self.proposals:
            lines.append("nothing to propose")
        return "\n".join(lines)


def advise(ctx: OmniContext, name: str, *, apply: bool = False, progress: bool | None = None) -> Advice:
    from governance.cold_split import column_bytes_by_table
    from governance.column_groups import regroup, split_columns
    from governance.coread import logged_reads
    from governance.materialize import materialize
    from governance.table_bound import bound_tables
    from omni_iceberg.explore.query_log import flush_query_log
    from omni_iceberg.hot.sync import set_hot_columns

    ns, table = split_qualified(name)
    state = ctx.store.load(ns, table)
    flush_query_log(ctx)
    reads = logged_reads(ctx.catalog, state)
    advice = Advice(state.table.identifier, state.version, len(reads),
                    dict(Counter(r.get("query_engine", "omni") for r in reads)))
    bound = _bound(ctx, state, reads)
    fresh = state.fresh_materialized_tables()
    for m in state.materializations:  # what omni maintain does next without asking the log
        if m.table_key not in fresh:
            advice.notes.append(f"materialization {state.physical_table(m.table_key).identifier} is stale (read by "
                                "nobody until refreshed): omni maintain refreshes it before bounding the tables")
    if not reads:
        advice.notes.append(f"no query or export of {state.table.identifier} is logged yet: run some "
                            "(omni sql, omni export), then ask again")
        if bound is not None:
            advice.proposals.append(bound)
            if apply:
                advice.applied.append({"kind": bound.kind, "report": bound_tables(
                    ctx.store, name, reads=reads, progress=progress, command=bound.command)})
        return advice
    by_table = column_bytes_by_table(ctx.catalog, state)
    sizes: dict[str, int] = {}
    for (path, _key), size in by_table.items():
        sizes[path] = sizes.get(path, 0) + size
    coread = _coread(state, reads)
    # reads the move serves need no copy: a materialization is weighed on the others only
    served = set(coread.columns) if coread else set()
    unserved = [r for r in reads if not (set(r["columns"]) & served)]
    for proposal in (_regroup(ctx, state, reads), coread, _hot(state, reads, sizes),
                     _materialize(state, unserved, sizes), _split(state, reads, by_table), bound):
        if proposal is not None:
            advice.proposals.append(proposal)
    if apply:
        for p in advice.proposals:
            if p.kind == "regroup":
                report = regroup(ctx.store, name, progress=progress, command=p.command)
            elif p.kind == "bound":  # planned again: the proposals applied before it may have moved tables
                report = bound_tables(ctx.store, name, reads=reads, progress=progress, command=p.command)
            elif p.kind in ("split", "coread"):
                report = split_columns(ctx.store, name, p.columns, progress=progress, command=p.command)
            elif p.kind == "hot":
                report = set_hot_columns(ctx, name, sorted(set(p.columns) | set(state.hot.columns if state.hot
                                                                                 else ())), progress=progress)
            else:
                report = materialize(ctx.store, name, p.columns, progress=progress, command=p.command)
            advice.applied.append({"kind": p.kind, "report": report})
    return advice


def _hot(state: FamilyState, reads: list[dict[str, Any]], sizes: dict[str, int]) -> Proposal | None:
    from omni_iceberg.hot.store import SCALAR_TYPES

    def eligible(path: str) -> bool:
        col = state.column(path)
        return col.kind == "feature" and col.type in SCALAR_TYPES

    sql = [r for r in reads if r["kind"] == "sql" and r["columns"]]
    candidates = [r for r in sql if all(eligible(c) for c in r["columns"])]
    if not candidates:
        return None
    counts = Counter(c for r in candidates for c in r["columns"])
    columns = [c for c, _ in counts.most_common(MAX_COLUMNS)]
    served = [r for r in candidates if set(r["columns"]) <= set(columns)]
    already = set(state.hot.columns) if state.hot else set()
    if set(columns) <= already:
        return None
    waited = sum(r["latency_ms"] for r in served)
    return Proposal(
        "hot", columns, len(served), len(sql), waited, sum(sizes.get(c, 0) for c in columns),
        f"{len(served)} of {len(sql)} logged SQL queries read only these columns: ClickHouse would answer them "
        f"(they took {waited / 1000:.1f} s in all, joining up to {max(r['tables'] for r in served)} tables)",
        f"omni accelerate {state.table.identifier} --hot {','.join(sorted(set(columns) | already))}")


def _regroup(ctx: OmniContext, state: FamilyState, reads: list[dict[str, Any]]) -> Proposal | None:
    """Column groups (governance.column_groups) for logged reads that joined feature tables a
    regroup would merge: a move, not a copy, so it costs no storage."""
    from governance.column_groups import plan_column_groups

    plan = plan_column_groups(ctx.store, state.table.identifier)
    target = {key: m.group_key for m in plan.moves for key in m.members}
    if not target:
        return None
    saved, served, waited, columns = 0, 0, 0, []
    for r in reads:
        tables = {pc.table for c in r["columns"] for pc in state.read_parts(c)}
        moved = tables & set(target)
        after = (tables - moved) | {target[k] for k in moved}
        if len(after) < len(tables):
            saved += len(tables) - len(after)
            served += 1
            waited += r["latency_ms"]
            columns += [c for c in r["columns"] if any(pc.table in moved for pc in state.read_parts(c))]
    if not served:
        return None
    return Proposal(
        "regroup", list(dict.fromkeys(columns))[:MAX_COLUMNS], served, len(reads), waited, 0,
        f"{served} of {len(reads)} logged reads joined feature tables that {len(plan.moves)} column group(s) would "
        f"merge ({len(target)} tables): {saved} joins fewer (they took {waited / 1000:.1f} s in all); a move, "
        "not a copy", f"omni regroup {state.table.identifier}")


def _bound(ctx: OmniContext, state: FamilyState, reads: list[dict[str, Any]]) -> Proposal | None:
    """The merge ``omni maintain`` will run to keep the view under ``OMNI_FAMILY_MAX_TABLES`` tables."""
    from governance.table_bound import SETTING, plan_table_bound

    plan = plan_table_bound(ctx.store, state.table.identifier, reads=reads)
    if plan.empty:
        return None
    columns = [pc.logical for key in plan.merge for pc in state.columns_of_table(key)]
    touched = sum(1 for r in reads if any(pc.table in plan.reads for c in r["columns"] for pc in state.read_parts(c)))
    reached = f" ({plan.why_not})" if plan.why_not else ""
    return Proposal(
        "bound", columns[:MAX_COLUMNS], touched, len(reads), 0, 0,
        f"the view reads {plan.tables_before} physical tables, more than {SETTING}={plan.max_tables} (Trino's "
        f"SELECT * passes its default 150-stage cap near 50): the {len(plan.merge)} least-read feature tables "
        f"({sum(plan.reads.values())} logged reads touched them) merge into column groups, leaving "
        f"{plan.tables_after}{reached}; a move, not a copy; omni maintain runs it",
        f"omni regroup {state.table.identifier} --tables {','.join(plan.merge)}", tables=list(plan.merge))


def _coread(state: FamilyState, reads: list[dict[str, Any]]) -> Proposal | None:
    """Columns that logged reads join across column groups, moved into one (governance/coread.py)."""
    from governance.coread import plan_coread

    plan = plan_coread(state, reads)
    if plan.empty:
        return None
    return Proposal(
        "coread", plan.columns, plan.served, len(reads), 0, 0,
        f"{plan.served} of {len(reads)} logged reads join these columns across column groups: moved into one "
        f"table, the logged reads join {plan.joins_before} -> {plan.joins_after} tables in all; a move, not a copy",
        f"omni regroup {state.table.identifier} --co-read", plan.engines)


def _materialize(state: FamilyState, reads: list[dict[str, Any]], sizes: dict[str, int]) -> Proposal | None:
    joined = [r for r in reads if r["tables"] >= MIN_TABLES_JOINED and r["engine"] != "hot" and r["columns"]]
    if not joined:
        return None
    counts = Counter(c for r in joined for c in r["columns"])
    columns = [c for c, _ in counts.most_common(MAX_COLUMNS)]
    served = [r for r in joined if set(r["columns"]) <= set(columns)]
    if not served:
        return None
    fresh = state.fresh_materialized_tables()
    if any(m.table_key in fresh and set(columns) <= set(m.columns) for m in state.materializations):
        return None
    waited = sum(r["latency_ms"] for r in served)
    joins = sum(r["tables"] - 1 for r in served)
    return Proposal(
        "materialize", columns, len(served), len(reads), waited, sum(sizes.get(c, 0) for c in columns),
        f"{len(served)} of {len(reads)} logged reads (queries and exports) read these columns across "
        f"{MIN_TABLES_JOINED} or more physical tables: one pre-joined table removes {joins} joins "
        f"(they took {waited / 1000:.1f} s in all)",
        f"omni accelerate {state.table.identifier} --materialize {','.join(columns)}",
        dict(Counter(r.get("query_engine", "omni") for r in served)))


def _split(state: FamilyState, reads: list[dict[str, Any]], by_table: dict[tuple[str, str], int]
           ) -> Proposal | None:
    """Cold columns out of the column group whose reads skip the most bytes (governance/cold_split.py)."""
    from governance.cold_split import plan_cold_split
    from governance.table_bound import SETTING, max_tables_setting, view_tables

    split = plan_cold_split(state, reads, by_table)
    if split is None:
        return None
    count, bound = len(view_tables(state)), max_tables_setting()
    waits = (f"; omni maintain waits with it: the view reads {count} physical tables and a split adds one, past "
             f"{SETTING}={bound}" if count + 1 > bound else "; omni maintain applies it")
    return Proposal(
        "split", split.columns, split.readers, len(reads), split.latency_ms, 0,
        f"{split.reason(len(reads))}; a move to a table of their own, not a copy{waits}",
        f"omni regroup {state.table.identifier} --split {','.join(split.columns)}", split.engines)
