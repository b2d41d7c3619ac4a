"""The page-level point reader against pyarrow's own decode of the same row groups.

Files are written by pyarrow with the project's write properties (zstd, pyiceberg's batch
and dictionary settings) and variants of them (page sizes, dictionary on / off / falling
back to PLAIN mid-chunk, v1 and v2 pages, other codecs), holding every type the logical
table uses, nulls, empty strings and struct leaves; and by omni's own writes (pyiceberg).
Whatever the reader cannot answer exactly must raise ``Unsupported``, and
``read_positions`` then answers from the whole row group.
"""

from __future__ import annotations

import datetime as dt
import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from catalog_ext.contract import ID_COLUMN
from omni_iceberg.index import page_reads as PR
from omni_iceberg.index.parquet_rows import _footer, read_positions

ROWS = 3000


def _table(seed: int) -> pa.Table:
    rnd = random.Random(seed)

    def maybe(v, p=0.15):
        return None if rnd.random() < p else v

    def text():
        return rnd.choice(["", "é" * rnd.randrange(4), "x" * rnd.randrange(300), f"doc {rnd.random()}"])

    raw = []
    for i in range(ROWS):
        raw.append(None if rnd.random() < 0.05 else
                   {"raw_data": maybe(text()), "url": maybe(f"https://e.example/{i}"),
                    "content_type": maybe(rnd.choice(["text/html", "text/plain"]))})
    struct = pa.struct([("raw_data", pa.string()), ("url", pa.string()), ("content_type", pa.string())])
    epoch = dt.datetime(2020, 1, 1)
    return pa.table({
        ID_COLUMN: pa.array([f"id-{i:06d}-{rnd.randrange(10**9)}" for i in range(ROWS)], pa.string()),
        "_ai_append_name_": pa.array(["b0"] * ROWS, pa.string()),
        "RawData": pa.array(raw, struct),
        "s": pa.array([maybe(text(), 0.3) for _ in range(ROWS)], pa.string()),
        "i32": pa.array([maybe(rnd.randrange(-2**31, 2**31)) for _ in range(ROWS)], pa.int32()),
        "i64": pa.array([maybe(rnd.randrange(-2**63, 2**63)) for _ in range(ROWS)], pa.int64()),
        "small": pa.array([rnd.randrange(3) for _ in range(ROWS)], pa.int64()),  # few distinct: dictionary
        "f32": pa.array([maybe(rnd.uniform(-1e6, 1e6)) for _ in range(ROWS)], pa.float32()),
        "f64": pa.array([maybe(rnd.choice([rnd.random(), float("inf"), -0.0])) for _ in range(ROWS)], pa.float64()),
        "b": pa.array([maybe(rnd.random() < 0.5) for _ in range(ROWS)], pa.bool_()),
        "bin": pa.array([maybe(bytes(rnd.randrange(256) for _ in range(rnd.randrange(20)))) for _ in range(ROWS)],
                        pa.binary()),
        "d": pa.array([maybe(dt.date(2000, 1, 1) + dt.timedelta(days=rnd.randrange(9000))) for _ in range(ROWS)],
                      pa.date32()),
        "ts": pa.array([maybe(epoch + dt.timedelta(microseconds=rnd.randrange(10**14))) for _ in range(ROWS)],
                       pa.timestamp("us")),
        "tstz": pa.array([maybe(epoch + dt.timedelta(microseconds=rnd.randrange(10**14))) for _ in range(ROWS)],
                         pa.timestamp("us", tz="UTC")),
        "req": pa.array(list(range(ROWS)), pa.int64()),
    }, schema=None).cast(pa.schema([
        pa.field(ID_COLUMN, pa.string(), nullable=False), pa.field("_ai_append_name_", pa.string(), nullable=False),
        pa.field("RawData", struct), pa.field("s", pa.string()), pa.field("i32", pa.int32()),
        pa.field("i64", pa.int64()), pa.field("small", pa.int64()), pa.field("f32", pa.float32()),
        pa.field("f64", pa.float64()), pa.field("b", pa.bool_()), pa.field("bin", pa.binary()),
        pa.field("d", pa.date32()), pa.field("ts", pa.timestamp("us")), pa.field("tstz", pa.timestamp("us", tz="UTC")),
        pa.field("req", pa.int64(), nullable=False)]))


