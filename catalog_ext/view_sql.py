"""Render a family state as the logical view: one SQL text per dialect plus its schema.

The view reads every physical table of the family against the base table on the two
key columns, each table pinned ``VERSION AS OF`` the snapshot the logical version
recorded. So a reader of the view always sees one consistent logical version, even
while writers have staged newer physical snapshots. Tables are named
``namespace.table``; the catalog comes from the view version's ``default-catalog``,
which is the omni catalog name - so Spark and Trino register the catalog under that
same name (Trino ignores the session catalog when it expands a view).

A query on the view must cost what it reads, not the family's width, so each engine's
body is written in the one shape its optimizer provably drops unread tables from
(measured with EXPLAIN on both, tests/test_view_pruning.py):

- **Spark**: each feature table is LEFT JOINed as ``(SELECT keys, any_value(c)...
  GROUP BY keys)``. Grouping by the join keys gives the right side distinct keys, and
  Spark removes a left outer join whose right side is unread and distinct on the join
  keys (SPARK-39172). A plain ``LEFT JOIN table`` is never removed: Spark cannot know
  the keys are unique in a table.
- **Trino**: each other table is one correlated scalar aggregate,
  ``CROSS JOIN LATERAL (SELECT arbitrary(c1) AS c1, ... FROM table WHERE keys = t0.keys)``.
  Trino removes a scalar lateral whose outputs are unreferenced before decorrelating
  it; it removes no outer join at all.

Both shapes return what the plain LEFT JOIN did whenever keys are unique per table
(always, for a family): one value or NULL per base row.
"""

from __future__ import annotations

from typing import Any, Callable

from catalog_ext import types
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES
from catalog_ext.family import FamilyState, PhysicalTable, _memo

# Types come from the one vocabulary in catalog_ext.types; re-exported for old importers.
PRIMITIVE_TYPES = types.PRIMITIVE_TYPES
sql_type = types.sql_type


def quote(name: str, dialect: str) -> str:
    # names are validated identifiers already; quoting keeps case and keywords safe
    return f"`{name}`" if dialect == "spark" else f'"{name}"'


def pinned_ref(identifier: str, snapshot_id: int | None, alias: str, dialect: str) -> str:
    """``ns.table VERSION AS OF n AS alias`` in Spark, ``FOR VERSION AS OF`` in Trino."""
    name = ".".join(quote(p, dialect) for p in identifier.split("."))
    if snapshot_id is None or dialect not in ("spark", "trino"):
        return f"{name} AS {alias}"
    clause = "VERSION AS OF" if dialect == "spark" else "FOR VERSION AS OF"
    return f"{name} {clause} {snapshot_id} AS {alias}"


def _column_expr(state: FamilyState, path: str, aliases: dict[str, str], dialect: str) -> str:
    """Expression reading logical column ``path`` from the family, or a typed NULL."""
    parts = [pc for pc in state.read_parts(path) if pc.table in aliases]
    if not parts:
        return f"CAST(NULL AS {sql_type(state.column(path).type, dialect)})"
    refs = [f"{aliases[pc.table]}." + ".".join(quote(p, dialect) for p in pc.name.split(".")) for pc in parts]
    # a column in a column group and in its feature table: the parts are disjoint (FamilyState.read_parts)
    return refs[0] if len(refs) == 1 else f"COALESCE({', '.join(refs)})"


def _struct(fields, exprs, dialect: str) -> str:
    if dialect == "spark":
        return "named_struct(" + ", ".join(f"'{f.leaf}', {e}" for f, e in zip(fields, exprs)) + ")"
    if dialect == "duckdb":
        return "struct_pack(" + ", ".join(f"{quote(f.leaf, dialect)} := {e}" for f, e in zip(fields, exprs)) + ")"
    row_type = ", ".join(f"{quote(f.leaf, dialect)} {sql_type(f.type, dialect)}" for f in fields)
    return f"CAST(ROW({', '.join(exprs)}) AS ROW({row_type}))"


