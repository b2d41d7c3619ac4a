"""Query results as users expect them: whole numbers as integers, JSON numbers as numbers.

DuckDB sums 64-bit integers into a 128-bit integer, which reaches Arrow as
``decimal128(38, 0)`` and Python as ``Decimal`` - and ``json.dumps(default=str)``
then prints ``"1234"``, a string. A whole-number decimal column whose values fit in
64 bits is returned as ``int64`` instead (lossless); anything else is left as it is.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
from dataclasses import asdict, is_dataclass
from pathlib import PurePath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def plain_numbers(table: pa.Table) -> pa.Table:
    """``decimal(p, 0)`` columns that fit in int64 become int64; other columns are untouched.

    >>> t = pa.table({"s": pa.array([decimal.Decimal(6)], pa.decimal128(38, 0)), "a": [1.5]})
    >>> plain_numbers(t).schema.types
    [DataType(int64), DataType(double)]
    """
    for i, field in enumerate(table.schema):
        if not (pa.types.is_decimal(field.type) and field.type.scale == 0):
            continue
        column = table.column(i)
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and not (_INT64[0] <= low and high <= _INT64[1]):
            continue  # a real 128-bit value: keep it exact
        table = table.set_column(i, pa.field(field.name, pa.int64(), field.nullable), column.cast(pa.int64()))
    return table


def jsonable(value: Any) -> Any:
    """``json.dumps(..., default=jsonable)``: the JSON form of what Arrow, DuckDB and our reports hand back.

    The one JSON helper of the project (the CLI's ``--format json`` and ``omni export``
    both use it). ``Decimal`` is what DuckDB returns for ``sum`` of integers: integral
    ones become JSON integers, others floats - never strings, so ``jq`` and
    ``json.loads`` see numbers. Times are ISO 8601; bytes are UTF-8 text when they
    decode, else base64.

    >>> import json
    >>> json.dumps({"s": decimal.Decimal("12"), "a": decimal.Decimal("0.5"), "b": b"hi"}, default=jsonable)
    '{"s": 12, "a": 0.5, "b": "hi"}'
    >>> jsonable(b"\\xff\\x00"), jsonable(_dt.date(2026, 1, 2)), jsonable(decimal.Decimal("NaN"))
    ('/wA=', '2026-01-02', None)
    """
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, PurePath):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if hasattr(value, "model_dump"):  # pydantic records
        return value.model_dump(mode="json")
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)
