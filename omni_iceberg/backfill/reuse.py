"""Reuse by content: the same raw content has the same id everywhere (md5), so a value
computed by ``feature@version`` for an id in one logical table is the value for that
id in any other table. Before computing, a unit looks the ids up in the other tables
that already hold that exact feature version and copies what it finds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.family import FamilyState, FeatureBinding


@dataclass
class _Source:
    identifier: str
    snapshot_id: int


class ReuseIndex:
    """Where else ``feature@version`` (same code) has been computed, and lookups by id."""

    def __init__(self, catalog: Any, sources: dict[str, list[_Source]]):
        self.catalog = catalog
        self.sources = sources  # feature name -> other tables holding its values

    @classmethod
    def build(cls, store: Any, state: FamilyState, bindings: list[FeatureBinding]) -> "ReuseIndex":
        sources: dict[str, list[_Source]] = {b.name: [] for b in bindings}
        if state.table.id_mode != "md5":
            return cls(store.catalog, sources)  # uuid ids do not identify content
        for ident in store.list_tables():
            if ident == state.table.identifier:
                continue
            ns, name = ident.split(".", 1)
            other = store.load(ns, name)
            if other.table.id_mode != "md5":
                continue
            for b in bindings:
                theirs = other.feature(b.name, b.version)
                if theirs is None or theirs.code_hash != b.code_hash or not other.computed_batches(b.name, b.version):
                    continue
                table = other.physical_table(theirs.table_key)
                if table.snapshot_id is not None:
                    sources[b.name].append(_Source(table.identifier, table.snapshot_id))
        return cls(store.catalog, sources)

    def lookup(self, feature: str, ids: pa.Array, columns: list[str]) -> pa.Table | None:
        """Rows (id + output columns) already computed elsewhere for these ids."""
        from pyiceberg.expressions import In

        found: list[pa.Table] = []
        wanted = set(ids.to_pylist())
        for src in self.sources.get(feature, ()):
            if not wanted:
                break
            table = self.catalog.load_table(src.identifier)
            data = table.scan(row_filter=In(ID_COLUMN, wanted), snapshot_id=src.snapshot_id,
                              selected_fields=tuple([ID_COLUMN] + columns)).to_arrow()
            if data.num_rows:
                found.append(data.select([ID_COLUMN] + columns))
                wanted -= set(data.column(ID_COLUMN).to_pylist())
        if not found:
            return None
        merged = pa.concat_tables(found)
        _, first = _unique_rows(merged.column(ID_COLUMN).to_pylist())
        return merged.take(pa.array(first, pa.int64()))

    @property
    def active(self) -> bool:
        return any(self.sources.values())


def _unique_rows(ids: list[str]) -> tuple[set[str], list[int]]:
    seen: set[str] = set()
    first = []
    for i, x in enumerate(ids):
        if x not in seen:
            seen.add(x)
            first.append(i)
    return seen, first


_ = BATCH_COLUMN
