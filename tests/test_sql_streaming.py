"""``omni sql`` streams (#37 item 1): scans reach DuckDB as lazily read datasets, DuckDB spills
past ``OMNI_MEMORY_LIMIT_MB`` under the home, answers are printed as they are computed."""

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from catalog_ext.iceberg_io import LeafScan
from omni_iceberg.api import Omni
from omni_iceberg.cli import render
from omni_iceberg.explore.planner import plan_query, scan_arrow, scan_source
from omni_iceberg.read.guard import QueryError
from omni_iceberg.read.sandbox import locked_duckdb
from omni_iceberg.ui.formatting import format_arrow

ROOT = Path(__file__).resolve().parents[1]
ROWS = 20_000  # more than two result batches (planner.RESULT_BATCH_ROWS)


def _words(i: int) -> str:
    return f"record {i} " + ("alpha beta" if i % 3 == 0 else "gamma delta") + f" tail {i % 7}"


@pytest.fixture(scope="module")
def omni(tmp_path_factory):
    home = tmp_path_factory.mktemp("stream")
    src = home / "short.jsonl"
    src.write_text("".join(json.dumps({"text": _words(i)}) + "\n" for i in range(ROWS)))
    o = Omni(home=home / "home")
    o.create_table("m")
    o.submit("m", [str(src)], batch="b1", field_map={"text": "raw_data"})
    return o


def test_a_table_scan_reaches_duckdb_as_a_dataset_with_its_filter(omni):
    plan = plan_query(omni, "SELECT count(*) FROM m WHERE _ai_append_name_ = 'b1' AND _ai_unique_id_ > 'f'")
    source = scan_source(omni, plan, plan.scans[0])
    assert isinstance(source, ds.Dataset)  # read lazily, not a table held whole
    whole = scan_arrow(omni, plan, plan.scans[0])
    streamed = source.to_table(columns=whole.column_names)
    assert sorted(streamed.column("_ai_unique_id_").to_pylist()) == sorted(whole.column("_ai_unique_id_").to_pylist())
    assert 0 < streamed.num_rows < ROWS and min(streamed.column("_ai_unique_id_").to_pylist()) > "f"


def test_a_struct_that_only_gained_fields_streams_and_a_renamed_one_does_not(omni, tmp_path):
    # ingest adds RawData's fields to the table's first schema: RawData only ever grew
    plan = plan_query(omni, "SELECT RawData.raw_data FROM m WHERE RawData.raw_data LIKE '%alpha%'")
    base = omni.context.catalog.load_table(omni.context.state("m").base_table.identifier)
    assert len(base.metadata.schemas) > 1  # the struct grew: not "stable" for a whole-table read by name
    source = scan_source(omni, plan, plan.scans[0])
    # only the needed leaf is read (an Arrow dataset would decode RawData's other fields too)
    assert isinstance(source, LeafScan)
    streamed = source.to_table()
    assert streamed.schema.field("RawData").type == pa.struct([pa.field("raw_data", pa.large_string())]) or \
        streamed.schema.field("RawData").type == pa.struct([pa.field("raw_data", pa.string())])
    whole = scan_arrow(omni, plan, plan.scans[0])
    assert sorted(streamed.column("RawData").combine_chunks().field("raw_data").to_pylist()) == \
        sorted(whole.column("RawData").combine_chunks().field("raw_data").to_pylist())
    assert streamed.num_rows == ROWS
    other = Omni(home=tmp_path / "renamed")
    other.create_table("r")
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps({"raw_data": "x", "url": "u"}) + "\n")
    other.submit("r", [str(src)], batch="b1")
    base = other.context.catalog.load_table(other.context.state("r").base_table.identifier)
    with base.update_schema() as update:
        update.rename_column(("RawData", "url"), "link")
    plan = plan_query(other, "SELECT RawData.raw_data FROM r")
    assert isinstance(scan_source(other, plan, plan.scans[0]), pa.Table)  # read by field id, whole


def test_a_struct_leaf_read_keeps_the_pushed_filter_and_batch(omni):
    # the leaf read prunes row groups by the filter's statistics and applies it to every batch
    sql = ("SELECT count(*) AS n, sum(length(RawData.raw_data)) AS c FROM m "
           "WHERE _ai_append_name_ = 'b1' AND _ai_unique_id_ > 'f'")
    plan = plan_query(omni, sql)
    source = scan_source(omni, plan, plan.scans[0])
    assert isinstance(source, LeafScan) and source.arrow_filter is not None
    whole = scan_arrow(omni, plan, plan.scans[0])
    ids = [i for i in whole.column("_ai_unique_id_").to_pylist() if i > "f"]
    assert sorted(source.to_table().column("_ai_unique_id_").to_pylist()) == sorted(ids)
    assert 0 < len(ids) < ROWS
    texts = {row["_ai_unique_id_"]: row["RawData"]["raw_data"] for row in whole.to_pylist()}
    assert omni.query(sql).to_pylist() == [{"n": len(ids), "c": sum(len(texts[i]) for i in ids)}]
    assert omni.query("SELECT count(*) AS n FROM m WHERE _ai_append_name_ = 'b2' "
                      "AND RawData.raw_data LIKE '%alpha%'").to_pylist() == [{"n": 0}]


def test_a_name_scanned_twice_sees_every_row_both_times(omni):
    # a record batch reader would be empty the second time: the dataset starts a fresh read per scan
    assert omni.query("WITH x AS (SELECT _ai_unique_id_ AS i FROM m) "
                      "SELECT (SELECT count(*) FROM x) AS a, (SELECT count(*) FROM x) AS b").to_pylist() == \
        [{"a": ROWS, "b": ROWS}]
    assert omni.query("SELECT count(*) AS n FROM m a JOIN m b ON a._ai_unique_id_ = b._ai_unique_id_ "
                      "WHERE a.RawData.raw_data LIKE '%alpha beta%'").to_pylist() == [{"n": len(range(0, ROWS, 3))}]


