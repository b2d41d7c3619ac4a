"""Every engine's queries feed the query log (issue #39 item 1).

Spark SQL through omni's real session extension (its query-execution listener) and Trino
through omni's real event-listener plugin append events to the query-log spool; a flush
turns them into ``omni_sys.query_log`` rows with the logical columns read and the engine
(``query_engine``). A spool that cannot be written never fails the engine's query.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_ext import system_tables
from catalog_ext.log_spool import spool_for
from omni_iceberg.api import Omni
from omni_iceberg.demo.wide import feature_name, wide_features


def _log(omni: Omni, table: str) -> list[dict]:
    omni.flush_query_log()
    rows = system_tables.read_rows(omni.catalog, system_tables.QUERY_LOG, f"logical_table == 'aidata.{table}'")
    return sorted(rows.to_pylist(), key=lambda r: r["at"])


def _family(omni: Omni, name: str, tmp: Path, width: int = 3) -> None:
    omni.create_table(name)
    src = tmp / f"{name}.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"<p>row {i}</p>"}) + "\n" for i in range(40)))
    omni.submit(name, [str(src)], batch="a", progress=False)
    features = wide_features(width)
    omni.register_features(name, features)
    omni.backfill(name, [f.name for f in features], isolation="inline", progress=False)


def _wait_for(path: Path, lines: int) -> None:
    """The engines record after the query returns (on their own threads): wait for the lines."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= lines:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path}: fewer than {lines} event line(s) arrived")


# ---- the spool and the table, without an engine ------------------------------------------