def render_family_select(
    state: FamilyState,
    dialect: str,
    columns: list[str] | None = None,
    table_ref: Callable[[PhysicalTable, str], str] | None = None,
    where: str | None = None,
    driver: PhysicalTable | None = None,
) -> str:
    """SELECT of the logical wide table (or of ``columns`` only) over the physical family.

    ``columns`` are top-level names or ``Stage.field`` leaves; only the physical tables
    holding them are joined (column pruning). ``table_ref(table, alias)`` names a
    physical table in FROM; by default it is pinned ``VERSION AS OF`` its snapshot.
    ``driver`` (default: the base table) is the table whose rows are the result's rows;
    the planner passes a feature table only when the rows it lacks cannot change the answer.
    """
    if dialect not in ("spark", "trino", "duckdb"):
        raise ValueError(f"unknown dialect {dialect!r}")
    ref = table_ref or (lambda t, alias: pinned_ref(t.identifier, t.snapshot_id, alias, dialect))
    wanted = _wanted(state, columns)
    base = driver or state.base_table
    # the first physical column of a path is the one read (a fresh materialized copy when there is one)
    needed = {pc.table for path in wanted["leaves"] for pc in state.read_parts(path)}
    others = [t for t in state.tables if t.key != base.key and t.key in needed]
    aliases = {base.key: "t0", **{t.key: f"t{i + 1}" for i, t in enumerate(others)}}
    q = lambda n: quote(n, dialect)  # noqa: E731
    select = [f"t0.{q(k)} AS {q(k)}" for k in (ID_COLUMN, BATCH_COLUMN) if k in wanted["keys"]]
    for stage, fields in wanted["stages"].items():
        exprs = [_column_expr(state, f.path, aliases, dialect) for f in fields]
        select.append(f"{_struct(fields, exprs, dialect)} AS {q(stage)}")
    for path in wanted["features"]:
        select.append(f"{_column_expr(state, path, aliases, dialect)} AS {q(path)}")
    sql = "SELECT " + ", ".join(select) + " FROM " + ref(base, "t0")
    for t in others:
        a = aliases[t.key]
        sql += (
            f" LEFT JOIN {ref(t, a)}"
            f" ON {a}.{q(ID_COLUMN)} = t0.{q(ID_COLUMN)} AND {a}.{q(BATCH_COLUMN)} = t0.{q(BATCH_COLUMN)}"
        )
    if where:
        sql += f" WHERE {where}"
    return sql


def _wanted(state: FamilyState, columns: list[str] | None) -> dict[str, Any]:
    """Split requested names into keys, stage structs (with the fields asked for) and features."""
    keys, stages, features = [], {}, []
    names = columns if columns is not None else state.top_level_columns()
    for name in names:
        if name in (ID_COLUMN, BATCH_COLUMN):
            keys.append(name)
        elif name in STAGES:
            stages[name] = state.stage_fields(name)
        elif "." in name and name.split(".", 1)[0] in STAGES:
            stage = name.split(".", 1)[0]
            if stages.get(stage) is not None and stages[stage] == state.stage_fields(stage):
                continue  # the whole struct is already selected
            stages.setdefault(stage, [])
            if all(f.path != name for f in stages[stage]):
                stages[stage].append(state.column(name))
        else:
            features.append(name)
    stages = {s: stages[s] for s in STAGES if stages.get(s)}
    leaves = [f.path for fs in stages.values() for f in fs] + features
    return {"keys": [k for k in (ID_COLUMN, BATCH_COLUMN) if k in keys], "stages": stages,
            "features": features, "leaves": leaves}


def render_view_sql(state: FamilyState, dialect: str) -> str:
    """The logical wide table as one SELECT in ``spark`` or ``trino`` SQL (the view's body).

    Every table holding any column is read, so the view shows the whole family; the
    shape lets each engine drop the tables a query does not read (module docstring).
    """
    if dialect not in ("spark", "trino"):
        raise ValueError(f"unknown dialect {dialect!r}")
    # A commit renders its new version, and a tag or pin renders a version of the same layout
    # again: metadata-only versions share the parts of the state the body is made of, so
    # the text is kept by their identity (a 1,500-column body costs ~40 ms to render).
    parts = (state.table, state.columns, state.tables, state.physical_columns, state.batches, state.features,
             state.computed, state.materializations)
    return _memo(f"view-sql-{dialect}", parts, lambda: _render(state, dialect))


def _render(state: FamilyState, dialect: str) -> str:
    driver = view_driver(state)
    if dialect == "spark":
        return render_family_select(state, dialect, table_ref=_distinct_keys_ref(state, dialect, driver),
                                    driver=driver)
    return _render_lateral_lookups(state, dialect, driver)


def view_driver(state: FamilyState) -> PhysicalTable:
    """The table whose rows are the view's rows: the base, or a fresh materialized copy.

    A fresh copy holds exactly the base's rows (it is built from them, batch by batch, and
    a dropped batch leaves both), so the one covering the most columns can drive: a query
    that reads only its columns then reads one table, without a single lookup.
    """
    fresh = state.fresh_materialized_tables()
    copies = [m for m in state.materializations if m.table_key in fresh]
    if not copies:
        return state.base_table
    best = max(copies, key=lambda m: (len(m.columns), m.table_key))
    return state.physical_table(best.table_key)


_KEYS = (ID_COLUMN, BATCH_COLUMN)


def _table_columns(state: FamilyState) -> dict[str, list[str]]:
    """Physical table key -> the top-level physical columns the logical schema reads from it."""
    out: dict[str, list[str]] = {}
    for col in state.columns:
        for pc in state.read_parts(col.path):  # the copy or the parts that are read
            top = pc.name.split(".", 1)[0]
            if top not in out.setdefault(pc.table, []):
                out[pc.table].append(top)
    return out


