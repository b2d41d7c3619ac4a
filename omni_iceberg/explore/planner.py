"""From logical SQL to physical scans and SQL: the plan, its execution, its explanation.

``plan_query`` runs :data:`omni_iceberg.explore.rules.RULES`, then decides per logical
table which physical tables to scan (only those holding referenced columns, and not
the base table when :mod:`~omni_iceberg.explore.rules.skip_base_table` found it
unneeded), at which pinned snapshot, with which columns, batches and pushed predicates.
The same plan renders as SQL for DuckDB (local execution over Arrow scans), Spark or
Trino (pinned ``VERSION AS OF`` subqueries, for ``--dialect`` or Spark execution).

The physical SQL is always generated from a tree: the user's checked query tree with
each logical table replaced by a subquery tree. Scans get generated names
(``__omni_scan_0``), so nothing the user wrote becomes part of a table name, and every
identifier and literal is quoted by the generator, never spliced as text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.family import FamilyState, PhysicalTable
from catalog_ext.view_sql import pinned_ref, render_family_select
from omni_iceberg.explore.id_route import IndexRoute, pinned_ids, plan_route, read_through_index
from omni_iceberg.explore.results import plain_numbers
from omni_iceberg.explore.routes import hot_route
from omni_iceberg.explore.rules import QueryContext, run_rules
from omni_iceberg.explore.rules.push_predicates import rejects_null
from omni_iceberg.read.guard import GENERATED_PREFIX, QueryError, too_deep_is_an_error
from omni_iceberg.read.reader import leaf_paths
from omni_iceberg.read.scope import check_generated, replacement, rewrite_sources

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

_DELETE_COUNTS = ("total-delete-files", "total-position-deletes", "total-equality-deletes")


@dataclass
class PhysicalScan:
    alias: str
    table: PhysicalTable
    columns: list[str]  # top-level physical columns read (keys included)
    filters: list[exp.Expression] = field(default_factory=list)  # pushed conjuncts (logical columns)
    batches: list[str] | None = None
    local_name: str = ""  # the name DuckDB knows this scan by: generated, never user text
    route: IndexRoute | None = None  # set when the query pins this table to ids (see explore.id_route)


@dataclass
class QueryPlan:
    ctx: QueryContext
    scans: list[PhysicalScan]
    loaded: dict[str, Any] = field(default_factory=dict)  # identifier -> pyiceberg table loaded while planning
    #: whether the hot store answers this query and why (None: no table it reads has hot columns,
    #: or no hot route is registered; see omni_iceberg.explore.routes)
    hot: Any = None
    #: the embedded engine's memory limit and spill folder when planned (see :func:`local_limits`)
    limits: dict[str, Any] = field(default_factory=dict)

    def tables(self) -> list[str]:
        return [s.table.identifier for s in self.scans]

    def sql(self, dialect: str) -> str:
        """The query over physical tables: ``duckdb`` names local scans; spark/trino pin snapshots."""
        with too_deep_is_an_error():
            return self.physical_tree(dialect).sql(dialect=dialect, comments=False)

    def physical_tree(self, dialect: str) -> exp.Query:
        """The user's query tree with every logical table replaced by its physical subquery.

        CTEs get generated names too (:func:`~omni_iceberg.read.scope.rewrite_sources`):
        the engine is handed no table name the user wrote.
        """
        originals = {id(t.node): alias for alias, t in [*self.ctx.tables.items(), *self.ctx.system.items()]}

        def derived(table: exp.Table) -> exp.Expression | None:
            alias = originals.get(id(table))
            return None if alias is None else replacement(table, self._derived(alias, dialect))

        tree = rewrite_sources(self.ctx.tree, self.ctx.scopes, GENERATED_PREFIX, derived)
        self._check_generated(tree, dialect)
        return tree

    def _derived(self, alias: str, dialect: str) -> exp.Select:
        scans = [s for s in self.scans if s.alias == alias]
        if alias in self.ctx.system:
            # a system table is read whole at the snapshot current when planning
            ref = f'"{scans[0].local_name}"' if dialect == "duckdb" else \
                pinned_ref(scans[0].table.identifier, scans[0].table.snapshot_id, "s", dialect)
            return sqlglot.parse_one(f"SELECT * FROM {ref}", read=dialect)
        bound = self.ctx.tables[alias]
        local = {s.table.key: s.local_name for s in scans}
        # render_family_select writes SQL from generated aliases (t0, t1), generated scan
        # names and identifiers validated when the family was created; it is parsed back
        # into a tree so that the user's query and ours are joined as trees only
        state = bound.state.model_copy(update={"tables": tuple(t for t in bound.state.tables if t.key in local)})
        ref = (lambda t, a: f'"{local[t.key]}" AS {a}') if dialect == "duckdb" else None
        text = render_family_select(state, dialect, self.ctx.columns[alias], ref, driver=scans[0].table)
        select = sqlglot.parse_one(text, read=dialect)
        batches = self.ctx.batches.get(alias)
        if batches and dialect != "duckdb":  # DuckDB's scans are filtered by batch already
            key = exp.Column(this=exp.to_identifier(BATCH_COLUMN, quoted=True), table=exp.to_identifier("t0"))
            select = select.where(key.isin(*[exp.Literal.string(b) for b in batches]))
        return select

    def _check_generated(self, tree: exp.Expression, dialect: str) -> None:
        """Defence in depth: the SQL handed to an engine reads only this plan's scans and generated CTEs."""
        allowed = {s.local_name for s in self.scans} if dialect == "duckdb" else \
            {s.table.identifier.split(".")[-1] for s in self.scans}
        check_generated(tree, allowed, dialect)

    def to_dict(self) -> dict[str, Any]:
        """The plan as data (``omni sql --explain --json``)."""
        out = []
        for alias, t in self.ctx.tables.items():
            read = [s for s in self.scans if s.alias == alias]
            out.append({
                "alias": alias, "logical_table": t.identifier, "logical_version": t.state.version,
                "batches": self.ctx.batches.get(alias), "columns": self.ctx.columns[alias],
                "base_table_read": any(s.table.key == t.state.base_table.key for s in read),
                "base_table_skipped_because": self.ctx.driver_reasons.get(alias),
                "scans": [{"table": s.table.identifier, "snapshot_id": s.table.snapshot_id, "columns": s.columns,
                           "pushed": [f.sql() for f in s.filters], "local_name": s.local_name,
                           "read": ("index" if s.route.uses_index(s.table.key) else "scan") if s.route else "scan",
                           "id_lookup": s.route.describe(s.table.key) if s.route else None} for s in read],
                "pruned": [x.identifier for x in t.state.tables if x.identifier not in self.tables()],
            })
        system = [{"alias": alias, "system_table": t.identifier,
                   "snapshot_id": next(s.table.snapshot_id for s in self.scans if s.alias == alias)}
                  for alias, t in self.ctx.system.items()]
        physical = {"duckdb": self.sql("duckdb")}
        route = hot_route()
        if self.hot is not None and self.hot.use and route is not None:
            physical["clickhouse"] = route.sql(self.ctx, self.hot)
        return {"tables": out, "system_tables": system, "physical_sql": physical,
                "hot_store": self.hot.to_dict() if self.hot is not None else None,
                "local_engine": {"engine": "duckdb", **self.limits}}

    def explain(self) -> str:
        lines = []
        plan = self.to_dict()
        for entry in plan["system_tables"]:
            lines.append(f"{entry['alias']}: system table {entry['system_table']} @ snapshot {entry['snapshot_id']} "
                         f"(read whole, read-only)")
        for entry in plan["tables"]:
            lines.append(f"{entry['alias']}: logical table {entry['logical_table']} "
                         f"at version {entry['logical_version']}")
            state = self.ctx.tables[entry["alias"]].state
            batches = entry["batches"]
            lines.append(f"  batches: {', '.join(batches) if batches else 'all (' + str(len(state.batches)) + ')'}")
            lines.append(f"  columns: {', '.join(entry['columns'])}")
            for s in entry["scans"]:
                lines.append(f"  scan {s['table']} @ snapshot {s['snapshot_id']}: "
                             f"columns [{', '.join(s['columns'])}], pushed [{' AND '.join(s['pushed']) or '-'}]")
                if s["id_lookup"]:
                    lines.append(f"    id lookup: {s['id_lookup']}")
            if entry["base_table_skipped_because"]:
                lines.append(f"  base table not read: {entry['base_table_skipped_because']}")
            if entry["pruned"]:
                lines.append(f"  pruned (not read): {', '.join(entry['pruned'])}")
        if plan["hot_store"] is not None:
            used = "answers this query" if plan["hot_store"]["used"] else "not used"
            lines.append(f"hot store: {used}: {plan['hot_store']['reason']}")
        if "clickhouse" in plan["physical_sql"]:
            lines.append("physical SQL (clickhouse, hot store):")
            lines.append("  " + plan["physical_sql"]["clickhouse"])
        if self.limits:
            spill = self.limits["spill_dir"]
            lines.append(f"local engine (duckdb): memory limit {self.limits['memory_limit_mb']:g} MiB "
                         f"(OMNI_MEMORY_LIMIT_MB), " + (f"spills to {spill}" if spill else "no spill folder"))
        lines.append("physical SQL (duckdb):" if "clickhouse" not in plan["physical_sql"] else
                     "physical SQL (duckdb, the Iceberg path it falls back to):")
        lines.append("  " + plan["physical_sql"]["duckdb"])
        return "\n".join(lines)


