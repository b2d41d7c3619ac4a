"""Point lookups in the default layout (issue 41): row groups sized by bytes, kept by rewrites.

A lookup through the id index decodes the row group holding the row, so family tables
are created with ``write.parquet.row-group-size-bytes`` and omni's writers turn it into
pyiceberg's row limit (:mod:`catalog_ext.row_groups`). Real catalog, real Parquet files.
"""

from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog_ext import row_groups
from catalog_ext.contract import ID_COLUMN
from omni_iceberg.api import Omni
from omni_iceberg.explore.lookup import get_rows
from omni_iceberg.index.parquet_rows import read_positions


@pytest.fixture
def omni(omni_home):
    return Omni(config=omni_home)


def _jsonl(path, start, count, width=100):
    with open(path, "w") as f:
        for i in range(start, start + count):
            f.write(json.dumps({"raw_data": f"doc {i:06d} " + "x" * width, "url": f"https://e.example/{i}"}) + "\n")
    return str(path)


def _base(omni, name):
    return omni.catalog.load_table(omni.state(name).physical_table("base").identifier)


def _files(table):
    return [t.file.file_path for t in table.scan().plan_files()]


def _group_rows(path):
    md = pq.ParquetFile(path.removeprefix("file://")).metadata
    return [md.row_group(i).num_rows for i in range(md.num_row_groups)]


def _set_bytes(omni, name, value):
    for t in omni.state(name).tables:
        with omni.catalog.load_table(t.identifier).transaction() as tx:
            tx.set_properties({row_groups.ROW_GROUP_BYTES_PROPERTY: str(value)})


def test_family_tables_are_created_with_row_groups_sized_by_bytes(omni):
    omni.create_table("pl")
    for t in omni.state("pl").tables:
        props = omni.catalog.load_table(t.identifier).properties
        assert props[row_groups.ROW_GROUP_BYTES_PROPERTY] == str(1 << 20)


def test_rows_per_group_follows_the_rows_average_size():
    props = {row_groups.ROW_GROUP_BYTES_PROPERTY: str(1 << 20)}
    assert row_groups.rows_per_group(props, rows=40_000, nbytes=40_000 * 160) == (1 << 20) // 160
    assert row_groups.rows_per_group(props, rows=100, nbytes=100 * 50_000) == 20  # 50 KB pages
    assert row_groups.rows_per_group(props, rows=3, nbytes=3 * (4 << 20)) == 1  # a row bigger than a group
    with pytest.raises(ValueError, match=r"table db\.t: property write\.parquet\.row-group-size-bytes='1MB'"):
        row_groups.rows_per_group({row_groups.ROW_GROUP_BYTES_PROPERTY: "1MB"}, 10, 100, "db.t")


def test_writes_split_row_groups_by_bytes_without_pyiceberg_warnings(omni, tmp_path):
    omni.create_table("pl")
    _set_bytes(omni, "pl", 8192)  # ~70 rows of ~120 Arrow bytes: several groups per file
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pyiceberg warns about row-group-size-bytes if it sees it
        omni.submit("pl", [_jsonl(tmp_path / "a.jsonl", 0, 3000)], batch="b0", progress=False)
    groups = [_group_rows(p) for p in _files(_base(omni, "pl"))]
    assert sum(map(sum, groups)) == 3000
    assert all(len(g) > 1 for g in groups), groups
    assert max(max(g) for g in groups) < 200  # pyiceberg's own limit would have made one group per file


def test_lookup_of_raw_content_reads_rows_from_any_row_group(omni, tmp_path):
    omni.create_table("pl")
    _set_bytes(omni, "pl", 8192)
    omni.submit("pl", [_jsonl(tmp_path / "a.jsonl", 0, 2000)], batch="b0", progress=False)
    everything = omni.read("pl").to_pylist()
    by_id = {r[ID_COLUMN]: r for r in everything}
    asked = [r[ID_COLUMN] for r in everything[::-97]]  # positions in many row groups, not in file order
    got = get_rows(omni, "pl", asked, explain=True)
    assert got.tables[0].method == "index" and got.tables[0].files_read >= 1
    rows = got.rows.to_pylist()
    assert [r[ID_COLUMN] for r in rows] == asked
    assert [r["RawData"]["raw_data"] for r in rows] == [by_id[i]["RawData"]["raw_data"] for i in asked]
    assert [r["RawData"]["url"] for r in rows] == [by_id[i]["RawData"]["url"] for i in asked]


def test_compaction_and_rebucketing_keep_the_row_group_size(omni, tmp_path):
    omni.create_table("pl")
    _set_bytes(omni, "pl", 8192)
    for n in range(3):
        omni.submit("pl", [_jsonl(tmp_path / f"{n}.jsonl", n * 1000, 1000)], batch=f"b{n}", progress=False)
    before = set(_files(_base(omni, "pl")))
    omni.compact("pl", min_files=2)
    after = set(_files(_base(omni, "pl")))
    assert len(after) < len(before) and after - before  # files were rewritten
    compacted = [_group_rows(p) for p in after]
    assert sum(map(sum, compacted)) == 3000
    assert all(max(g) < 200 for g in compacted), compacted
    omni.rebucket("pl", 2)
    assert not set(_files(_base(omni, "pl"))) & after
    rebucketed = [_group_rows(p) for p in _files(_base(omni, "pl"))]
    assert sum(map(sum, rebucketed)) == 3000
    assert all(max(g) < 200 for g in rebucketed), rebucketed


