"""A lookup of many ids (issue 41 item 2) answers exactly what a filter over the same files does.

1,000 ids - most present, some asked twice, some absent - over a table whose base files
hold several row groups of several pages each, so the ids land in many files, groups
and pages. The answer must equal pyarrow's filter of the same Parquet files, row for
row in the asked order (each distinct id once, where it was first asked), through the
page reader and through its fallback, the whole-group read. Real catalog, real files.
"""

from __future__ import annotations

import json
import random

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from catalog_ext import row_groups
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from omni_iceberg.api import Omni
from omni_iceberg.explore.lookup import get_rows
from omni_iceberg.index import page_reads, parquet_rows

ROWS_PER_BATCH = 6000


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """``many``: two batches in 16 buckets, row groups of ~8 KiB cut into ~2 KiB pages."""
    from catalog_ext.config import OmniConfig

    home = tmp_path_factory.mktemp("lookup-many")
    omni = Omni(config=OmniConfig.resolve(catalog=f"sqlite:///{home}/catalog.db", warehouse=str(home / "wh"),
                                          home=str(home)))
    omni.create_table("many", bucket_count=16)
    for t in omni.state("many").tables:
        with omni.catalog.load_table(t.identifier).transaction() as tx:
            tx.set_properties({row_groups.ROW_GROUP_BYTES_PROPERTY: "8192", row_groups.PAGE_BYTES_PROPERTY: "2048",
                               row_groups.DICT_BYTES_PROPERTY: "2048"})
    rnd = random.Random(41)
    for n in range(2):
        path = home / f"b{n}.jsonl"
        with open(path, "w") as f:
            for i in range(n * ROWS_PER_BATCH, (n + 1) * ROWS_PER_BATCH):
                # varying lengths (the page reader walks them), a few nulls and empty strings
                text = f"doc {i} " + "word " * rnd.randrange(0, 30)
                row = {"raw_data": text, "url": None if i % 53 == 0 else f"https://m.example/{i}" * (i % 3)}
                f.write(json.dumps(row) + "\n")
        omni.submit("many", [str(path)], batch=f"b{n}", progress=False)
    files = [t.file.file_path.removeprefix("file://") for t in
             omni.catalog.load_table(omni.state("many").physical_table("base").identifier).scan().plan_files()]
    return omni, files


def _expected(files: list[str], asked: list[str]) -> list[dict]:
    """pyarrow's filter of the base files, one row per distinct asked id in first-asked order."""
    data = ds.dataset(files, format="parquet").to_table(filter=pc.field(ID_COLUMN).isin(asked))
    by_id = {r[ID_COLUMN]: r for r in data.to_pylist()}
    assert len(by_id) == data.num_rows  # one row per id in the base table
    out = []
    for rid in dict.fromkeys(asked):
        r = by_id.get(rid)
        out.append({ID_COLUMN: rid, BATCH_COLUMN: r and r[BATCH_COLUMN], "RawData": r and r["RawData"],
                    "_found": r is not None})
    return out


@pytest.mark.parametrize("reader", ["pages", "row groups"])
def test_a_thousand_ids_equal_a_filter_over_the_same_files(table, reader, monkeypatch):
    omni, files = table
    if reader == "row groups":  # the fallback: every file's rows read by decoding their whole groups
        monkeypatch.setattr(parquet_rows, "PAGE_READ_MAX_ROWS", 0)
    metas = [pq.ParquetFile(f).metadata for f in files]
    assert len(files) == 32 and all(m.num_row_groups >= 3 for m in metas), [m.num_row_groups for m in metas]
    everything = omni.read("many", columns=[ID_COLUMN]).column(0).to_pylist()
    rnd = random.Random(7)
    present = rnd.sample(everything, 900)
    absent = [f"{rnd.getrandbits(128):032x}" for _ in range(60)]
    assert not set(absent) & set(everything)
    asked = present + absent + present[:40]  # 1,000 ids: 40 asked twice, 60 not in the table
    rnd.shuffle(asked)
    assert len(asked) == 1000

    got = get_rows(omni, "many", asked, explain=True)
    assert [t.method for t in got.tables] == ["index"]
    assert got.tables[0].files_read == 32
    rows = got.rows.to_pylist()
    want = _expected(files, asked)
    assert len(rows) == 960
    assert [{k: r[k] for k in want[0]} for r in rows] == want
    assert sorted(got.not_found) == sorted(absent)
    assert [r[ID_COLUMN] for r in rows if not r["_found"]] == [i for i in dict.fromkeys(asked) if i in set(absent)]
    if reader == "pages":  # every file was read page by page (the reader keeps each chunk's page layout)
        paged = {path for path, _, _ in page_reads._LAYOUTS}
        assert set(files) <= paged and not set(parquet_rows._NO_PAGES) & (set(files) | {f"file://{f}" for f in files})


def test_the_ids_asked_fall_in_many_groups_and_pages(table):
    """The layout the test above relies on: every file's groups hold several data pages."""
    _, files = table
    for path in files[:4]:
        meta = pq.ParquetFile(path).metadata
        chunk = meta.row_group(0).column(list(page_reads.leaf_columns(meta)).index("RawData.raw_data"))
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        with open(path, "rb") as f:
            f.seek(start)
            layout = page_reads._layout(f.read(chunk.total_compressed_size), start, row=meta.row_group(0).num_rows)
        assert layout.complete and len(layout.pages) >= 2, layout.first_rows