def plan_query(context: OmniContext, sql: str | exp.Query, as_of: int | None = None) -> QueryPlan:
    """Plan logical SQL text (or a query tree omni built itself, e.g. for export)."""
    catalog = getattr(context, "catalog", None)
    loaded: dict[str, Any] = {}

    def load(ns: str, name: str, version: int | None) -> FamilyState:
        return context.store.load(ns, name, version)

    known: list[str] = []

    def known_tables() -> list[str]:
        if not known:
            known.extend(context.store.list_tables())
        return known

    def row_count(table: PhysicalTable) -> int | None:
        """Live rows at the pinned snapshot, from metadata; None if unknown or if deletes blur it."""
        if catalog is None or table.snapshot_id is None:
            return None
        if table.identifier not in loaded:
            loaded[table.identifier] = catalog.load_table(table.identifier)
        snap = loaded[table.identifier].snapshot_by_id(table.snapshot_id)
        summary = snap.summary.additional_properties if snap is not None and snap.summary else {}
        if "total-records" not in summary or any(int(summary.get(k, 0) or 0) for k in _DELETE_COUNTS):
            return None
        return int(summary["total-records"])

    with too_deep_is_an_error():
        ctx = run_rules(sql, load, known_tables, as_of, row_count)
    scans: list[PhysicalScan] = []
    for alias, bound in ctx.tables.items():
        state = bound.state
        driver = ctx.drivers.get(alias, state.base_table.key)
        needed: dict[str, list[str]] = {driver: [ID_COLUMN, BATCH_COLUMN]}  # the driver first: its rows are the rows
        for path in leaf_paths(state, ctx.columns[alias]):
            for pc in state.read_parts(path):
                needed.setdefault(pc.table, [ID_COLUMN, BATCH_COLUMN])
                if pc.name not in needed[pc.table]:  # a nested name (RawData.url) reads only that field
                    needed[pc.table].append(pc.name)
        for key, cols in needed.items():
            # a table left-joined to the driver may only drop rows the query drops anyway:
            # pushing "x IS NULL" there would turn its non-NULL rows into NULL rows
            filters = [f for f in ctx.pushed.get(alias, []) if _lives_in(state, ctx, f, key)
                       and (key == driver or rejects_null(f))]
            scans.append(PhysicalScan(alias, state.physical_table(key), cols, filters, ctx.batches.get(alias),
                                      local_name=f"{GENERATED_PREFIX}_scan_{len(scans)}"))
        ids = pinned_ids(ctx, alias) if catalog is not None else None
        if ids is not None:
            route = plan_route(context, state, ids, list(needed))
            for scan in scans:
                if scan.alias == alias:
                    scan.route = route
    for alias, system in ctx.system.items():
        if system.name == "query_log" and getattr(context, "config", None) is not None:
            from omni_iceberg.explore.query_log import flush_query_log

            flush_query_log(context)  # the spooled rows too: a query sees every query before it
        snapshot = _system_snapshot(catalog, system.identifier, loaded)
        table = PhysicalTable(key=f"system_{system.name}", identifier=system.identifier, group="system",
                              snapshot_id=snapshot)
        scans.append(PhysicalScan(alias, table, list(system.columns),
                                  local_name=f"{GENERATED_PREFIX}_scan_{len(scans)}"))
    plan = QueryPlan(ctx, scans, loaded, limits=local_limits(context))
    route = hot_route()
    if route is not None and catalog is not None and getattr(context, "config", None) is not None:
        plan.hot = route.decide(context, ctx)
    return plan


