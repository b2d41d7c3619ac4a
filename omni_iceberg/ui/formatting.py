"""Print Arrow results as an aligned table, JSON lines or CSV; JSON that keeps numbers numbers."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pyarrow as pa

# the one JSON helper lives with the query results it mostly serves; re-exported here
from omni_iceberg.explore.results import jsonable


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON text with :func:`~omni_iceberg.explore.results.jsonable` for everything ``json`` lacks."""
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
