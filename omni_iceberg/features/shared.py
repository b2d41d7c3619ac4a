"""Intermediate results shared by the features of one fused stage.

Features fused into one stage see the same :class:`SharedBatch` for a batch of rows,
so the expensive common steps (lower-casing, word and line splits) run once per batch
instead of once per feature. A UDF opts in by taking a ``shared`` parameter.
"""

from __future__ import annotations

import re
from typing import Any, Callable

_WORD = re.compile(r"\w+", re.UNICODE)


class SharedBatch:
    """Memoised per-batch derivations of the input columns (lists of Python values)."""

    def __init__(self, columns: dict[str, list[Any]]):
        self._columns = columns
        self._cache: dict[tuple[str, str], Any] = {}

    def column(self, name: str) -> list[Any]:
        """Values of input column ``name`` (logical path or its last part)."""
        if name in self._columns:
            return self._columns[name]
        for key, values in self._columns.items():
            if key.rsplit(".", 1)[-1] == name:
                return values
        raise KeyError(f"no input column {name!r} in this batch (have {sorted(self._columns)})")

    def cached(self, kind: str, name: str, derive: Callable[[list[Any]], Any]) -> Any:
        """``derive(column values)`` computed once per batch for each (kind, column)."""
        key = (kind, name)
        if key not in self._cache:
            self._cache[key] = derive(self.column(name))
        return self._cache[key]

    def lower(self, name: str) -> list[str]:
        return self.cached("lower", name, lambda vs: [(v or "").lower() for v in vs])

    def words(self, name: str) -> list[list[str]]:
        return self.cached("words", name, lambda _: [_WORD.findall(t) for t in self.lower(name)])

    def lines(self, name: str) -> list[list[str]]:
        return self.cached("lines", name, lambda vs: [(v or "").splitlines() for v in vs])

    def row(self, i: int) -> "SharedRow":
        return SharedRow(self, i)


class SharedRow:
    """The view of a :class:`SharedBatch` that a row UDF sees: one row's derived values."""

    def __init__(self, batch: SharedBatch, index: int):
        self._batch = batch
        self._i = index

    def lower(self, name: str) -> str:
        return self._batch.lower(name)[self._i]

    def words(self, name: str) -> list[str]:
        return self._batch.words(name)[self._i]

    def lines(self, name: str) -> list[str]:
        return self._batch.lines(name)[self._i]