LEAVES = [ID_COLUMN, "_ai_append_name_", "RawData.raw_data", "RawData.url", "RawData.content_type", "s", "i32",
          "i64", "small", "f32", "f64", "b", "bin", "d", "ts", "tstz", "req"]

#: pyiceberg's writer arguments on the project's table properties, then variants of them
PROJECT = dict(compression="zstd", data_page_size=1 << 20, dictionary_pagesize_limit=2 << 20,
               write_batch_size=20_000)
VARIANTS = {
    "project": {},
    "small-pages": dict(data_page_size=2048, dictionary_pagesize_limit=2048, write_batch_size=64),
    "dictionary-falls-back": dict(data_page_size=8192, dictionary_pagesize_limit=4096, write_batch_size=100),
    "plain": dict(use_dictionary=False, data_page_size=4096, write_batch_size=50),
    "v2-pages": dict(data_page_version="2.0", data_page_size=4096, dictionary_pagesize_limit=8192,
                     write_batch_size=100),
    "v2-plain-snappy": dict(data_page_version="2.0", use_dictionary=False, compression="snappy",
                            data_page_size=4096, write_batch_size=100),
    "gzip": dict(compression="gzip", data_page_size=4096, dictionary_pagesize_limit=4096, write_batch_size=100),
    "uncompressed": dict(compression="none", data_page_size=4096, dictionary_pagesize_limit=4096,
                         write_batch_size=100),
}


def _expected(pf: pq.ParquetFile, group: int, rows: list[int], column: str) -> pa.Array:
    """What read_positions' row-group read gives: the leaf of the decoded group, taken."""
    head, *rest = column.split(".")
    arr = pf.read_row_group(group, columns=[head]).column(head)
    for sub in rest:
        arr = pc.struct_field(arr, sub)
    return arr.take(pa.array(rows, pa.int64())).combine_chunks()


def _pages(path: str) -> int:
    """Data pages in the file's first column chunk (the variants must really differ)."""
    meta = pq.ParquetFile(path).metadata
    chunk = meta.row_group(0).column(0)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    with open(path, "rb") as f:
        f.seek(start)
        buf = f.read(chunk.total_compressed_size)
    pos, pages = 0, 0
    while pos < len(buf):
        head, data = PR.page_header(buf, pos)
        pages += head[1] in (PR.DATA_PAGE, PR.DATA_PAGE_V2)
        pos = data + head[3]
    return pages


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_page_reads_equal_pyarrows_decode(tmp_path, variant):
    data = _table(seed=len(variant))
    path = str(tmp_path / f"{variant}.parquet")
    pq.write_table(data, path, row_group_size=1100, **(PROJECT | VARIANTS[variant]))
    if variant != "project":
        assert _pages(path) > 3
    pf = pq.ParquetFile(path)
    meta, schema = pf.metadata, pf.schema_arrow
    rnd = random.Random(variant)
    for group in range(meta.num_row_groups):
        n = meta.row_group(group).num_rows
        for rows in ([0], [n - 1], [rnd.randrange(n) for _ in range(5)], [7, 3, 7], sorted(rnd.sample(range(n), 40))):
            got = PR.read_rows(path, meta, schema, group, rows, LEAVES)
            for c in LEAVES:
                want = _expected(pf, group, rows, c)
                assert got[c].type == want.type, (variant, c)
                assert got[c].equals(want), (variant, group, rows, c, got[c], want)


def test_read_positions_takes_pages_and_answers_as_the_group_read(tmp_path):
    data = _table(seed=3)
    path = str(tmp_path / "f.parquet")
    pq.write_table(data, path, row_group_size=700, **(PROJECT | VARIANTS["dictionary-falls-back"]))
    asked = [2999, 0, 1500, 1501, 5, 701, 699, 0]
    got = read_positions(path, asked, LEAVES + ["missing"])
    assert "missing" not in got
    for c in LEAVES:
        head, *rest = c.split(".")
        arr = data.column(head)
        for sub in rest:
            arr = pc.struct_field(arr, sub)
        assert got[c].to_pylist() == arr.take(asked).to_pylist(), c
    assert got[ID_COLUMN].to_pylist() == [data.column(ID_COLUMN)[i].as_py() for i in asked]


