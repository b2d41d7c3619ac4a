"""Render a family state as the logical view: one SQL text per dialect plus its schema.

The view joins every physical table of the family to the base table on the two key
columns, each table pinned ``VERSION AS OF`` the snapshot the logical version
recorded. So a reader of the view always sees one consistent logical version, even
while writers have staged newer physical snapshots. Tables are named
``namespace.table`` only, never by catalog: Spark and Trino name the catalog
differently (``omni`` vs ``iceberg``).
"""

from __future__ import annotations

from typing import Any

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES
from catalog_ext.family import FamilyState

_SPARK_TYPES = {
    "string": "STRING", "long": "BIGINT", "int": "INT", "double": "DOUBLE", "float": "FLOAT",
    "boolean": "BOOLEAN", "binary": "BINARY", "date": "DATE", "timestamp": "TIMESTAMP_NTZ",
    "timestamptz": "TIMESTAMP",
}
_TRINO_TYPES = {
    "string": "VARCHAR", "long": "BIGINT", "int": "INTEGER", "double": "DOUBLE", "float": "REAL",
    "boolean": "BOOLEAN", "binary": "VARBINARY", "date": "DATE", "timestamp": "TIMESTAMP(6)",
    "timestamptz": "TIMESTAMP(6) WITH TIME ZONE",
}
PRIMITIVE_TYPES = frozenset(_SPARK_TYPES)


def sql_type(iceberg_type: str, dialect: str) -> str:
    """Iceberg type string (``string``, ``list<double>``) -> the dialect's SQL type."""
    if iceberg_type.startswith("list<") and iceberg_type.endswith(">"):
        inner = sql_type(iceberg_type[5:-1], dialect)
        return f"ARRAY<{inner}>" if dialect == "spark" else f"ARRAY({inner})"
    table = _SPARK_TYPES if dialect == "spark" else _TRINO_TYPES
    return table[iceberg_type]


def quote(name: str, dialect: str) -> str:
    # names are validated identifiers already; quoting keeps case and keywords safe
    return f"`{name}`" if dialect == "spark" else f'"{name}"'


def _table_ref(identifier: str, snapshot_id: int | None, alias: str, dialect: str) -> str:
    name = ".".join(quote(p, dialect) for p in identifier.split("."))
    if snapshot_id is None:
        return f"{name} AS {alias}"
    clause = "VERSION AS OF" if dialect == "spark" else "FOR VERSION AS OF"
    return f"{name} {clause} {snapshot_id} AS {alias}"


def _column_expr(state: FamilyState, path: str, aliases: dict[str, str], dialect: str) -> str:
    """Expression reading logical column ``path`` from the family, or a typed NULL."""
    pcols = state.physical_columns_of(path)
    if not pcols:
        return f"CAST(NULL AS {sql_type(state.column(path).type, dialect)})"
    pc = pcols[0]  # several copies (a materialization) hold equal values; the first is canonical
    return f"{aliases[pc.table]}." + ".".join(quote(p, dialect) for p in pc.name.split("."))


def render_view_sql(state: FamilyState, dialect: str) -> str:
    """The logical wide table as one SELECT in ``spark`` or ``trino`` SQL."""
    if dialect not in ("spark", "trino"):
        raise ValueError(f"unknown dialect {dialect!r}")
    base = state.base_table
    others = [t for t in state.tables if t.key != base.key and state.columns_of_table(t.key)]
    aliases = {base.key: "t0", **{t.key: f"t{i + 1}" for i, t in enumerate(others)}}
    q = lambda n: quote(n, dialect)  # noqa: E731
    select = [f"t0.{q(ID_COLUMN)} AS {q(ID_COLUMN)}", f"t0.{q(BATCH_COLUMN)} AS {q(BATCH_COLUMN)}"]
    for stage in STAGES:
        fields = state.stage_fields(stage)
        if not fields:
            continue
        exprs = [_column_expr(state, f.path, aliases, dialect) for f in fields]
        if dialect == "spark":
            args = ", ".join(f"'{f.leaf}', {e}" for f, e in zip(fields, exprs))
            select.append(f"named_struct({args}) AS {q(stage)}")
        else:
            row_type = ", ".join(f"{q(f.leaf)} {sql_type(f.type, dialect)}" for f in fields)
            select.append(f"CAST(ROW({', '.join(exprs)}) AS ROW({row_type})) AS {q(stage)}")
    for col in state.columns:
        if col.kind == "feature":
            select.append(f"{_column_expr(state, col.path, aliases, dialect)} AS {q(col.path)}")
    sql = "SELECT " + ", ".join(select) + " FROM " + _table_ref(base.identifier, base.snapshot_id, "t0", dialect)
    for t in others:
        a = aliases[t.key]
        sql += (
            f" LEFT JOIN {_table_ref(t.identifier, t.snapshot_id, a, dialect)}"
            f" ON {a}.{q(ID_COLUMN)} = t0.{q(ID_COLUMN)} AND {a}.{q(BATCH_COLUMN)} = t0.{q(BATCH_COLUMN)}"
        )
    return sql


def _type_json(type_str: str, next_id) -> Any:
    if type_str.startswith("list<"):
        return {"type": "list", "element-id": next_id(), "element": _type_json(type_str[5:-1], next_id),
                "element-required": False}
    return type_str


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
            {"id": next_id(), "name": f.leaf, "required": False, "type": _type_json(f.type, next_id)}
            for f in stage_fields
        ]
        fields.append({"id": sid, "name": stage, "required": False, "type": {"type": "struct", "fields": nested}})
    for col in state.columns:
        if col.kind == "feature":
            fields.append({"id": next_id(), "name": col.path, "required": False, "type": _type_json(col.type, next_id)})
    return {"type": "struct", "schema-id": 0, "fields": fields}