def _distinct_keys_ref(state: FamilyState, dialect: str, driver: PhysicalTable
                       ) -> Callable[[PhysicalTable, str], str]:
    """Spark FROM items: the driver as is, each other table grouped by the keys (distinct keys)."""
    columns = _table_columns(state)
    q = lambda n: quote(n, dialect)  # noqa: E731
    keys = ", ".join(q(k) for k in _KEYS)

    def ref(table: PhysicalTable, alias: str) -> str:
        pinned = pinned_ref(table.identifier, table.snapshot_id, "p", dialect)
        if table.key == driver.key:
            return pinned_ref(table.identifier, table.snapshot_id, alias, dialect)
        values = "".join(f", any_value(p.{q(c)}) AS {q(c)}" for c in columns.get(table.key, []))
        return f"(SELECT {keys}{values} FROM {pinned} GROUP BY {keys}) AS {alias}"

    return ref


def _render_lateral_lookups(state: FamilyState, dialect: str, driver: PhysicalTable) -> str:
    """Trino body: the driver table, then ONE correlated scalar aggregate per other table.

    ``CROSS JOIN LATERAL (SELECT arbitrary(p.c1) AS "c1", ... FROM table p WHERE keys =
    t0.keys) AS lN``: an aggregate without GROUP BY yields exactly one row, so the cross
    join keeps every driver row (NULLs where the table has none), and Trino drops a
    scalar lateral whose outputs are unread, then the unread aggregates of a read one.
    One lateral per table, not one subquery per column: a 100-column group cost 100
    subqueries to analyse (1.3 s of EXPLAIN), one lateral 0.2 s (benchmarks/view_pruning).
    """
    q = lambda n: quote(n, dialect)  # noqa: E731
    tables = {t.key: t for t in state.tables}
    match = " AND ".join(f"p.{q(k)} = t0.{q(k)}" for k in _KEYS)
    laterals: dict[str, tuple[str, list[str]]] = {}  # table key -> (alias, physical names read)

    def part(pc) -> str:
        name = ".".join(q(p) for p in pc.name.split("."))
        if pc.table == driver.key:
            return f"t0.{name}"
        alias, names = laterals.setdefault(pc.table, (f"l{len(laterals) + 1}", []))
        if pc.name not in names:
            names.append(pc.name)
        return f"{alias}.{q(pc.name)}"  # one output per physical column, named by its full path

    def lookup(path: str) -> str:
        parts = state.read_parts(path)
        if not parts:
            return f"CAST(NULL AS {sql_type(state.column(path).type, dialect)})"
        if any(pc.table == driver.key for pc in parts):  # the driver holds every value (a fresh copy)
            return part(next(pc for pc in parts if pc.table == driver.key))
        refs = [part(pc) for pc in parts]
        return refs[0] if len(refs) == 1 else f"COALESCE({', '.join(refs)})"

    wanted = _wanted(state, None)
    select = [f"t0.{q(k)} AS {q(k)}" for k in wanted["keys"]]
    for stage, fields in wanted["stages"].items():
        select.append(f"{_struct(fields, [lookup(f.path) for f in fields], dialect)} AS {q(stage)}")
    for path in wanted["features"]:
        select.append(f"{lookup(path)} AS {q(path)}")
    sql = "SELECT " + ", ".join(select) + " FROM " + pinned_ref(driver.identifier, driver.snapshot_id, "t0", dialect)
    for key, (alias, names) in laterals.items():
        table = tables[key]
        values = ", ".join(f"arbitrary(p.{'.'.join(q(p) for p in n.split('.'))}) AS {q(n)}" for n in names)
        pinned = pinned_ref(table.identifier, table.snapshot_id, "p", dialect)
        sql += f" CROSS JOIN LATERAL (SELECT {values} FROM {pinned} WHERE {match}) AS {alias}"
    return sql


def view_schema(state: FamilyState) -> dict[str, Any]:
    """The Iceberg schema (spec JSON) of the logical view, in column order."""
    counter = iter(range(1, 1_000_000))
    next_id = lambda: next(counter)  # noqa: E731
    fields: list[dict[str, Any]] = []
    for key in (ID_COLUMN, BATCH_COLUMN):
        fields.append({"id": next_id(), "name": key, "required": False, "type": "string"})
    for stage in STAGES:
        stage_fields = state.stage_fields(stage)
        if not stage_fields:
            continue
        sid = next_id()
        nested = [
            {"id": next_id(), "name": f.leaf, "required": False, "type": types.to_iceberg_json(f.type, next_id)}
            for f in stage_fields
        ]
        fields.append({"id": sid, "name": stage, "required": False, "type": {"type": "struct", "fields": nested}})
    for col in state.columns:
        if col.kind == "feature":
            fields.append({"id": next_id(), "name": col.path, "required": False, "type": types.to_iceberg_json(col.type, next_id)})
    return {"type": "struct", "schema-id": 0, "fields": fields}