def _system_snapshot(catalog: Any, identifier: str, loaded: dict[str, Any]) -> int | None:
    """The current snapshot of a system table; None when it does not exist yet (nothing is created)."""
    from pyiceberg.exceptions import NoSuchTableError

    if catalog is None:
        return None
    try:
        loaded[identifier] = catalog.load_table(identifier)
    except NoSuchTableError:
        return None
    snap = loaded[identifier].current_snapshot()
    return snap.snapshot_id if snap is not None else None


def _lives_in(state: FamilyState, ctx: QueryContext, cond: exp.Expression, key: str) -> bool:
    for col in cond.find_all(exp.Column):
        path = ctx.resolved[id(col)][1]
        if path in (ID_COLUMN, BATCH_COLUMN):
            continue
        if len(state.read_parts(path)) > 1:
            return False  # values split over a column group and a feature table: a filter on one part drops the other's rows
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


def load_physical(context: OmniContext, plan: QueryPlan, table: PhysicalTable) -> Any:
    """The pyiceberg table behind a scan (loaded once per plan)."""
    if table.identifier not in plan.loaded:
        plan.loaded[table.identifier] = context.catalog.load_table(table.identifier)
    return plan.loaded[table.identifier]


def _row_filter(plan: QueryPlan, scan: PhysicalScan) -> Any:
    """The scan's batches and pushed conjuncts as one pyiceberg filter (those it can express)."""
    from pyiceberg.expressions import AlwaysTrue, And, In

    state = plan.ctx.tables[scan.alias].state
    row_filter = AlwaysTrue()
    if scan.batches:
        row_filter = In(BATCH_COLUMN, set(scan.batches))
    for f in scan.filters:
        expr = _to_iceberg(f, plan.ctx, state, scan.table.key)
        if expr is not None:
            row_filter = And(row_filter, expr)
    return row_filter


