"""Query results as users expect them: whole numbers as integers, JSON numbers as numbers.

DuckDB sums 64-bit integers into a 128-bit integer, which reaches Arrow as
``decimal128(38, 0)`` and Python as ``Decimal`` - and ``json.dumps(default=str)``
then prints ``"1234"``, a string. A whole-number decimal column whose values fit in
64 bits is returned as ``int64`` instead (lossless); anything else is left as it is.
"""

from __future__ import annotations

import decimal

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
