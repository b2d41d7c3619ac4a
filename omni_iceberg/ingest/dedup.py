"""Which ids of a chunk does the table already hold? (dedup against earlier batches)

Asked once per chunk, in bulk and sorted, so a submit's cost and memory follow the
rows it brings, not the rows the table has accumulated:

* through the id index (:mod:`omni_iceberg.index`) when it is authoritative for the
  base table at the version the submit started from: a sorted batch lookup per chunk;
* otherwise - no index configured, or an index that lags (a table written before the
  index existed, a writer that did not index) - by reading every id of the base table
  once, as before the index existed. That is the slow path whose cost grows with the
  table, so the submit report says why it was taken and how to leave it
  (``omni index rebuild``).

A table with no batch yet has nothing to ask about.
"""

from __future__ import annotations

from typing import Any, Sequence

from catalog_ext.contract import ID_COLUMN
from catalog_ext.family import FamilyState
from catalog_ext.store import FamilyStore


class ExistingIds:
    """Dedup lookups for one submit, pinned to the version it started from."""

    def __init__(self, store: FamilyStore, state: FamilyState):
        self.store, self.state = store, state
        self.base_key = state.base_table.key
        self._view: Any = None
        self._all: set[str] | None = None
        #: "none" (empty table), "index" or "scan"; ``reason`` says why a scan
        self.method = "none"
        self.reason = ""
        if not state.batches:
            return
        index = store.open_index(state)
        if index is None:
            self.method, self.reason = "scan", "no id index is configured (OMNI_INDEX=off)"
            return
        view = index.at(store.catalog, state)
        coverage = view.coverage(self.base_key)
        if coverage.authoritative:
            self.method, self._view = "index", view
        else:
            self.method, self.reason = "scan", "the id index lags: " + "; ".join(coverage.lag)

    def existing(self, ids: Sequence[str]) -> set[str]:
        """The ids among ``ids`` that the base table already holds."""
        if self.method == "none" or not ids:
            return set()
        if self.method == "index":
            return self._view.contains_many(self.base_key, sorted(ids))
        if self._all is None:
            self._all = _all_ids(self.store, self.state)
        return self._all.intersection(ids)

    def release(self) -> None:
        self._all = None


def _all_ids(store: FamilyStore, state: FamilyState) -> set[str]:
    base = state.base_table
    table = store.catalog.load_table(base.identifier)
    ids: set[str] = set()
    scan = table.scan(snapshot_id=base.snapshot_id, selected_fields=(ID_COLUMN,))
    for rb in scan.to_arrow_batch_reader():
        ids.update(rb.column(0).to_pylist())
    return ids