def _small_read(context: OmniContext, plan: QueryPlan, scan: PhysicalScan) -> pa.Table | None:
    """A system table's rows, or the rows the id index found: small, read whole. None: neither."""
    if scan.alias in plan.ctx.system:
        from catalog_ext.system_tables import SCHEMAS

        if scan.table.snapshot_id is None:
            return SCHEMAS[plan.ctx.system[scan.alias].name].empty_table()
        return plan.loaded[scan.table.identifier].scan(snapshot_id=scan.table.snapshot_id).to_arrow()
    if scan.route is not None and scan.route.uses_index(scan.table.key):
        return read_through_index(scan.route, scan.table.key, load_physical(context, plan, scan.table), scan.columns,
                                  scan.batches)
    return None


def scan_arrow(context: OmniContext, plan: QueryPlan, scan: PhysicalScan) -> pa.Table:
    """One scan of the plan read whole, as an Arrow table."""
    small = _small_read(context, plan, scan)
    if small is not None:
        return small
    from catalog_ext import iceberg_io

    table = load_physical(context, plan, scan.table)
    return iceberg_io.scan_to_arrow(table, _row_filter(plan, scan), scan.table.snapshot_id, tuple(scan.columns))


def scan_source(context: OmniContext, plan: QueryPlan, scan: PhysicalScan, native: bool = False) -> Any:
    """What DuckDB reads for one scan: a lazily read Arrow dataset of the pinned snapshot's files
    (projection, batch pruning and pushed filters applied while reading), so memory follows the
    batches in flight; system tables, index-routed reads and files a by-name read cannot take
    (delete files, renamed columns, remote storage) are read whole (:func:`scan_arrow`).

    ``native``: a :class:`~catalog_ext.iceberg_io.FileScan` instead where DuckDB may read the
    files itself (see :func:`stream_local`); it carries the Arrow stream as well."""
    small = _small_read(context, plan, scan)
    if small is not None:
        return small
    from catalog_ext import iceberg_io

    table = load_physical(context, plan, scan.table)
    selected = tuple(scan.columns)
    row_filter = _row_filter(plan, scan)
    if native:
        files = iceberg_io.scan_files(table, row_filter, scan.table.snapshot_id, selected)
        if files is not None:
            return files
    dataset = iceberg_io.scan_dataset(table, row_filter, scan.table.snapshot_id, selected)
    if dataset is not None:
        return dataset
    return iceberg_io.scan_to_arrow(table, row_filter, scan.table.snapshot_id, selected)