def _fallback_case(tmp_path, name: str) -> tuple[str, list[str], str]:
    """A file the page reader must refuse: (path, columns, why)."""
    path = str(tmp_path / f"{name}.parquet")
    n = 500
    ids = pa.array([f"id{i:05d}" for i in range(n)])
    if name == "repeated":
        pq.write_table(pa.table({ID_COLUMN: ids, "v": pa.array([[float(i)] * (i % 3) for i in range(n)],
                                                                  pa.list_(pa.float64()))}), path)
        return path, [ID_COLUMN, "v"], "not a leaf"
    if name == "delta":
        pq.write_table(pa.table({ID_COLUMN: ids, "v": pa.array(range(n), pa.int64())}), path, use_dictionary=False,
                       column_encoding={"v": "DELTA_BINARY_PACKED"})
        return path, [ID_COLUMN, "v"], "encoding 5"
    if name == "big-dictionary":
        pq.write_table(pa.table({ID_COLUMN: pa.array([f"{i:05d}" + "x" * 600 for i in range(n)])}), path,
                       dictionary_pagesize_limit=8 << 20)
        return path, [ID_COLUMN], "dictionary of"
    if name == "lz4":
        pq.write_table(pa.table({ID_COLUMN: ids}), path, compression="lz4")
        return path, [ID_COLUMN], "codec"
    if name == "decimal":
        pq.write_table(pa.table({ID_COLUMN: ids, "v": pa.array([i for i in range(n)], pa.decimal128(12, 2))}), path)
        return path, [ID_COLUMN, "v"], "Arrow decimal"
    if name == "int96":
        pq.write_table(pa.table({ID_COLUMN: ids, "v": pa.array(range(n), pa.timestamp("ns"))}), path,
                       use_deprecated_int96_timestamps=True)
        return path, [ID_COLUMN, "v"], "INT96"
    if name == "bad-header":
        pq.write_table(pa.table({ID_COLUMN: ids}), path, use_dictionary=False)
        meta = pq.ParquetFile(path).metadata
        at = meta.row_group(0).column(0).data_page_offset
        with open(path, "r+b") as f:  # PageHeader field 1 (type) = 7: no such page type
            f.seek(at)
            assert f.read(2) == b"\x15\x00"
            f.seek(at)
            f.write(b"\x15\x0e")
        return path, [ID_COLUMN], "page type 7"
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["repeated", "delta", "big-dictionary", "lz4", "decimal", "int96", "bad-header"])
def test_what_the_page_reader_cannot_answer_falls_back_to_the_group_read(tmp_path, name):
    path, columns, why = _fallback_case(tmp_path, name)
    meta, _, schema = _footer(path)
    with pytest.raises(PR.Unsupported, match=why):
        PR.read_rows(path, meta, schema, 0, [3, 250], columns)
    if name == "bad-header":
        return  # pyarrow cannot read that page either
    got = read_positions(path, [250, 3], columns)
    full = pq.read_table(path)
    for c in columns:
        assert got[c].to_pylist() == full.column(c).take([250, 3]).to_pylist(), c


def test_page_reads_of_omni_written_files(omni_home, tmp_path):
    """Files as omni writes them (pyiceberg, the family tables' properties): every leaf of a
    random row of every group, page reader == pyarrow."""
    from omni_iceberg.api import Omni

    omni = Omni(config=omni_home)
    omni.create_table("pr")
    src = tmp_path / "a.jsonl"
    with open(src, "w") as f:
        for i in range(3000):
            f.write(json.dumps({"raw_data": "" if i % 11 == 0 else f"doc {i} " + "y" * (i % 200),
                                "url": f"https://e.example/{i}"}) + "\n")
    omni.submit("pr", [str(src)], batch="b0", progress=False)
    table = omni.catalog.load_table(omni.state("pr").physical_table("base").identifier)
    paths = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
    rnd = random.Random(5)
    read = 0
    for path in paths:
        pf = pq.ParquetFile(path)
        meta, schema = pf.metadata, pf.schema_arrow
        leaves = list(PR.leaf_columns(meta))
        for group in range(meta.num_row_groups):
            rows = [rnd.randrange(meta.row_group(group).num_rows) for _ in range(3)]
            got = PR.read_rows(path, meta, schema, group, rows, leaves)
            for c in leaves:
                assert got[c].equals(_expected(pf, group, rows, c)), (path, c)
            read += 1
    assert read >= len(paths) > 1
