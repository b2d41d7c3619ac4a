"""Reuse by content: the same raw content has the same id everywhere (md5), so a value
computed by ``feature@version`` for an id in one logical table is the value for that id
in any other table - provided the *whole upstream chain* was the same, i.e. the values
have the same data version (see :mod:`catalog_ext.data_versions`). A ``t_math`` computed
from another parser's ``parsed_text`` has another data version and is never copied.

Where values of each (feature, version, data version) live is the catalog-wide index
``omni_sys.feature_values`` (partitioned by feature, one row per committed unit, written
by :meth:`catalog_ext.store.FamilyStore.commit`). Building the index for a backfill reads
only the rows of the features it computes: its cost follows what the backfill asks, not
how many tables the catalog holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext import system_tables
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.data_versions import current_chains
from catalog_ext.family import FamilyState, FeatureBinding
from catalog_ext.store import FamilyStore


@dataclass
class _Source:
    identifier: str
    snapshot_id: int
    batches: list[str] = field(default_factory=list)  # only these batches hold matching values
    logical_table: str = ""
    coverage: Any = None  # the source's id index coverage, when authoritative at ``snapshot_id``
    index: Any = None


class ReuseIndex:
    """Where else ``feature@version`` with the same data version has been computed, and lookups by id."""

    def __init__(self, catalog: Any, sources: dict[str, list[_Source]]):
        self.catalog = catalog
        self.sources = sources  # feature name -> other tables holding its values

    @classmethod
    def build(cls, store: FamilyStore, state: FamilyState, bindings: list[FeatureBinding]) -> "ReuseIndex":
        """Sources for ``bindings`` (the features a run computes on ``state``), from the index table."""
        sources: dict[str, list[_Source]] = {b.name: [] for b in bindings}
        if state.table.id_mode != "md5" or not bindings:
            return cls(store.catalog, sources)  # uuid ids do not identify content
        chains = current_chains(state)
        for b in bindings:
            if b.name not in chains:
                continue
            sources[b.name] = find_sources(store.catalog, state.table.identifier, b, chains[b.name].data_version)
        for src in (s for found in sources.values() for s in found):
            _attach_index(store, src)
        return cls(store.catalog, sources)

    def lookup(self, feature: str, ids: pa.Array, columns: list[str]) -> pa.Table | None:
        """Rows (id + output columns) already computed elsewhere for these ids."""
        from pyiceberg.expressions import And, In

        found: list[pa.Table] = []
        wanted = set(ids.to_pylist())
        for src in self.sources.get(feature, ()):
            if not wanted:
                break
            data = (_read_through_index(src, sorted(wanted), columns, self.catalog) if src.coverage is not None
                    else None)
            if data is not None:
                if data.num_rows:
                    found.append(data)
                    wanted -= set(data.column(ID_COLUMN).to_pylist())
                continue
            table = self.catalog.load_table(src.identifier)
            if table.snapshot_by_id(src.snapshot_id) is None:
                continue  # expired since it was indexed
            data = table.scan(row_filter=And(In(ID_COLUMN, wanted), In(BATCH_COLUMN, set(src.batches))),
                              snapshot_id=src.snapshot_id,
                              selected_fields=tuple([ID_COLUMN] + columns)).to_arrow()
            if data.num_rows:
                found.append(data.select([ID_COLUMN] + columns))
                wanted -= set(data.column(ID_COLUMN).to_pylist())
        if not found:
            return None
        merged = pa.concat_tables([t.cast(found[0].schema) for t in found])  # index reads and scans alike
        _, first = _unique_rows(merged.column(ID_COLUMN).to_pylist())
        return merged.take(pa.array(first, pa.int64()))

    @property
    def active(self) -> bool:
        return any(self.sources.values())


def find_sources(catalog: Any, own_table: str, binding: FeatureBinding, data_version: str) -> list[_Source]:
    """Physical tables of *other* md5 logical tables whose values of ``binding`` have ``data_version``.

    Per physical table, the latest indexed unit of each batch says what that batch holds
    at the table's latest indexed snapshot (a batch recomputed later with another chain
    no longer matches); that snapshot is read, filtered to the matching batches.
    """
    rows = system_tables.read_rows(catalog, system_tables.FEATURE_VALUES,
                                   f"feature == '{binding.name}'").to_pylist()
    per_table: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if (r["version"] == binding.version and r["code_hash"] == binding.code_hash and r["id_mode"] == "md5"
                and r["logical_table"] != own_table):
            per_table.setdefault(r["physical_table"], []).append(r)
    out = []
    for identifier, entries in sorted(per_table.items()):
        newest = max(entries, key=lambda r: r["logical_version"])
        latest_per_batch: dict[str, dict[str, Any]] = {}
        for r in sorted(entries, key=lambda r: r["logical_version"]):
            latest_per_batch[r["batch"]] = r
        batches = sorted(b for b, r in latest_per_batch.items() if r["data_version"] == data_version)
        if batches:
            out.append(_Source(identifier, newest["snapshot_id"], batches, newest["logical_table"]))
    return out


def _attach_index(store: FamilyStore, src: _Source) -> None:
    """Use the source table's id index for lookups when it can vouch for the source snapshot.

    A unit's ids are mostly absent from another table: the index answers that with a
    key lookup each, where the scan reads every file of the matching batches.
    """
    if store.index_opener is None:
        return
    try:
        index = store.index_opener(src.logical_table)
        if index is None:
            return
        cov = index.coverage(store.catalog, src.identifier, src.snapshot_id)
    except Exception:  # noqa: BLE001 - the index is only the fast path; the scan stays correct
        return
    if cov.authoritative:
        src.index, src.coverage = index, cov


def _read_through_index(src: _Source, ids: list[str], columns: list[str], catalog: Any) -> pa.Table | None:
    """Rows (id + columns) of ``ids`` in the source, read by position; None if the index cannot vouch."""
    from omni_iceberg.index.lookup import data_file_io
    from omni_iceberg.index.parquet_rows import by_file, read_located

    files, problem = by_file(src.index.locations(src.coverage, ids))
    if problem:
        return None
    done, problem = read_located(files, columns, data_file_io(catalog, next(iter(files), "")))
    if problem:
        return None
    pieces = []
    for _, values, _ in done:
        if any(c not in values for c in columns):
            return None  # a file from before a column existed: let the scan fill it in
        piece = pa.table({ID_COLUMN: values[ID_COLUMN], **{c: values[c] for c in columns}})
        # only the batches whose values have the wanted data version (read per row: files may mix batches)
        pieces.append(piece.filter(pc.is_in(values[BATCH_COLUMN].cast(pa.string()), value_set=pa.array(src.batches))))
    return pa.concat_tables(pieces) if pieces else pa.table({ID_COLUMN: pa.array([], pa.string())})


def _unique_rows(ids: list[str]) -> tuple[set[str], list[int]]:
    seen: set[str] = set()
    first = []
    for i, x in enumerate(ids):
        if x not in seen:
            seen.add(x)
            first.append(i)
    return seen, first
