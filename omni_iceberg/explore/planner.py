"""From logical SQL to physical scans and SQL: the plan, its execution, its explanation.

``plan_query`` runs the rules of :mod:`omni_iceberg.explore.rules`, then decides per
logical table which physical tables to scan (only those holding referenced columns),
at which pinned snapshot, with which columns, batches and pushed predicates. The
same plan renders as SQL for DuckDB (local execution over Arrow scans), Spark or
Trino (pinned ``VERSION AS OF`` subqueries, for ``--dialect`` or Spark execution).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlglot import exp

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, split_qualified
from catalog_ext.family import FamilyState, PhysicalTable
from catalog_ext.view_sql import render_family_select
from omni_iceberg.explore.rules import QueryContext, QueryError, run_rules


@dataclass
class PhysicalScan:
    alias: str
    table: PhysicalTable
    columns: list[str]  # top-level physical columns read (keys included)
    filters: list[exp.Expression] = field(default_factory=list)  # pushed conjuncts (logical columns)
    batches: list[str] | None = None

    @property
    def local_name(self) -> str:
        return f"__scan_{self.alias}_{self.table.key}"


@dataclass
class QueryPlan:
    ctx: QueryContext
    scans: list[PhysicalScan]

    def tables(self) -> list[str]:
        return [s.table.identifier for s in self.scans]

    def sql(self, dialect: str) -> str:
        """The query over physical tables: ``duckdb`` names local scans; spark/trino pin snapshots."""
        tree = self.ctx.tree.copy()
        placeholders: dict[str, str] = {}
        by_alias = {}
        for s in self.scans:
            by_alias.setdefault(s.alias, []).append(s)
        originals = {id(t.node): alias for alias, t in self.ctx.tables.items()}
        for node, original in zip(tree.find_all(exp.Table), self.ctx.tree.find_all(exp.Table)):
            alias = originals.get(id(original))
            if alias is None:
                continue
            token = f"omni_rel_{len(placeholders)}_"
            placeholders[token] = self._derived(alias, by_alias[alias], dialect)
            node.replace(exp.Table(this=exp.to_identifier(token), alias=exp.TableAlias(this=exp.to_identifier(alias))))
        sql = tree.sql(dialect=dialect)
        for token, derived in placeholders.items():
            sql = sql.replace(token, f"({derived})", 1)
        return sql

    def _derived(self, alias: str, scans: list[PhysicalScan], dialect: str) -> str:
        bound = self.ctx.tables[alias]
        local = {s.table.key: s.local_name for s in scans}
        if dialect == "duckdb":
            ref = lambda t, a: f'"{local[t.key]}" AS {a}'  # noqa: E731 - scans were filtered already
            where = None
        else:
            ref = None
            batches = self.ctx.batches.get(alias)
            q = "`" if dialect == "spark" else '"'
            where = (f"t0.{q}{BATCH_COLUMN}{q} IN ({', '.join(repr(b) for b in batches)})" if batches else None)
        state = bound.state.model_copy(update={"tables": tuple(t for t in bound.state.tables if t.key in local)})
        return render_family_select(state, dialect, self.ctx.columns[alias], ref, where)

    def explain(self) -> str:
        lines = []
        for alias, t in self.ctx.tables.items():
            lines.append(f"{alias}: logical table {t.identifier} at version {t.state.version}")
            batches = self.ctx.batches.get(alias)
            lines.append(f"  batches: {', '.join(batches) if batches else 'all (' + str(len(t.state.batches)) + ')'}")
            lines.append(f"  columns: {', '.join(self.ctx.columns[alias])}")
            for s in self.scans:
                if s.alias != alias:
                    continue
                pushed = " AND ".join(f.sql() for f in s.filters) or "-"
                lines.append(f"  scan {s.table.identifier} @ snapshot {s.table.snapshot_id}: "
                             f"columns [{', '.join(s.columns)}], pushed [{pushed}]")
            skipped = [x.identifier for x in t.state.tables if x.identifier not in self.tables()]
            if skipped:
                lines.append(f"  pruned (not read): {', '.join(skipped)}")
        lines.append("physical SQL (duckdb):")
        lines.append("  " + self.sql("duckdb"))
        return "\n".join(lines)


def plan_query(omni: Any, sql: str, as_of: int | None = None) -> QueryPlan:
    def load(ns: str, name: str, version: int | None) -> FamilyState:
        return omni.store.load(ns, name, version)

    known: list[str] = []

    def known_tables() -> list[str]:
        if not known:
            known.extend(omni.store.list_tables())
        return known

    ctx = run_rules(sql, load, known_tables, as_of)
    scans: list[PhysicalScan] = []
    for alias, bound in ctx.tables.items():
        state = bound.state
        needed: dict[str, list[str]] = {state.base_table.key: [ID_COLUMN, BATCH_COLUMN]}
        for path in _leaves(state, ctx.columns[alias]):
            for pc in state.physical_columns_of(path)[:1]:
                needed.setdefault(pc.table, [ID_COLUMN, BATCH_COLUMN])
                top = pc.name  # a nested name (RawData.url) reads only that field of the struct
                if top not in needed[pc.table]:
                    needed[pc.table].append(top)
        for key, cols in needed.items():
            table = state.physical_table(key)
            filters = [f for f in ctx.pushed.get(alias, []) if _lives_in(state, ctx, f, key)]
            scans.append(PhysicalScan(alias, table, cols, filters, ctx.batches.get(alias)))
    return QueryPlan(ctx, scans)


def _leaves(state: FamilyState, columns: list[str]) -> list[str]:
    from catalog_ext.contract import STAGES

    out = []
    for c in columns:
        if c in STAGES:
            out += [f.path for f in state.stage_fields(c)]
        elif c not in (ID_COLUMN, BATCH_COLUMN):
            out.append(c)
    return out


def _lives_in(state: FamilyState, ctx: QueryContext, cond: exp.Expression, key: str) -> bool:
    for col in cond.find_all(exp.Column):
        path = ctx.resolved[id(col)][1]
        if path in (ID_COLUMN, BATCH_COLUMN):
            continue
        if not any(pc.table == key for pc in state.physical_columns_of(path)):
            return False
    return True


def _to_iceberg(cond: exp.Expression, ctx: QueryContext, state: FamilyState, key: str):
    """A pushed conjunct as a pyiceberg expression on physical column names (None if not expressible)."""
    from pyiceberg import expressions as E

    def name_of(col: exp.Column) -> str:
        path = ctx.resolved[id(col)][1]
        if path in (ID_COLUMN, BATCH_COLUMN):
            return path
        return next(pc.name for pc in state.physical_columns_of(path) if pc.table == key)

    def value(lit: exp.Literal) -> Any:
        if lit.is_string:
            return lit.this
        return float(lit.this) if any(c in lit.this for c in ".eE") else int(lit.this)

    ops = {exp.EQ: E.EqualTo, exp.NEQ: E.NotEqualTo, exp.GT: E.GreaterThan, exp.GTE: E.GreaterThanOrEqual,
           exp.LT: E.LessThan, exp.LTE: E.LessThanOrEqual}
    flipped = {exp.GT: E.LessThan, exp.GTE: E.LessThanOrEqual, exp.LT: E.GreaterThan, exp.LTE: E.GreaterThanOrEqual,
               exp.EQ: E.EqualTo, exp.NEQ: E.NotEqualTo}
    if type(cond) in ops:
        if isinstance(cond.left, exp.Column):
            return ops[type(cond)](name_of(cond.left), value(cond.right))
        return flipped[type(cond)](name_of(cond.right), value(cond.left))
    if isinstance(cond, exp.In):
        return E.In(name_of(cond.this), {value(v) for v in cond.expressions})
    if isinstance(cond, exp.Is):
        return E.IsNull(name_of(cond.this))
    if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is):
        return E.NotNull(name_of(cond.this.this))
    return None


def scan_arrow(omni: Any, plan: QueryPlan, scan: PhysicalScan) -> pa.Table:
    from pyiceberg.expressions import AlwaysTrue, And, In

    state = plan.ctx.tables[scan.alias].state
    row_filter = AlwaysTrue()
    if scan.batches:
        row_filter = In(BATCH_COLUMN, set(scan.batches))
    for f in scan.filters:
        expr = _to_iceberg(f, plan.ctx, state, scan.table.key)
        if expr is not None:
            row_filter = And(row_filter, expr)
    table = omni.catalog.load_table(scan.table.identifier)
    return table.scan(row_filter=row_filter, snapshot_id=scan.table.snapshot_id,
                      selected_fields=tuple(scan.columns)).to_arrow()


def execute_local(omni: Any, plan: QueryPlan) -> pa.Table:
    """Run the plan on embedded DuckDB over Arrow scans of the pinned snapshots."""
    import duckdb

    con = duckdb.connect()
    for scan in plan.scans:
        con.register(scan.local_name, scan_arrow(omni, plan, scan))
    try:
        return con.sql(plan.sql("duckdb")).to_arrow_table()
    except duckdb.Error as e:
        raise QueryError(f"query failed: {e}") from e


def execute_spark(omni: Any, plan: QueryPlan) -> pa.Table:
    """Run the plan on Spark (the session built for this omni catalog)."""
    from spark_udfs.session import build_spark_session

    spark = build_spark_session(omni.config)
    return pa.Table.from_pandas(spark.sql(plan.sql("spark")).toPandas(), preserve_index=False)


def run_query(omni: Any, sql: str, as_of: int | None = None, engine: str = "local") -> pa.Table:
    """Plan, execute and log one logical query."""
    from omni_iceberg.explore.query_log import log_query

    started = time.perf_counter()
    plan = plan_query(omni, sql, as_of)
    result = execute_spark(omni, plan) if engine == "spark" else execute_local(omni, plan)
    log_query(omni, plan, kind="sql", engine=engine, rows=result.num_rows,
              latency_ms=int((time.perf_counter() - started) * 1000))
    return result


_ = split_qualified