#: physical tables opened at once by one local query
READ_THREADS = 4


def scan_all(context: OmniContext, plan: QueryPlan, native: bool = False) -> dict[str, Any]:
    """Every scan of the plan, by local name, as :func:`scan_source` opens it; several tables at once.

    Why: a query over columns spread across column groups reads one table per group;
    planning a table's files and parsing its footers (and a whole read, when one is
    needed) is mostly I/O and Parquet work that releases the GIL, so doing them one after
    another left cores idle. Catalog loads stay on this thread (the SQL catalog's
    connections are not shared across threads); scans that go through the id index or
    read system tables stay sequential (their readers hold transactions and caches of
    their own).
    """
    scans = plan.scans
    if len(scans) < 2 or any(s.alias in plan.ctx.system or s.route is not None for s in scans):
        return {s.local_name: scan_source(context, plan, s, native) for s in scans}
    for s in scans:
        load_physical(context, plan, s.table)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(scans)), thread_name_prefix="omni-scan") as pool:
        futures = {s.local_name: pool.submit(scan_source, context, plan, s, native) for s in scans}
        return {name: f.result() for name, f in futures.items()}


def local_limits(context: OmniContext) -> dict[str, Any]:
    """The embedded engine's memory limit (``OMNI_MEMORY_LIMIT_MB``) and spill folder (under the home).

    A context without a home (tests build bare ones) spills nowhere: DuckDB then fails
    with its out-of-memory error at the limit instead.
    """
    from catalog_ext import settings

    config = getattr(context, "config", None)
    home = getattr(config, "home", None)
    return {"memory_limit_mb": float(settings.value("OMNI_MEMORY_LIMIT_MB")),
            "spill_dir": str(home / "spill") if home is not None else None}


#: rows per record batch of a streamed answer
RESULT_BATCH_ROWS = 8192


def stream_local(context: OmniContext, plan: QueryPlan) -> pa.RecordBatchReader:
    """Run the plan on a locked embedded DuckDB over streamed scans; the answer as it is computed.

    The cursor (and the scans registered on it) stays open until the reader is read to
    its end or closed. Errors while reading are :class:`QueryError`, one line each.
    """
    import duckdb

    from omni_iceberg.read.sandbox import locked_duckdb

    sql = plan.sql("duckdb")
    limits = plan.limits or local_limits(context)
    con = _connect(plan, scan_all(context, plan, native=True), limits)
    try:
        reader = con.sql(sql).to_arrow_reader(RESULT_BATCH_ROWS)
    except duckdb.Error as e:
        con.close()
        raise QueryError(f"query failed: {engine_message(e, limits)}") from e

    def batches():
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except duckdb.Error as e:
                    raise QueryError(f"query failed: {engine_message(e, limits)}") from e
                yield batch
        finally:
            con.close()

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


