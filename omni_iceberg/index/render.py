"""How ``omni get`` shows a lookup: an aligned table or JSON lines, and the explain per table."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from omni_iceberg.ui.formatting import dumps, format_arrow


def print_lookup(lookup: Any, *, as_json: bool = False, explain: bool = False, out: TextIO | None = None) -> None:
    """Rows of a :class:`~omni_iceberg.index.lookup.Lookup`; ids not found are rows with ``_found`` false."""
    out = out or sys.stdout
    if as_json:
        for row in lookup.rows.to_pylist():
            print(dumps(row), file=out)
        if explain:
            print(dumps({"explain": lookup.explain()}), file=out)
        return
    print(format_arrow(lookup.rows, "table"), file=out)
    if explain:
        print(lookup.explain_text(), file=out)