@pytest.fixture
def omni(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_QUERY_LOG_FLUSH_ROWS", "100")
    monkeypatch.setenv("OMNI_QUERY_LOG_FLUSH_S", "3600")
    o = Omni(home=tmp_path / "home")
    _family(o, "eq", tmp_path, width=2)
    return o


def test_a_query_log_created_before_the_engine_column_gains_it(tmp_path, monkeypatch):
    """An existing catalog's query_log has no query_engine: it is added (optional), old rows read NULL."""
    monkeypatch.setenv("OMNI_QUERY_LOG_FLUSH_ROWS", "1")
    o = Omni(home=tmp_path / "home")
    old_schema = pa.schema([f for f in system_tables.SCHEMAS[system_tables.QUERY_LOG] if f.name != "query_engine"])
    o.catalog.create_namespace("omni_sys")
    old = o.catalog.create_table("omni_sys.query_log", schema=old_schema)
    old.append(pa.Table.from_pylist([{
        "query_id": "old", "kind": "sql", "logical_table": "aidata.web", "logical_version": 1, "columns": "[]",
        "filter_columns": "[]", "batches": "null", "physical_tables": "[]", "engine": "local", "rows": 0,
        "latency_ms": 1, "sql": "SELECT 1", "at": pa.scalar(0, pa.timestamp("us", tz="UTC")).as_py()}], schema=old_schema))
    o.create_table("web")
    docs = tmp_path / "d.jsonl"
    docs.write_text(json.dumps({"raw_data": "<p>x</p>"}) + "\n")
    o.submit("web", [str(docs)], batch="b")
    o.query("SELECT count(*) AS n FROM web")
    rows = {r["query_id"]: r for r in _log(o, "web")}
    assert rows["old"]["query_engine"] is None
    assert [r["query_engine"] for q, r in rows.items() if q != "old"] == ["omni"]
    from governance.coread import read_of

    state = o.store.load("aidata", "web")
    assert read_of(state, rows["old"])["query_engine"] == "omni"  # NULL is a read through omni


def _event(**over) -> dict:
    ev = {"engine": "spark", "query_id": "q1", "namespace": "aidata", "table": "eq", "logical_version": None,
          "columns": [], "filter_columns": [], "batches": None, "physical_tables": [], "rows": 3,
          "latency_ms": 7, "sql": "SELECT 1", "at": "2030-01-01T00:00:00.000000+00:00"}
    ev.update(over)
    return ev


def test_engine_events_become_rows_with_logical_columns(omni):
    state = omni.store.load("aidata", "eq")
    f0, f1 = feature_name(0), feature_name(1)
    f1_home = next(pc for pc in state.physical_columns_of(f1))
    f1_table = state.physical_table(f1_home.table).identifier.split(".")[1]
    spool = spool_for(omni.config, system_tables.QUERY_LOG)
    spool.dir.mkdir(parents=True, exist_ok=True)
    lines = [
        _event(query_id="s", columns=[f0, "RawData"], filter_columns=["_ai_append_name_"], batches=["a"],
               logical_version=state.version, sql="SELECT w000 FROM eq WHERE password='hunter2'"),
        _event(engine="trino", query_id="t", columns=[f1.upper(), "rawdata"]),  # Trino folds names
        _event(engine="trino", query_id="p", table=f1_table, columns=[f1_home.name, "_ai_unique_id_"]),
        _event(engine="trino", query_id="x", table="not_omni", columns=["a"]),  # no omni table: no row
    ]
    spool.events_path.write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"torn": \n')
    rows = {r["query_id"]: r for r in _log(omni, "eq")}
    assert set(rows) == {"s", "t", "p"}
    s, t, p = rows["s"], rows["t"], rows["p"]
    assert (s["query_engine"], s["engine"], json.loads(s["columns"]), json.loads(s["filter_columns"]),
            json.loads(s["batches"]), s["logical_version"], s["rows"]) == \
        ("spark", "spark", [f0, "RawData"], ["_ai_append_name_"], ["a"], state.version, 3)
    assert "hunter2" not in s["sql"]
    assert (t["query_engine"], json.loads(t["columns"]), json.loads(t["batches"])) == ("trino", [f1, "RawData"], None)
    assert t["logical_version"] == state.version  # the version current at the event's time
    assert (p["logical_table"], json.loads(p["columns"])) == ("aidata.eq", [f1, "_ai_unique_id_"])
    assert spool.pending() == 0 and not spool.events_path.exists()
    assert (spool.dir / "query_log.rejected.jsonl").read_bytes() == b'{"torn": \n'
    # the advisor and the co-read planner count reads by engine
    advice = omni.advise("eq")
    assert advice.reads_by_engine == {"spark": 1, "trino": 2}
    assert "(spark 1, trino 2)" in advice.describe()


def test_a_converter_that_died_after_writing_its_rows_adds_them_once(omni):
    spool = spool_for(omni.config, system_tables.QUERY_LOG)
    spool.dir.mkdir(parents=True, exist_ok=True)
    token = "0123456789abcdef"
    (spool.dir / f"query_log.events.{token}.converting").write_text(json.dumps(_event(query_id="c1")) + "\n")
    # it had written the rows (as the flush file of its token) and died before deleting the events
    (spool.dir / f"query_log.{token}.flushing").write_text(json.dumps({
        **{k: v for k, v in _event().items() if k in ("query_id", "rows", "latency_ms", "sql", "at")},
        "query_id": "c1", "kind": "sql", "logical_table": "aidata.eq", "logical_version": 1, "columns": "[]",
        "filter_columns": "[]", "batches": "null", "physical_tables": "[]", "engine": "spark",
        "query_engine": "spark"}) + "\n")
    assert [r["query_id"] for r in _log(omni, "eq")] == ["c1"]
    assert _log(omni, "eq")[0]["query_id"] == "c1" and spool.pending() == 0


# ---- real Spark ---------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_sql_on_the_view_is_logged_through_the_extension(spark, tmp_path):
    from spark_udfs.extension import LISTENER_CLASS

    assert LISTENER_CLASS in spark.session.conf.get("spark.sql.queryExecutionListeners")
    omni = Omni(config=spark.config)
    _family(omni, "eql_spark", tmp_path)
    state = omni.store.load("aidata", "eql_spark")
    f0, f2 = feature_name(0), feature_name(2)
    spool = spool_for(spark.config, system_tables.QUERY_LOG)
    omni.flush_query_log()
    got = spark.session.sql(f"SELECT {f0}, RawData.raw_data FROM omni.aidata.eql_spark "
                            f"WHERE _ai_append_name_ = 'a' AND {f2} >= 0").collect()
    assert len(got) == 40
    _wait_for(spool.events_path, 1)
    rows = [r for r in _log(omni, "eql_spark") if r["query_engine"] == "spark"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["engine"], row["kind"], row["logical_version"], row["rows"]) == ("spark", "sql", state.version, 40)
    assert sorted(json.loads(row["columns"])) == sorted([f0, "RawData", "_ai_append_name_", f2])
    assert sorted(json.loads(row["filter_columns"])) == sorted(["_ai_append_name_", f2])
    assert json.loads(row["batches"]) == ["a"]
    assert "'***'" in row["sql"] and "'a'" not in row["sql"]  # literals never reach the spool

    # a spool that cannot be written (its events file is a folder here, which fails even as root)
    jvm = spark.session.sparkContext._jvm
    failed = jvm.omni.spark.QueryLogListener.failed()
    spool.events_path.mkdir()
    try:
        assert spark.session.sql(f"SELECT count({f0}) FROM omni.aidata.eql_spark").collect()[0][0] == 40
        deadline = time.monotonic() + 120
        while jvm.omni.spark.QueryLogListener.failed() == failed and time.monotonic() < deadline:
            time.sleep(0.2)
        assert jvm.omni.spark.QueryLogListener.failed() == failed + 1  # counted, the query unharmed
    finally:
        shutil.rmtree(spool.events_path)


# ---- real Trino ---------------------------------------------------------------------------


def test_trino_queries_on_the_view_are_logged_through_the_listener(trino, tmp_path):
    omni = Omni(config=trino.config)
    _family(omni, "eql_trino", tmp_path)
    state = omni.store.load("aidata", "eql_trino")
    f1 = feature_name(1)
    spool = spool_for(trino.config, system_tables.QUERY_LOG)
    omni.flush_query_log()
    got = trino.query(f'SELECT {f1}, "RawData".raw_data FROM omni.aidata.eql_trino WHERE _ai_append_name_ = \'a\'')
    assert len(got) == 40
    _wait_for(spool.events_path, 1)
    rows = [r for r in _log(omni, "eql_trino") if r["query_engine"] == "trino"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["engine"], row["logical_version"], row["rows"]) == ("trino", state.version, 40)
    assert sorted(json.loads(row["columns"])) == sorted([f1, "RawData", "_ai_append_name_"])
    assert json.loads(row["physical_tables"])  # the tables the query scanned
    assert "'a'" not in row["sql"]

    # an unwritable spool: Trino still answers
    spool.events_path.mkdir()
    try:
        assert trino.query(f"SELECT count({f1}) FROM omni.aidata.eql_trino") == [(40,)]
        deadline = time.monotonic() + 120  # Trino reports a completed query on its own thread
        while "not recorded in omni's query log" not in trino.log_tail(200_000) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "not recorded in omni's query log" in trino.log_tail(200_000)
    finally:
        shutil.rmtree(spool.events_path)
