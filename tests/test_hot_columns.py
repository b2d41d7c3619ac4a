"""Hot columns in ClickHouse (embedded chdb, the real engine): choice, versioned sync, query routing.

chdb opens one folder per process, so every test here shares the session's store
(``hot_store``); names in it are scoped by each test's warehouse, as they would be for
several catalogs sharing one ClickHouse server.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

pytest.importorskip("chdb")

from catalog_ext.errors import SchemaConflictError  # noqa: E402
from omni_iceberg.api import Omni  # noqa: E402
from omni_iceberg.explore.planner import execute_local, plan_query  # noqa: E402
from omni_iceberg.features import feature  # noqa: E402


@pytest.fixture
def omni(omni_home, hot_dsn, monkeypatch):
    monkeypatch.setenv("OMNI_HOT", hot_dsn)
    return Omni(config=omni_home)


@feature(outputs={"hc_len": "long", "hc_lang": "string"}, inputs=["RawData.raw_data"], version="1")
def hc_stats(raw_data):
    return {"hc_len": len(raw_data), "hc_lang": "de" if "der" in raw_data else "en"}


@feature(outputs={"hc_len": "long", "hc_lang": "string"}, name="hc_stats", inputs=["RawData.raw_data"], version="2")
def hc_stats_v2(raw_data):
    return {"hc_len": 10 * len(raw_data), "hc_lang": "de" if "der" in raw_data else "en"}


@feature(outputs={"hc_words": "list<string>"}, inputs=["RawData.raw_data"])
def hc_words(raw_data):
    return raw_data.split()


AGG = "SELECT hc_lang, count(*) AS n, sum(hc_len) AS total FROM web GROUP BY hc_lang ORDER BY hc_lang"


def _submit(omni, tmp_path, batch, n, start=0):
    path = tmp_path / f"{batch}.jsonl"
    path.write_text("".join(json.dumps({"raw_data": f"{'der' if i % 3 == 0 else 'the'} text number {i} " * (1 + i % 4),
                                        "url": f"https://example.org/{i}"}) + "\n" for i in range(start, start + n)))
    return omni.submit("web", [str(path)], batch=batch)


def _iceberg(omni, sql, as_of=None):
    """The same query answered from Iceberg (the path the hot store must agree with)."""
    return execute_local(omni, plan_query(omni, sql, as_of))


def _table(omni, tmp_path):
    omni.create_table("web")
    _submit(omni, tmp_path, "a", 40)
    _submit(omni, tmp_path, "b", 30, start=100)
    omni.register_features("web", [hc_stats])
    omni.backfill("web", ["hc_stats"], isolation="inline")


def test_hot_columns_answer_aggregations_exactly_as_iceberg_does(omni, tmp_path):
    _table(omni, tmp_path)
    report = omni.accelerate("web", hot=["hc_len", "hc_lang"])
    assert report["plan"]["action"] == "create" and report["rows_loaded"] == 70
    plan = plan_query(omni, AGG)
    assert plan.hot.use, plan.hot.reason
    explained = omni.explain(AGG)
    assert "hot store: answers this query" in explained and "physical SQL (clickhouse" in explained
    got = omni.query(AGG)
    assert got.to_pylist() == _iceberg(omni, AGG).to_pylist()
    assert got.schema.field("n").type == pa.int64()  # ClickHouse's UInt64 count comes back as int64
    # batch pruning and filters run in ClickHouse too
    sql = ("SELECT _ai_append_name_, count(*) AS n, avg(hc_len) AS m FROM web WHERE hc_len > 60 "
           "AND _ai_append_name_ = 'b' GROUP BY _ai_append_name_")
    assert plan_query(omni, sql).hot.use
    assert omni.query(sql).to_pylist() == _iceberg(omni, sql).to_pylist()
    # a column that is not hot: Iceberg, and explain says which column
    cold = "SELECT count(*) AS n FROM web WHERE RawData.url LIKE '%1%'"
    assert not plan_query(omni, cold).hot.use and "RawData.url" in plan_query(omni, cold).hot.reason
    assert omni.query(cold).to_pylist() == _iceberg(omni, cold).to_pylist()
    # a function ClickHouse computes differently (bytes, not characters): Iceberg answers
    differs = "SELECT hc_lang, max(length(hc_lang)) AS l FROM web GROUP BY hc_lang"
    assert not plan_query(omni, differs).hot.use and "length" in plan_query(omni, differs).hot.reason
    runs = omni.query("SELECT engine FROM omni_sys.query_log WHERE logical_table = 'aidata.web'")
    assert "hot" in runs.column("engine").to_pylist()


def test_a_new_batch_makes_the_store_lag_until_a_sync_loads_only_that_batch(omni, tmp_path):
    _table(omni, tmp_path)
    omni.accelerate("web", hot=["hc_len", "hc_lang"])
    v_synced = omni.state("web").version
    _submit(omni, tmp_path, "c", 20, start=500)
    omni.backfill("web", ["hc_stats"], isolation="inline")
    plan = plan_query(omni, AGG)
    assert not plan.hot.use and "--sync" in plan.hot.reason
    assert omni.query(AGG).to_pylist() == _iceberg(omni, AGG).to_pylist()  # never the stale rows
    # an older version whose hot values the store still holds exactly is answered from it
    assert plan_query(omni, AGG, as_of=v_synced).hot.use
    assert omni.query(AGG, as_of=v_synced).to_pylist() == _iceberg(omni, AGG, as_of=v_synced).to_pylist()
    dry = omni.sync_hot("web", dry_run=True)
    assert dry["plan"]["load"] == ["c"] and dry["rows_loaded"] == 0
    report = omni.sync_hot("web")
    assert report["plan"]["action"] == "update" and report["plan"]["load"] == ["c"] and report["rows_loaded"] == 20
    assert plan_query(omni, AGG).hot.use
    assert omni.query(AGG).to_pylist() == _iceberg(omni, AGG).to_pylist()
    assert omni.sync_hot("web")["plan"]["action"] == "fresh"
    # a slower sync of the older version recording its state last (a race between two syncers):
    # readers of that version must not see batch c's partition, which is in the table now
    from omni_iceberg.hot.store import HotState, store_for

    store, old = store_for(omni), omni.state("web", as_of=v_synced)
    held = store.state("aidata.web")
    store.save_state(HotState(held.logical_table, held.table, held.columns,
                              {b: old.coverage_signature(list(held.columns), [b]) for b in ("a", "b")},
                              old.coverage_signature(list(held.columns)), v_synced))
    assert plan_query(omni, AGG, as_of=v_synced).hot.use
    assert omni.query(AGG, as_of=v_synced).to_pylist() == _iceberg(omni, AGG, as_of=v_synced).to_pylist()


def test_sync_on_commit_follows_new_feature_versions_and_dropped_batches(omni, tmp_path):
    _table(omni, tmp_path)
    omni.accelerate("web", hot=["hc_len", "hc_lang"], sync_on_commit=True)
    omni.register_features("web", [hc_stats_v2])  # hc_len now means 10x: every batch is recomputed
    omni.backfill("web", ["hc_stats"], isolation="inline")
    assert plan_query(omni, AGG).hot.use  # synced by the backfill's commit
    got = omni.query(AGG).to_pylist()
    assert got == _iceberg(omni, AGG).to_pylist() and sum(r["total"] for r in got) % 10 == 0
    omni.drop_batch("web", "a")
    assert plan_query(omni, AGG).hot.use
    assert omni.query(AGG).to_pylist() == _iceberg(omni, AGG).to_pylist()
    assert sum(r["n"] for r in omni.query(AGG).to_pylist()) == 30
    omni.accelerate("web", drop_hot=True)
    assert omni.state("web").hot is None and plan_query(omni, AGG).hot is None


def test_dropping_the_table_drops_its_hot_data(omni, tmp_path):
    from omni_iceberg.hot.store import store_for

    _table(omni, tmp_path)
    omni.accelerate("web", hot=["hc_len"])
    held = store_for(omni).state("aidata.web")
    assert omni.drop_table("web", purge=True)["hot_data_dropped"]
    assert store_for(omni).state("aidata.web") is None
    tables = store_for(omni).query("SELECT name FROM system.tables WHERE database = 'omni_hot'").column(0).to_pylist()
    assert held.table not in tables


def test_bad_hot_columns_are_named(omni, tmp_path):
    _table(omni, tmp_path)
    omni.register_features("web", [hc_words])
    with pytest.raises(SchemaConflictError, match="did you mean 'hc_len'"):
        omni.accelerate("web", hot=["hc_lenn"])
    with pytest.raises(SchemaConflictError, match="list<string>: hot columns are scalar"):
        omni.accelerate("web", hot=["hc_words"])
    with pytest.raises(SchemaConflictError, match="stage fields stay in Iceberg"):
        omni.accelerate("web", hot=["RawData.url"])
    assert omni.state("web").hot is None  # nothing was committed


def test_an_unreachable_store_makes_queries_fall_back_not_fail(omni, tmp_path, monkeypatch):
    _table(omni, tmp_path)
    omni.accelerate("web", hot=["hc_len", "hc_lang"])
    monkeypatch.setenv("OMNI_HOT", "http://127.0.0.1:9/")  # nothing listens there
    plan = plan_query(omni, AGG)
    assert not plan.hot.use and "unavailable" in plan.hot.reason
    assert omni.query(AGG).to_pylist() == _iceberg(omni, AGG).to_pylist()


def test_a_sync_whose_rows_disagree_with_the_table_leaves_the_store_unused(omni, tmp_path, monkeypatch):
    from omni_iceberg.hot.store import HotStore, HotStoreError

    _table(omni, tmp_path)
    omni.accelerate("web", hot=["hc_len", "hc_lang"])
    _submit(omni, tmp_path, "c", 5, start=900)
    omni.backfill("web", ["hc_stats"], isolation="inline")
    original = HotStore.insert

    def twice(self, name, data):  # a second sync loading the same batch at the same time
        original(self, name, data)
        original(self, name, data)

    monkeypatch.setattr(HotStore, "insert", twice)
    with pytest.raises(HotStoreError, match="batch 'c' holds 10 rows, the table 5"):
        omni.sync_hot("web")
    plan = plan_query(omni, AGG)
    assert not plan.hot.use and "a sync is under way or failed" in plan.hot.reason
    assert omni.query(AGG).to_pylist() == _iceberg(omni, AGG).to_pylist()
    monkeypatch.setattr(HotStore, "insert", original)
    assert omni.sync_hot("web")["plan"]["load"] == ["c"]  # the next sync redoes it
    assert plan_query(omni, AGG).hot.use and omni.query(AGG).to_pylist() == _iceberg(omni, AGG).to_pylist()


def test_cli_hot_columns(omni, tmp_path, capsys):
    from omni_iceberg.cli import main

    _table(omni, tmp_path)
    home = ["--home", str(omni.config.home)]
    assert main(home + ["accelerate", "web", "--hot", "hc_len,hc_lang", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["action"] == "create" and out["rows_loaded"] == 70
    assert main(home + ["sql", AGG, "--explain"]) == 0
    assert "hot store: answers this query" in capsys.readouterr().out
    assert main(home + ["accelerate", "web", "--sync", "--dry-run"]) == 0
    assert "nothing to load" in capsys.readouterr().out
    assert main(home + ["accelerate", "web", "--hot", "nope"]) != 0
    assert "no column 'nope'" in capsys.readouterr().err