def test_read_positions_reads_each_group_once_and_answers_in_asked_order(tmp_path):
    path = str(tmp_path / "f.parquet")
    values = [f"v{i:04d}" for i in range(1000)]
    pq.write_table(pa.table({ID_COLUMN: values, "x": list(range(1000))}), path, row_group_size=100)
    asked = [999, 0, 450, 451, 5, 999 - 1, 100]
    got = read_positions(path, asked, [ID_COLUMN, "x", "missing"])
    assert got[ID_COLUMN].to_pylist() == [values[i] for i in asked]
    assert got["x"].to_pylist() == asked
    assert "missing" not in got


def test_a_warm_process_sees_new_snapshots_and_rewritten_files(omni, tmp_path):
    """The per-process caches (lookup plans by state, footers by path, opened indexes) never
    answer for an older table: ids a later submit adds are found by the same process, and
    after compaction rewrites the files the rows are read from the new ones, unchanged."""
    omni.create_table("pl")
    _set_bytes(omni, "pl", 8192)
    omni.submit("pl", [_jsonl(tmp_path / "a.jsonl", 0, 600)], batch="b0", progress=False)
    first = {r[ID_COLUMN]: r for r in omni.read("pl").to_pylist()}
    some_old = sorted(first)[::50]
    before = get_rows(omni, "pl", some_old).to_pylist()  # warms every cache
    omni.submit("pl", [_jsonl(tmp_path / "b.jsonl", 600, 600)], batch="b1", progress=False)
    added = sorted({r[ID_COLUMN] for r in omni.read("pl").to_pylist()} - set(first))
    assert len(added) == 600
    asked = added[::40] + some_old
    got = get_rows(omni, "pl", asked, explain=True)
    assert got.tables[0].method == "index" and got.not_found == []
    rows = got.rows.to_pylist()
    assert [r[ID_COLUMN] for r in rows] == asked and all(r["_found"] for r in rows)
    assert rows[len(added[::40]):] == before  # the old rows are unchanged
    assert {r["RawData"]["raw_data"][:10] for r in rows[:len(added[::40])]} <= {f"doc {i:06d}" for i in range(600, 1200)}
    old_files = set(_files(_base(omni, "pl")))
    omni.compact("pl", min_files=2)
    assert not set(_files(_base(omni, "pl"))) & old_files  # every base file rewritten
    again = get_rows(omni, "pl", asked, explain=True)
    assert again.tables[0].method == "index" and again.tables[0].files_read >= 1
    assert again.rows.to_pylist() == rows


def _data_pages(path):
    """Data pages of each column chunk of the file's first row group."""
    from omni_iceberg.index import page_reads

    meta = pq.ParquetFile(path).metadata
    counts = []
    with open(path, "rb") as f:
        for i in range(meta.num_columns):
            chunk = meta.row_group(0).column(i)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            f.seek(start)
            buf, pos, n = f.read(chunk.total_compressed_size), 0, 0
            while pos < len(buf):
                head, data = page_reads.page_header(buf, pos)
                n += head[1] in (page_reads.DATA_PAGE, page_reads.DATA_PAGE_V2)
                pos = data + head[3]
            counts.append(n)
    return counts


def test_rows_per_page_follows_the_rows_average_size():
    props = {row_groups.PAGE_BYTES_PROPERTY: str(16 << 10)}
    assert row_groups.rows_per_page(props, rows=40_000, nbytes=40_000 * 160) == (16 << 10) // 160
    assert row_groups.rows_per_page({**props, row_groups.PAGE_ROW_LIMIT_PROPERTY: "7"}, 100, 100 * 160) == 7
    assert row_groups.rows_per_page(props, rows=3, nbytes=3 * (1 << 20)) == 1
    assert row_groups.rows_per_page({}, 100, 10_000) is None


def test_a_page_size_cuts_pages_and_lookups_read_them(omni, tmp_path):
    """With ``write.parquet.page-size-bytes`` (and the dictionary bounded near it) omni's
    writes cut a row group's chunks into pages (pyarrow cuts only between write batches, so
    the page row limit is set from the rows' size), and lookups read rows from those pages."""
    omni.create_table("pl")
    for t in omni.state("pl").tables:
        with omni.catalog.load_table(t.identifier).transaction() as tx:
            tx.set_properties({row_groups.PAGE_BYTES_PROPERTY: "2048", row_groups.DICT_BYTES_PROPERTY: "2048"})
    omni.submit("pl", [_jsonl(tmp_path / "a.jsonl", 0, 2000)], batch="b0", progress=False)
    files = _files(_base(omni, "pl"))
    pages = _data_pages(files[0].removeprefix("file://"))
    assert max(pages) > 3, pages  # raw_data: ~110 bytes a row, groups of ~1 MiB, pages of 2 KiB
    everything = omni.read("pl").to_pylist()
    by_id = {r[ID_COLUMN]: r for r in everything}
    asked = [r[ID_COLUMN] for r in everything[::-131]]
    got = get_rows(omni, "pl", asked, explain=True)
    assert got.tables[0].method == "index"
    rows = got.rows.to_pylist()
    assert [r["RawData"] for r in rows] == [by_id[i]["RawData"] for i in asked]


def test_default_writes_cut_64_kib_pages(omni, tmp_path):
    omni.create_table("pl")
    omni.submit("pl", [_jsonl(tmp_path / "a.jsonl", 0, 8000, width=300)], batch="b0", progress=False)
    pages = [_data_pages(p.removeprefix("file://")) for p in _files(_base(omni, "pl"))]
    # raw_data (~320 bytes a row, ~500 rows a file) is ~160 KB a chunk: several 64 KiB pages
    assert all(p[2] >= 2 for p in pages), pages
