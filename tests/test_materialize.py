"""Materialized wide tables (governance/materialize.py): one pre-joined copy that every reader
prefers while it is fresh, and nobody reads once it is stale.

Embedded SQLite catalog, real Parquet files; tests/test_view_pruning.py shows Spark and
Trino reading the copy through the view.
"""

from __future__ import annotations

import json

import pytest

from catalog_ext.view_sql import render_view_sql
from governance.materialize import MaterializeError, materialize, plan_materialization, refresh_materializations
from omni_iceberg.api import Omni
from omni_iceberg.cli import main as cli_main
from tests import feature_udfs as U
from tests.pages import pages_jsonl as _jsonl

NAME = "web"
QUERY = ("SELECT _ai_append_name_ AS b, count(*) AS n, sum(t_len) AS words, sum(t_digits) AS digits "
         "FROM web GROUP BY 1 ORDER BY 1")


@pytest.fixture
def omni(omni_home, tmp_path):
    o = Omni(config=omni_home)
    o.create_table(NAME)
    for tag, n in (("a", 5), ("b", 7)):
        o.submit(NAME, [str(_jsonl(tmp_path, tag, n))], batch=tag, progress=False)
    o.register_features(NAME, [U.t_parse, U.t_len, U.t_digits])
    o.backfill(NAME, ["t_len", "t_digits"], isolation="inline", progress=False)
    return o


def _plan(omni: Omni, sql: str):
    from omni_iceberg.explore.planner import plan_query

    return plan_query(omni, sql, None)


def test_a_fresh_copy_replaces_the_join_for_every_reader(omni):
    before = omni.query(QUERY).to_pylist()
    plan = plan_materialization(omni.store, NAME, ["t_len", "t_digits"])
    assert plan.action == "build" and plan.rows == 12 and "aidata.web__m_" in plan.describe()
    report = materialize(omni.store, NAME, ["t_len", "t_digits"])
    state = omni.state(NAME)
    key = plan.table_key
    assert report["rows_written"] == 12 and state.fresh_materialized_tables() == {key}
    assert state.physical_columns_of("t_len")[0].table == key
    assert omni.query(QUERY).to_pylist() == before  # same answer, from the copy
    assert {s.table.key for s in _plan(omni, QUERY).scans} <= {key, state.base_table.key}
    for dialect in ("spark", "trino"):  # the engines' view reads the copy, not the two feature tables
        sql = render_view_sql(state, dialect)
        assert "__m_" in sql and "f_t_len" not in sql and "f_t_digits" not in sql
    assert omni.read(NAME, columns=["t_len"]).num_rows == 12
    assert plan_materialization(omni.store, NAME, ["t_len", "t_digits"]).action == "fresh"
    # the id index knows the copy's rows: point lookups read them from it
    assert omni.verify_index(NAME).ok
    some = omni.read(NAME, columns=["_ai_unique_id_", "t_len"]).to_pylist()[:3]
    got = omni.get(NAME, [r["_ai_unique_id_"] for r in some], columns=["t_len"]).to_pylist()
    assert [g["t_len"] for g in got] == [r["t_len"] for r in some]
    assert omni.accelerate(NAME, refresh=True) == []  # every copy is fresh: nothing to do
    with pytest.raises(ValueError, match="exactly one"):
        omni.accelerate(NAME)


def test_a_new_batch_makes_it_stale_and_a_refresh_appends_only_that_batch(omni, tmp_path):
    materialize(omni.store, NAME, ["t_len", "t_digits"])
    omni.submit(NAME, [str(_jsonl(tmp_path, "c", 4))], batch="c", progress=False)
    omni.backfill(NAME, ["t_len", "t_digits"], isolation="inline", progress=False)
    state = omni.state(NAME)
    assert not state.fresh_materialized_tables()  # stale: nobody reads it
    assert "__m_" not in render_view_sql(state, "spark")
    expected = omni.query(QUERY).to_pylist()
    assert [r["b"] for r in expected] == ["a", "b", "c"]
    plan = plan_materialization(omni.store, NAME, ["t_digits", "t_len"])
    assert plan.action == "append" and plan.batches == ["c"] and plan.rows == 4
    [report] = refresh_materializations(omni.store, NAME)
    assert report["rows_written"] == 4
    assert omni.state(NAME).fresh_materialized_tables() and omni.query(QUERY).to_pylist() == expected


def test_a_new_feature_version_rebuilds_and_old_versions_keep_their_reads(omni):
    from omni_iceberg.demo.wide import wide_features

    [w] = wide_features(1)
    omni.register_features(NAME, [w])
    omni.backfill(NAME, [w.name], isolation="inline", progress=False)
    materialize(omni.store, NAME, [w.name, "t_len"])
    built = omni.state(NAME).version
    sql = f"SELECT sum({w.name}) AS s, sum(t_len) AS t FROM web"
    old = omni.query(sql).to_pylist()
    # a new version of the feature (other parameters): the logical column moves to new values
    omni.register_features(NAME, [w.model_copy(update={"params": {"k": 7}, "version": ""})])
    omni.backfill(NAME, [w.name], isolation="inline", progress=False)
    assert not omni.state(NAME).fresh_materialized_tables()
    new = omni.query(sql).to_pylist()
    assert new != old  # read from the sources: the copy is stale
    assert plan_materialization(omni.store, NAME, [w.name, "t_len"]).action == "rebuild"
    refresh_materializations(omni.store, NAME)
    assert omni.state(NAME).fresh_materialized_tables()
    assert omni.query(sql).to_pylist() == new and omni.query(sql, as_of=built).to_pylist() == old


def test_dropping_a_batch_keeps_the_copy_fresh(omni):
    materialize(omni.store, NAME, ["t_len", "t_digits"])
    omni.drop_batch(NAME, "a")
    state = omni.state(NAME)
    assert state.fresh_materialized_tables()
    assert omni.query(QUERY).to_pylist()[0]["b"] == "b" and omni.read(NAME).num_rows == 7


def test_bad_columns_are_refused_with_a_suggestion(omni, capsys):
    with pytest.raises(MaterializeError, match="no column 't_lenn'; did you mean 't_len'"):
        materialize(omni.store, NAME, ["t_lenn"])
    with pytest.raises(MaterializeError, match="at least one column"):
        materialize(omni.store, NAME, ["_ai_unique_id_"])
    assert cli_main(["accelerate", NAME, "--materialize", "t_len,ProcessedData", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["action"] == "build" and plan["columns"] == ["t_len", "ProcessedData.parsed_text"]
    assert cli_main(["accelerate", NAME, "--materialize", "nope"]) != 0
    assert "no column 'nope'" in capsys.readouterr().err
