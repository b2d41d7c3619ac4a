"""``Transaction.table_metadata`` is computed once per transaction state, not once per read.

pyiceberg recomputes it (all staged updates applied, then a deep copy whose cost grows
with the table's snapshots and logs) on every access; see catalog_ext/pyiceberg_memo.py.
"""

from __future__ import annotations

import pyarrow as pa
import pyiceberg.table as iceberg_table
from pyiceberg.table.update import update_table_metadata

import catalog_ext  # noqa: F401 - installs the memo
from catalog_ext.catalog import open_catalog
from catalog_ext.pyiceberg_memo import installed


def _table(omni_home):
    catalog = open_catalog(omni_home)
    catalog.create_namespace_if_not_exists("memo")
    table = catalog.create_table("memo.t", schema=pa.schema([pa.field("x", pa.int64())]))
    for i in range(3):
        table.append(pa.table({"x": pa.array([i], pa.int64())}))
    return catalog.load_table("memo.t")


def test_memo_returns_what_pyiceberg_computes_and_follows_new_updates(omni_home):
    assert installed()
    table = _table(omni_home)
    tx = table.transaction()
    tx.set_properties({"a": "1"})
    first = tx.table_metadata
    assert tx.table_metadata is first  # same state: not recomputed
    fresh = update_table_metadata(table.metadata, tx._updates)
    assert first.model_dump(exclude={"last_updated_ms"}) == fresh.model_dump(exclude={"last_updated_ms"})
    assert first.properties["a"] == "1"
    tx.set_properties({"b": "2"})  # a new state
    second = tx.table_metadata
    assert second is not first and second.properties["b"] == "2"


def test_an_append_computes_the_metadata_once_per_state(omni_home, monkeypatch):
    table = _table(omni_home)
    calls = {"n": 0}
    real = iceberg_table.update_table_metadata

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(iceberg_table, "update_table_metadata", counting)
    with table.transaction() as tx:
        tx.append(pa.table({"x": pa.array([9], pa.int64())}))
    assert 0 < calls["n"] <= 4  # pyiceberg alone: one per read of the property (over ten here)
    assert table.refresh().scan().to_arrow().num_rows == 4
