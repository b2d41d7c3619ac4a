"""Reading data files by name (catalog_ext.iceberg_io._read_by_name) gives pyiceberg's rows, or steps aside."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThan, In, IsNull
from pyiceberg.io.pyarrow import ArrowScan

from catalog_ext import iceberg_io


@pytest.fixture
def catalog(tmp_path):
    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri())
    cat.create_namespace("ns")
    return cat


def _both(table, row_filter=AlwaysTrue(), selected=("*",)):
    scan = table.scan(row_filter=row_filter, selected_fields=selected)
    tasks = list(scan.plan_files())
    fast = iceberg_io._read_by_name(scan, tasks)
    slow = ArrowScan(scan.table_metadata, scan.io, scan.projection(), scan.row_filter,
                     scan.case_sensitive).to_table(tasks)
    return fast, slow


def _same(fast: pa.Table, slow: pa.Table) -> None:
    assert fast is not None
    assert fast.column_names == slow.column_names
    key = [(fast.column_names[0], "ascending")]
    assert fast.sort_by(key).to_pylist() == slow.sort_by(key).to_pylist()


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({
        "id": pa.array([f"k{i:04d}" for i in range(start, start + n)]),
        "n": pa.array(list(range(start, start + n)), pa.int64()),
        "score": pa.array([None if i % 7 == 0 else i / 10 for i in range(start, start + n)], pa.float64()),
        "tags": pa.array([[f"t{i % 3}"] for i in range(start, start + n)], pa.list_(pa.string())),
        "raw": pa.array([{"url": f"u{i}", "body": "x" * (i % 5)} for i in range(start, start + n)]),
    })


def test_projections_filters_and_nested_whole_fields_match_pyiceberg(catalog):
    table = catalog.create_table("ns.t", schema=_rows(1).schema)
    for start in (0, 100, 200):  # three files
        table.append(_rows(100, start))
    for selected, row_filter in [
        (("*",), AlwaysTrue()),
        (("id", "score"), GreaterThan("n", 150)),
        (("id", "tags", "raw"), And(In("n", {1, 2, 250}), EqualTo("id", "k0002"))),
        (("id",), IsNull("score")),  # the filter column is not projected
    ]:
        fast, slow = _both(table, row_filter, selected)
        _same(fast, slow)


def test_a_column_added_later_reads_as_nulls_in_older_files(catalog):
    table = catalog.create_table("ns.t", schema=_rows(1).schema)
    table.append(_rows(10))
    with table.update_schema() as u:
        u.add_column("late", pa_type_long())
    table = catalog.load_table("ns.t")
    newer = _rows(10, 10).append_column("late", pa.array(list(range(10)), pa.int64()))
    table.append(newer)
    fast, slow = _both(table, selected=("id", "late"))
    _same(fast, slow)
    assert sum(v is None for v in fast.column("late").to_pylist()) == 10


def pa_type_long():
    from pyiceberg.types import LongType

    return LongType()


def test_pruned_structs_renames_and_reused_names_step_aside(catalog):
    table = catalog.create_table("ns.t", schema=_rows(1).schema)
    table.append(_rows(10))
    fast, _ = _both(table, selected=("id", "raw.url"))
    assert fast is None  # a pruned struct: by field id only
    with table.update_schema() as u:
        u.delete_column("score")
    with table.update_schema() as u:
        u.add_column("score", pa_type_long())  # the same name, a new field
    table = catalog.load_table("ns.t")
    fast, slow = _both(table, selected=("id", "score"))
    assert fast is None and slow.column("score").null_count == 10
    with table.update_schema() as u:
        u.rename_column("n", "m")
    table = catalog.load_table("ns.t")
    assert _both(table, selected=("id", "m"))[0] is None


def test_files_with_delete_files_step_aside(catalog):
    from pyiceberg.table import FileScanTask

    table = catalog.create_table("ns.t", schema=_rows(1).schema)
    table.append(_rows(20))
    table.append(_rows(20, 20))
    scan = table.scan()
    tasks = list(scan.plan_files())
    assert iceberg_io._read_by_name(scan, tasks).num_rows == 40
    # a position-delete file on one task (as Spark's merge-on-read writes): pyiceberg must apply it
    with_deletes = [FileScanTask(tasks[0].file, delete_files={tasks[1].file}), tasks[1]]
    assert iceberg_io._read_by_name(scan, with_deletes) is None


def test_footers_are_parsed_once_and_the_cache_stays_within_its_bytes(catalog, monkeypatch):
    table = catalog.create_table("ns.cached", schema=_rows(1).schema)
    for start in (0, 100, 200):
        table.append(_rows(100, start))
    iceberg_io.FOOTERS.clear()
    first, slow = _both(table, AlwaysTrue(), ("id", "n"))
    assert iceberg_io.FOOTERS.misses == 3 and iceberg_io.FOOTERS.hits == 0
    again, _ = _both(table, AlwaysTrue(), ("id", "n"))
    assert iceberg_io.FOOTERS.misses == 3 and iceberg_io.FOOTERS.hits == 3
    _same(first, slow)
    _same(again, slow)
    _same(*_both(table, GreaterThan("n", 150), ("id", "score")))  # cached footers, a filter, other columns
    assert iceberg_io.FOOTERS.misses == 3
    # a bound smaller than two footers keeps at most one: the least recently used leaves
    iceberg_io.FOOTERS.clear()
    one = table.scan().plan_files()
    size = None
    for task in one:
        import pyarrow.parquet as pq

        size = pq.read_metadata(task.file.file_path.removeprefix("file://")).serialized_size
        break
    monkeypatch.setenv("OMNI_FOOTER_CACHE_MB", str(1.5 * size / (1 << 20)))
    _same(*_both(table))
    assert len(iceberg_io.FOOTERS._entries) == 1 and iceberg_io.FOOTERS._total <= 1.5 * size
    iceberg_io.FOOTERS.clear()
    from catalog_ext.errors import ConfigError

    monkeypatch.setenv("OMNI_FOOTER_CACHE_MB", "lots")
    with pytest.raises(ConfigError, match=r"OMNI_FOOTER_CACHE_MB='lots' \(environment\): expected a number of MiB"):
        _both(table)


def test_a_snapshot_and_filter_are_planned_once_and_a_new_snapshot_is_planned_again(catalog):
    table = catalog.create_table("ns.planned", schema=_rows(1).schema)
    table.append(_rows(100, 0))
    iceberg_io.PLANS.clear()
    first = iceberg_io.scan_to_arrow(table, GreaterThan("n", 50), None, ("id", "n"))
    again = iceberg_io.scan_to_arrow(table, GreaterThan("n", 50), None, ("id",))
    assert (iceberg_io.PLANS.misses, iceberg_io.PLANS.hits) == (1, 1)
    assert first.num_rows == again.num_rows == 49 and again.column_names == ["id"]
    iceberg_io.scan_to_arrow(table, GreaterThan("n", 60), None, ("id",))  # another filter: planned
    table.append(_rows(100, 100))  # a new snapshot: planned, and sees the new file
    newer = iceberg_io.scan_to_arrow(table, GreaterThan("n", 50), None, ("id",))
    assert iceberg_io.PLANS.misses == 3 and newer.num_rows == 149
    old = table.metadata.snapshots[0].snapshot_id  # the old snapshot's plan is still right
    assert iceberg_io.scan_to_arrow(table, GreaterThan("n", 50), old, ("id",)).num_rows == 49
    assert iceberg_io.PLANS.hits == 2
    iceberg_io.PLANS.clear()
