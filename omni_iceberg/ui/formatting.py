"""Print Arrow results as an aligned table, JSON lines or CSV; JSON that keeps numbers numbers."""

from __future__ import annotations

import base64
import csv
import datetime as _dt
import decimal
import io
import json
from dataclasses import asdict, is_dataclass
from pathlib import PurePath
from typing import Any

import pyarrow as pa



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


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON text with :func:`jsonable` for everything ``json`` lacks."""
    return json.dumps(obj, default=jsonable, indent=indent, ensure_ascii=False)


def format_arrow(data: pa.Table, fmt: str, max_width: int = 60) -> str:
    rows = data.to_pylist()
    if fmt == "json":
        return "\n".join(dumps(r) for r in rows)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=data.column_names)
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue().rstrip("\n")
    cells = [[_cell(r[c], max_width) for c in data.column_names] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(data.column_names)]
    line = lambda vals: " | ".join(v.ljust(w) for v, w in zip(vals, widths))  # noqa: E731
    out = [line(data.column_names), "-+-".join("-" * w for w in widths)] + [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _cell(value, max_width: int) -> str:
    text = "NULL" if value is None else str(value).replace("\n", " ")
    return text if len(text) <= max_width else text[: max_width - 1] + "…"