#: planned data file bytes (on disk) from which a query's file scans are read by DuckDB itself.
#: Why a floor: a database that may read the files belongs to that set of files (they are
#: locked in), and opening one costs ~0.02 s (measured warm, 2 cores), while what it saves
#: is ~7 ms per MiB read (filtered_aggregate at 1M records, 32 MiB of base files: ~0.40 s
#: through the one-threaded Arrow path, ~0.17 s by DuckDB's reader): break-even near 3 MiB,
#: and a query over less than that is fast either way, so the floor sits well above it
NATIVE_MIN_BYTES = 8 << 20


def _connect(plan: QueryPlan, sources: dict[str, Any], limits: dict[str, Any]) -> Any:
    """A locked DuckDB connection that knows every scan of the plan by its local name.

    Scans DuckDB may read natively (:class:`~catalog_ext.iceberg_io.FileScan`), when they
    plan :data:`NATIVE_MIN_BYTES` or more, get a database of their own that can read exactly
    their files (:func:`~omni_iceberg.read.sandbox.locked_duckdb_over_files`), each scan a
    temporary view over ``read_parquet`` of its files restricted to its batches; every other
    scan, and a file scan whose column types DuckDB would see differently from the Arrow
    read's, is registered as its Arrow stream. Why: DuckDB's Parquet reader decodes in
    parallel, straight into its own vectors, and reads only the struct fields and row groups
    the query needs; the Arrow path decodes in one thread and then hands DuckDB a copy.
    Pushed filters stay in the query (see rules.push_predicates), so the views need none.
    """
    from catalog_ext.iceberg_io import FileScan
    from omni_iceberg.read.sandbox import locked_duckdb, locked_duckdb_over_files

    files = {name: s for name, s in sources.items() if isinstance(s, FileScan)}
    if sum(f.file_bytes for f in files.values()) < NATIVE_MIN_BYTES:
        return locked_duckdb({n: s.arrow if isinstance(s, FileScan) else s for n, s in sources.items()}, **limits)
    con, urls = locked_duckdb_over_files([p for f in files.values() for p in f.paths], **limits)
    try:
        batches = {s.local_name: s.batches for s in plan.scans}
        for name, source in sources.items():
            view = _native_view(con, name, source, urls, batches.get(name)) if name in files else None
            if view is None:
                con.register(name, source.arrow if name in files else source)
    except BaseException:
        con.close()
        raise
    return con


#: (files, columns, Arrow schema) -> whether DuckDB types the native read as the Arrow one: files
#: never change, so neither does the answer (a DESCRIBE of each costs ~3 ms a query otherwise)
_TYPES_AGREE: dict[tuple[Any, ...], bool] = {}


def _native_view(con: Any, name: str, scan: Any, urls: dict[str, str], batches: list[str] | None) -> str | None:
    """Create temporary view ``name`` reading ``scan``'s files natively; None (nothing created)
    when DuckDB would type a column otherwise than it types the Arrow read's (uuid, say)."""
    def ident(n: str) -> str:
        return '"' + n.replace('"', '""') + '"'

    def literal(v: str) -> str:
        return "'" + v.replace("'", "''") + "'"

    files = ", ".join(literal(urls[p]) for p in scan.paths)
    select = (f"SELECT {', '.join(ident(c) for c in scan.columns)} FROM read_parquet([{files}], "
              f"hive_partitioning = false, union_by_name = false, filename = false)")
    if batches:
        select += f" WHERE {ident(BATCH_COLUMN)} IN ({', '.join(literal(b) for b in batches)})"
    key = (tuple(scan.paths), scan.columns, str(scan.schema))
    agree = _TYPES_AGREE.get(key)
    if agree is None:
        probe = f"{name}__types"
        con.register(probe, scan.schema.empty_table())
        try:
            arrow_types = con.sql(f"SELECT column_name, column_type FROM (DESCRIBE {ident(probe)})").fetchall()
        finally:
            con.unregister(probe)
        agree = con.sql(f"SELECT column_name, column_type FROM (DESCRIBE {select})").fetchall() == arrow_types
        if len(_TYPES_AGREE) >= 256:
            _TYPES_AGREE.clear()
        _TYPES_AGREE[key] = agree
    if not agree:
        return None
    con.execute(f"CREATE TEMPORARY VIEW {ident(name)} AS {select}")
    return name