def test_the_filtered_aggregate_is_right(omni):
    texts = [_words(i) for i in range(ROWS) if "alpha beta" in _words(i)]
    got = omni.query("SELECT count(*) AS n, avg(length(RawData.raw_data)) AS a FROM m "
                     "WHERE RawData.raw_data LIKE '%alpha beta%'").to_pylist()
    assert got[0]["n"] == len(texts) and got[0]["a"] == pytest.approx(sum(map(len, texts)) / len(texts))


def test_a_streamed_answer_comes_in_batches_and_is_logged_at_its_end(omni):
    reader = omni.query("SELECT RawData.raw_data AS t FROM m", stream=True)
    assert isinstance(reader, pa.RecordBatchReader)
    sizes = [b.num_rows for b in reader]
    assert len(sizes) >= 3 and sum(sizes) == ROWS
    omni.flush_query_log()
    logged = omni.query("SELECT rows FROM omni_sys.query_log WHERE kind = 'sql' ORDER BY at DESC LIMIT 1")
    assert logged.column("rows").to_pylist() == [ROWS]


def test_explain_shows_the_memory_limit_and_the_spill_folder(omni, monkeypatch):
    monkeypatch.setenv("OMNI_MEMORY_LIMIT_MB", "256")
    text = omni.explain("SELECT count(*) FROM m")
    spill = str(omni.config.home / "spill")
    assert f"local engine (duckdb): memory limit 256 MiB (OMNI_MEMORY_LIMIT_MB), spills to {spill}" in text
    assert omni.explain_dict("SELECT count(*) FROM m")["local_engine"] == \
        {"engine": "duckdb", "memory_limit_mb": 256.0, "spill_dir": spill}


def test_the_database_follows_a_changed_limit(tmp_path):
    for mib, shown in ((100, "100.0 MiB"), (200, "200.0 MiB"), (100, "100.0 MiB")):
        con = locked_duckdb(memory_limit_mb=mib, spill_dir=str(tmp_path))
        assert con.sql("SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchall() == \
            [(shown, str(tmp_path))]
        con.close()


def test_a_sort_larger_than_the_limit_spills_under_the_sandbox(tmp_path):
    n = 1_000_000  # ~45 MB of strings, sorted under a 64 MiB limit with external access off
    data = pa.table({"k": [f"key-{(i * 7919) % n:09d}-padding-padding-padding" for i in range(n)]})
    spill = tmp_path / "spill"
    con = locked_duckdb({"t": data}, memory_limit_mb=64, spill_dir=str(spill))
    reader = con.sql("SELECT k FROM t ORDER BY k").to_arrow_reader(1000)
    first = reader.read_next_batch()
    assert first.column(0)[0].as_py() == "key-000000000-padding-padding-padding"
    assert any(name.endswith(".tmp") for name in os.listdir(spill))  # the sorted runs wait on disk
    assert first.num_rows + sum(b.num_rows for b in reader) == n
    with pytest.raises(Exception, match="file system operations are disabled"):
        con.sql("COPY t TO '/tmp/omni-spill-escape.csv'")
    con.close()


def test_a_query_that_cannot_fit_is_one_line_naming_the_limit(omni, monkeypatch):
    monkeypatch.setenv("OMNI_MEMORY_LIMIT_MB", "64")
    sql = "SELECT length(string_agg(repeat(RawData.raw_data, 100000), ',')) AS n FROM m"
    with pytest.raises(QueryError, match=r"^query failed: out of memory within OMNI_MEMORY_LIMIT_MB=64 MiB "
                                         r"\(spilling to .*spill\); raise the setting or narrow the query"):
        omni.query(sql)
    proc = subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--home", str(omni.config.home), "sql", sql],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMNI_MEMORY_LIMIT_MB": "64"})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "OMNI_MEMORY_LIMIT_MB=64 MiB" in proc.stderr
    assert "Traceback" not in proc.stderr


SAMPLE = pa.table({
    "n": pa.array([1, None, 30000], pa.int64()),
    "s": ["short", "a long cell " * 10, "two\nlines"],
    "d": pa.array([Decimal("6"), Decimal("12"), None], pa.decimal128(38, 0)),
    "f": [0.5, None, 1e-9],
})


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
@pytest.mark.parametrize("rows", [0, 1, 3])
def test_streamed_output_is_byte_identical_to_the_whole_rendering(fmt, rows, capsys):
    data = SAMPLE.slice(0, rows)
    print(format_arrow(data, fmt))
    whole = capsys.readouterr().out
    assert render.sql_rows(pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=1)),
                           fmt, sys.stdout) == rows
    assert capsys.readouterr().out == whole


def test_a_long_table_keeps_the_widths_of_its_first_window(capsys):
    data = pa.table({"x": ["a", "bb", "cccc", "d"]})
    render.sql_rows(data.to_reader(max_chunksize=1), "table", sys.stdout, window=2)
    assert capsys.readouterr().out == "x \n--\na \nbb\ncccc\nd \n(4 rows)\n"


def test_the_cli_prints_the_rows_it_streams(omni):
    proc = subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--home", str(omni.config.home), "sql",
                           "SELECT RawData.raw_data AS t FROM m ORDER BY t", "--format", "csv"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[0] == "t" and len(lines) == ROWS + 2 and lines[1] == sorted(_words(i) for i in range(ROWS))[0]
