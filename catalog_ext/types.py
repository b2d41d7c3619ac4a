"""The one vocabulary of column types: logical type strings and what each engine calls them.

Logical columns, feature outputs and stage fields carry Iceberg-style type strings
(``string``, ``long``, ``list<double>``, ``list<list<string>>``). This module is the only
place that parses them; every consumer (pyiceberg schemas, Arrow buffers, view SQL for
Spark/Trino/DuckDB, Spark UDF schemas) converts from the parsed :class:`LogicalType`.

Example::

    >>> t = parse("list<double>")
    >>> t.element.name, format_type(t), sql_type(t, "trino")
    ('double', 'list<double>', 'ARRAY(DOUBLE)')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from catalog_ext.errors import SchemaConflictError

#: primitive type name -> (Arrow type, Spark SQL, Trino SQL, DuckDB SQL)
_PRIMITIVES: dict[str, tuple[pa.DataType, str, str, str]] = {
    "string": (pa.string(), "STRING", "VARCHAR", "VARCHAR"),
    "long": (pa.int64(), "BIGINT", "BIGINT", "BIGINT"),
    "int": (pa.int32(), "INT", "INTEGER", "INTEGER"),
    "double": (pa.float64(), "DOUBLE", "DOUBLE", "DOUBLE"),
    "float": (pa.float32(), "FLOAT", "REAL", "FLOAT"),
    "boolean": (pa.bool_(), "BOOLEAN", "BOOLEAN", "BOOLEAN"),
    "binary": (pa.binary(), "BINARY", "VARBINARY", "BLOB"),
    "date": (pa.date32(), "DATE", "DATE", "DATE"),
    "timestamp": (pa.timestamp("us"), "TIMESTAMP_NTZ", "TIMESTAMP(6)", "TIMESTAMP"),
    "timestamptz": (pa.timestamp("us", tz="UTC"), "TIMESTAMP", "TIMESTAMP(6) WITH TIME ZONE", "TIMESTAMPTZ"),
}
PRIMITIVE_TYPES = frozenset(_PRIMITIVES)
_DIALECTS = ("spark", "trino", "duckdb")


@dataclass(frozen=True)
class LogicalType:
    """A parsed type string: a primitive (``name``) or a list of ``element``."""

    name: str  # a primitive name, or "list"
    element: "LogicalType | None" = None

    @property
    def is_list(self) -> bool:
        return self.name == "list"

    def __str__(self) -> str:
        return format_type(self)


def parse(text: str | LogicalType) -> LogicalType:
    """``"list<double>"`` -> ``LogicalType("list", LogicalType("double"))``; raises on anything else."""
    if isinstance(text, LogicalType):
        return text
    s = text.strip()
    if s in _PRIMITIVES:
        return LogicalType(s)
    if s.startswith("list<") and s.endswith(">") and len(s) > 6:
        return LogicalType("list", parse(s[5:-1]))
    raise SchemaConflictError(
        f"unsupported column type {text!r}: use one of {sorted(_PRIMITIVES)} or list<...> of them"
    )


def is_valid(text: str) -> bool:
    """True when ``text`` parses (for validators that raise their own error type)."""
    try:
        parse(text)
        return True
    except SchemaConflictError:
        return False


def format_type(t: LogicalType) -> str:
    """The canonical type string (inverse of :func:`parse`)."""
    return f"list<{format_type(t.element)}>" if t.is_list else t.name


def to_arrow(t: str | LogicalType) -> pa.DataType:
    """Arrow type of a logical type (what readers and writers build buffers with)."""
    t = parse(t)
    return pa.list_(to_arrow(t.element)) if t.is_list else _PRIMITIVES[t.name][0]


def to_iceberg(t: str | LogicalType) -> Any:
    """pyiceberg type of a logical type (list element ids are re-assigned by pyiceberg on create)."""
    from pyiceberg import types as T

    t = parse(t)
    if t.is_list:
        return T.ListType(element_id=0, element_type=to_iceberg(t.element), element_required=False)
    return {
        "string": T.StringType(), "long": T.LongType(), "int": T.IntegerType(), "double": T.DoubleType(),
        "float": T.FloatType(), "boolean": T.BooleanType(), "binary": T.BinaryType(), "date": T.DateType(),
        "timestamp": T.TimestampType(), "timestamptz": T.TimestamptzType(),
    }[t.name]


def sql_type(t: str | LogicalType, dialect: str) -> str:
    """SQL type in ``spark``, ``trino`` or ``duckdb`` syntax."""
    if dialect not in _DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r} (use one of {_DIALECTS})")
    t = parse(t)
    if t.is_list:
        inner = sql_type(t.element, dialect)
        return {"spark": f"ARRAY<{inner}>", "duckdb": f"{inner}[]"}.get(dialect, f"ARRAY({inner})")
    return _PRIMITIVES[t.name][1 + _DIALECTS.index(dialect)]


def to_spark(t: str | LogicalType) -> Any:
    """pyspark DataType of a logical type; pyspark is imported only here, on use."""
    from pyspark.sql import types as T

    t = parse(t)
    if t.is_list:
        return T.ArrayType(to_spark(t.element), containsNull=True)
    return {
        "string": T.StringType(), "long": T.LongType(), "int": T.IntegerType(), "double": T.DoubleType(),
        "float": T.FloatType(), "boolean": T.BooleanType(), "binary": T.BinaryType(), "date": T.DateType(),
        "timestamp": T.TimestampNTZType(), "timestamptz": T.TimestampType(),
    }[t.name]


def to_iceberg_json(t: str | LogicalType, next_id) -> Any:
    """The Iceberg spec JSON of a type (view schemas); ``next_id()`` numbers list elements."""
    t = parse(t)
    if t.is_list:
        return {"type": "list", "element-id": next_id(), "element": to_iceberg_json(t.element, next_id),
                "element-required": False}
    return t.name


__all__ = ["LogicalType", "PRIMITIVE_TYPES", "parse", "is_valid", "format_type", "to_arrow", "to_iceberg",
           "sql_type", "to_spark", "to_iceberg_json"]