def execute_local(context: OmniContext, plan: QueryPlan) -> pa.Table:
    """Run the plan on a locked embedded DuckDB over streamed scans of the pinned snapshots; the answer whole."""
    return plain_numbers(stream_local(context, plan).read_all())


def engine_message(error: Exception, limits: dict[str, Any] | None = None) -> str:
    """DuckDB's error as one line: its first (the LINE/caret lines point into the physical SQL, not the user's).

    Out of memory names the limit in force, the setting that raises it and the spill folder.
    """
    import duckdb

    lines = str(error).strip().splitlines()
    first = lines[0] if lines else type(error).__name__
    if isinstance(error, duckdb.OutOfMemoryException) and limits is not None:
        where = f"spilling to {limits['spill_dir']}" if limits.get("spill_dir") else "with no spill folder"
        return (f"out of memory within OMNI_MEMORY_LIMIT_MB={limits['memory_limit_mb']:g} MiB ({where}); "
                f"raise the setting or narrow the query ({first})")
    return first


def execute_spark(context: OmniContext, plan: QueryPlan, master: str | None = None) -> pa.Table:
    """Run the plan on Spark through the engine registry's SQL executor (no Spark import here);
    ``master``: the cluster (``spark://host:port``), None for the executor's default."""
    from omni_iceberg import engines

    return engines.sql_executor("spark")(context, plan.sql("spark"), **({"master": master} if master else {}))


def _try_hot(plan: QueryPlan) -> pa.Table | None:
    """The hot store's answer, or None (with a warning) when it fails: the query is never lost."""
    import sys

    route = hot_route()
    if route is None:
        return None
    try:
        return route.execute(plan.ctx, plan.hot)
    except route.unavailable as e:
        print(f"warning: {e}; answered from Iceberg instead", file=sys.stderr)
        return None


def run_query(context: OmniContext, sql: str, as_of: int | None = None, engine: str = "local",
              stream: bool = False, spark_master: str | None = None) -> pa.Table | pa.RecordBatchReader:
    """Plan, execute and log one logical query.

    ``stream``: the answer as a record batch reader, read as DuckDB computes it (the
    hot store's and Spark's answers arrive whole and are handed on as one); the query is
    logged when the reader has been read to its end.
    """
    from omni_iceberg.explore.query_log import log_query

    if spark_master and engine != "spark":
        from catalog_ext.errors import ConfigError

        raise ConfigError(f"a Spark master ({spark_master}) was given for engine {engine!r}: use --engine spark")
    started = time.perf_counter()
    plan = plan_query(context, sql, as_of)
    result = None
    if engine == "local" and plan.hot is not None and plan.hot.use:
        result = _try_hot(plan)
        engine = "hot" if result is not None else engine
    if result is None and engine == "spark":
        result = execute_spark(context, plan, spark_master)

    def log(rows: int) -> None:
        log_query(context, plan, kind="sql", engine=engine, rows=rows,
                  latency_ms=int((time.perf_counter() - started) * 1000))

    if not stream:
        result = execute_local(context, plan) if result is None else result
        log(result.num_rows)
        return result
    reader = stream_local(context, plan) if result is None else result.to_reader()

    def logged():
        rows = 0
        for batch in reader:
            rows += batch.num_rows
            yield batch
        log(rows)

    return pa.RecordBatchReader.from_batches(reader.schema, logged())
