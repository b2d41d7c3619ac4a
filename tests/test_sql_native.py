"""``omni sql`` lets DuckDB read a scan's data files itself (#37 item 1): same answers as the
Arrow path, and a database that can read exactly the query's files and write none."""

import hashlib
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from catalog_ext.iceberg_io import FILE_SCANS, FileScan
from omni_iceberg.api import Omni
from omni_iceberg.explore import planner
from omni_iceberg.explore.planner import plan_query, scan_source
from omni_iceberg.features import feature
from omni_iceberg.read.sandbox import locked_duckdb_over_files

ROWS = 3_000


@feature(outputs={"n_len": "long"}, inputs=["RawData.raw_data"], name="n_len", form="batch")
def n_len(raw_data):
    return pc.utf8_length(raw_data).cast(pa.int64())


@feature(outputs={"n_words": "long"}, inputs=["RawData.raw_data"], name="n_words", form="batch")
def n_words(raw_data):
    return pc.count_substring(raw_data, " ").cast(pa.int64())


def _text(i: int) -> str:
    return f"record {i} " + ("alpha beta" if i % 3 == 0 else "gamma delta") + " tail" * (i % 5)


@pytest.fixture(scope="module")
def omni(tmp_path_factory):
    home = tmp_path_factory.mktemp("native")
    o = Omni(home=home / "home")
    o.create_table("m")
    for batch, rows in (("b1", range(ROWS)), ("b2", range(ROWS, ROWS + ROWS // 2))):
        src = home / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": _text(i), "url": f"https://x.org/{i}"}) + "\n" for i in rows))
        o.submit("m", [str(src)], batch=batch)
    o.register_features("m", [n_len, n_words])
    o.backfill("m", ["n_len", "n_words"], isolation="inline", progress=False)
    return o


QUERIES = [
    "SELECT count(*) AS n, avg(length(RawData.raw_data)) AS a FROM m WHERE RawData.raw_data LIKE '%alpha beta%'",
    "SELECT n_words, count(*) AS n, sum(n_len) AS s FROM m WHERE n_len > 20 GROUP BY n_words ORDER BY n_words",
    "SELECT _ai_append_name_ AS b, count(*) AS n FROM m WHERE _ai_append_name_ = 'b2' GROUP BY b",
    "SELECT count(*) AS n FROM m WHERE _ai_append_name_ IN ('b1', 'nope') AND n_words = 3",
    "SELECT RawData.url AS u, n_len FROM m WHERE _ai_unique_id_ > 'c' ORDER BY u LIMIT 7",
    "SELECT count(*) AS n FROM m a JOIN m b ON a._ai_unique_id_ = b._ai_unique_id_ WHERE a.n_len < b.n_len + 1",
    "SELECT count(*) AS n, count(DISTINCT RawData.url) AS u FROM m",
]


def _answers(omni, floor: int) -> list:
    old = planner.NATIVE_MIN_BYTES
    planner.NATIVE_MIN_BYTES = floor
    try:
        return [omni.query(sql).to_pylist() for sql in QUERIES]
    finally:
        planner.NATIVE_MIN_BYTES = old


def test_native_reads_give_the_arrow_paths_answers(omni):
    plan = plan_query(omni, QUERIES[1])
    sources = [scan_source(omni, plan, s, native=True) for s in plan.scans]
    assert len(sources) == 2 and all(isinstance(s, FileScan) for s in sources)
    old = planner.NATIVE_MIN_BYTES
    planner.NATIVE_MIN_BYTES = 0
    try:
        con = planner._connect(plan, planner.scan_all(omni, plan, native=True), plan.limits)
    finally:
        planner.NATIVE_MIN_BYTES = old
    try:  # both scans are views over read_parquet of their files, and only those files may be read
        views = con.sql("SELECT view_name, sql FROM duckdb_views() WHERE temporary AND NOT internal").fetchall()
        assert sorted(v for v, _ in views) == sorted(s.local_name for s in plan.scans)
        assert all("read_parquet" in sql for _, sql in views)
        allowed = con.sql("SELECT current_setting('allowed_paths')").fetchall()[0][0]
        assert len(allowed) == sum(len(s.paths) for s in sources) and all(u.startswith("omnifile://") for u in allowed)
    finally:
        con.close()
    native, arrow = _answers(omni, 0), _answers(omni, 1 << 62)
    assert native == arrow
    assert native[0][0]["n"] == ROWS // 3 + (ROWS // 2) // 3  # ids 0, 3, ... in both batches
    assert native[2] == [{"b": "b2", "n": ROWS // 2}]
    assert native[6] == [{"n": ROWS + ROWS // 2, "u": ROWS + ROWS // 2}]


def test_a_native_scan_reads_only_its_batches(omni):
    # the batch restriction is the view's own, not only the query's WHERE
    plan = plan_query(omni, "SELECT count(*) AS n FROM m WHERE _ai_append_name_ = 'b2'")
    sources = planner.scan_all(omni, plan, native=True)
    con = planner._connect(plan, sources, plan.limits)
    try:
        assert con.sql(f'SELECT count(*) FROM "{plan.scans[0].local_name}"').fetchall() == [(ROWS // 2,)]
    finally:
        con.close()


def test_a_renamed_field_or_a_missing_column_is_not_read_natively(omni, tmp_path):
    other = Omni(home=tmp_path / "other")
    other.create_table("r")
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps({"raw_data": "x", "url": "u"}) + "\n")
    other.submit("r", [str(src)], batch="b1")
    plan = plan_query(other, "SELECT RawData.raw_data FROM r")
    first = scan_source(other, plan, plan.scans[0], native=True)
    hits = FILE_SCANS.hits
    again = scan_source(other, plan, plan.scans[0], native=True)  # the same snapshot: the checks are kept
    assert isinstance(again, FileScan) and again.paths == first.paths and FILE_SCANS.hits == hits + 1
    base = other.context.catalog.load_table(other.context.state("r").base_table.identifier)
    with base.update_schema() as update:  # a new schema: what was kept for the snapshot no longer applies
        update.rename_column(("RawData", "url"), "link")
    plan = plan_query(other, "SELECT RawData.raw_data FROM r")
    assert not isinstance(scan_source(other, plan, plan.scans[0], native=True), FileScan)
    # a field added after the first batch: the old file lacks it (the Arrow read gives nulls)
    src.write_text(json.dumps({"raw_data": "y", "link": "v", "lang": "en"}) + "\n")
    other.submit("r", [str(src)], batch="b2")
    sql = "SELECT RawData.lang AS l FROM r ORDER BY l NULLS FIRST"
    plan = plan_query(other, sql)
    assert not isinstance(scan_source(other, plan, plan.scans[0], native=True), FileScan)
    old = planner.NATIVE_MIN_BYTES
    planner.NATIVE_MIN_BYTES = 0
    try:
        assert other.query(sql).to_pylist() == [{"l": None}, {"l": "en"}]
    finally:
        planner.NATIVE_MIN_BYTES = old


@pytest.fixture()
def files(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), a)
    pq.write_table(pa.table({"x": [10]}), b)
    return str(a), str(b)


def _digest(path: str) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_file_database_reads_its_files_only_and_writes_nothing(files, tmp_path):
    a, b = files
    before = _digest(a)
    con, urls = locked_duckdb_over_files([a], memory_limit_mb=64, spill_dir=str(tmp_path / "spill"))
    url = urls[a]
    assert url.startswith("omnifile://") and a not in url
    assert con.sql(f"SELECT sum(x) FROM read_parquet(['{url}'])").fetchall() == [(6,)]
    folder = url.rsplit("/", 1)[0]
    refused = [
        f"SELECT * FROM read_parquet('{b}')",  # another file
        f"SELECT * FROM read_parquet('{a}')",  # its own file by its path
        f"SELECT * FROM read_parquet('{folder}/1.parquet')",  # a name never handed out
        f"SELECT * FROM read_parquet('{folder}/*.parquet')",
        f"SELECT * FROM glob('{folder}/*')",
        "SELECT * FROM read_csv('/etc/passwd')",
        f"COPY (SELECT 1 AS x) TO '{url}' (FORMAT parquet, USE_TMP_FILE false)",
        f"COPY (SELECT 1 AS x) TO '{url}' (FORMAT csv, USE_TMP_FILE false)",
        f"COPY (SELECT 1 AS x) TO '{url}'",
        f"COPY (SELECT 1 AS x) TO '{a}' (USE_TMP_FILE false)",
        f"COPY (SELECT 1 AS x) TO '{folder}/2.parquet'",
        f"COPY (SELECT 1 AS x) TO '{tmp_path / 'c.csv'}'",
        f"SET allowed_paths = ['{b}']",
        "SET enable_external_access = true",
        "SET disabled_filesystems = ''",
    ]
    for sql in refused:
        with pytest.raises(Exception):
            con.sql(sql).fetchall()
    con.close()
    assert _digest(a) == before and sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == \
        ["a.parquet", "b.parquet"]


def test_a_file_database_is_reused_for_the_same_files_only(files):
    a, b = files
    first, urls = locked_duckdb_over_files([a])
    again, same = locked_duckdb_over_files([a])
    other, urls_b = locked_duckdb_over_files([b])
    assert same == urls and set(urls_b) == {b}
    with pytest.raises(Exception):
        other.sql(f"SELECT * FROM read_parquet(['{urls[a]}'])").fetchall()
    # a view is private to the cursor (the query) that made it
    first.execute(f"CREATE TEMPORARY VIEW v AS SELECT * FROM read_parquet(['{urls[a]}'])")
    assert first.sql("SELECT count(*) FROM v").fetchall() == [(3,)]
    with pytest.raises(Exception):
        again.sql("SELECT count(*) FROM v").fetchall()
    for con in (first, again, other):
        con.close()


def test_threads_reading_one_file_each_read_their_own_bytes(tmp_path):
    # DuckDB's Parquet reader shares a file's handle between threads and reads it by seek +
    # read: with a shared position a thread read another's offset (TProtocolException, wrong
    # sums: 2 of 5 such runs with an ordinary file object); every run here must be exact
    import duckdb
    import numpy as np

    from omni_iceberg.read import sandbox

    n = 2_000_000
    data = pa.table({"x": np.random.default_rng(1).integers(0, 1 << 40, n), "s": [f"v{i}" for i in range(n)]})
    path = tmp_path / "many_groups.parquet"
    pq.write_table(data, path, row_group_size=20_000)
    expect = [(pc.sum(data["x"]).as_py(), pc.sum(pc.utf8_length(data["s"])).as_py())]
    for _ in range(4):
        con = duckdb.connect(config={"threads": 8})
        con.register_filesystem(sandbox._read_only_files({"t/0.parquet": str(path)}))
        try:
            assert con.sql(f"SELECT sum(x)::BIGINT, sum(length(s))::BIGINT FROM "
                           f"read_parquet('{sandbox.FILES_PROTOCOL}://t/0.parquet')").fetchall() == expect
        finally:
            con.close()
