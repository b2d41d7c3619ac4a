"""``omni advise``: proposals learned from the query log, with observed benefit and measured cost."""

from __future__ import annotations

import json

import pytest

from omni_iceberg.api import Omni
from omni_iceberg.features import feature


@feature(outputs={"ad_len": "long"}, inputs=["RawData.raw_data"])
def ad_len(raw_data):
    return len(raw_data)


@feature(outputs={"ad_lang": "string"}, inputs=["RawData.raw_data"])
def ad_lang(raw_data):
    return "de" if "der" in raw_data else "en"


@feature(outputs={"ad_words": "list<string>"}, inputs=["RawData.raw_data"])
def ad_words(raw_data):
    return raw_data.split()


@pytest.fixture
def omni(omni_home, hot_dsn, monkeypatch):
    monkeypatch.setenv("OMNI_HOT", hot_dsn)
    omni = Omni(config=omni_home)
    omni.create_table("web")
    src = omni_home.home / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"{'der' if i % 2 else 'the'} doc {i}",
                                       "url": f"https://e.org/{i}"}) + "\n" for i in range(30)))
    omni.submit("web", [str(src)], batch="a")
    omni.register_features("web", [ad_len, ad_lang, ad_words])
    omni.backfill("web", ["ad_len", "ad_lang", "ad_words"], isolation="inline")
    return omni


def test_without_a_log_nothing_is_proposed_and_it_says_why(omni):
    advice = omni.advise("web")
    assert advice.proposals == [] and "no query or export" in advice.notes[0]
    assert "nothing to propose" in advice.describe()


def test_the_log_proposes_hot_columns_and_a_copy_and_apply_builds_them(omni):
    pytest.importorskip("chdb")
    for _ in range(3):
        omni.query("SELECT ad_lang, avg(ad_len) AS m FROM web GROUP BY ad_lang")
    omni.query("SELECT count(*) AS n FROM web WHERE ad_len > 5")
    for _ in range(2):  # reads joining base + 3 feature tables
        omni.query("SELECT RawData.url, ad_len, ad_lang, ad_words FROM web WHERE ad_len > 3")
    advice = omni.advise("web")
    by_kind = {p.kind: p for p in advice.proposals}
    hot = by_kind["hot"]
    assert sorted(hot.columns) == ["ad_lang", "ad_len"] and hot.reads == 4 and hot.of_reads == 6
    assert hot.storage_bytes > 0 and "--hot ad_lang,ad_len" in hot.command
    mat = by_kind["materialize"]
    assert set(mat.columns) == {"RawData.url", "ad_len", "ad_lang", "ad_words"} and mat.reads == 2
    assert mat.storage_bytes > hot.storage_bytes
    applied = omni.advise("web", apply=True)
    assert [a["kind"] for a in applied.applied] == ["hot", "materialize"]
    state = omni.state("web")
    assert sorted(state.hot.columns) == ["ad_lang", "ad_len"] and state.materializations
    # what exists is not proposed again
    assert omni.advise("web").proposals == []


def test_cli_advise(omni, capsys):
    from omni_iceberg.cli import main

    omni.query("SELECT count(*) AS n FROM web WHERE ad_len > 5")
    assert main(["--home", str(omni.config.home), "advise", "web", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reads_logged"] == 1 and out["proposals"][0]["kind"] == "hot"


@feature(outputs={"ad_twice": "long"}, inputs=["RawData.raw_data"])
def ad_twice(raw_data):
    return 2 * len(raw_data)


def test_reads_joining_narrow_feature_tables_propose_a_regroup_that_costs_no_storage(omni):
    omni.register_features("web", [ad_twice])
    omni.backfill("web", ["ad_twice"], isolation="inline")
    for _ in range(2):
        omni.query("SELECT avg(ad_len) AS a, avg(ad_twice) AS b FROM web WHERE ad_len > 3")
    regroup = next(p for p in omni.advise("web").proposals if p.kind == "regroup")
    assert set(regroup.columns) == {"ad_len", "ad_twice"} and regroup.reads == 2 and regroup.storage_bytes == 0
    assert "2 joins fewer" in regroup.benefit and regroup.command == "omni regroup aidata.web"
    before = omni.query("SELECT avg(ad_len) AS a, avg(ad_twice) AS b FROM web WHERE ad_len > 3").to_pylist()
    applied = omni.advise("web", apply=True)
    assert applied.applied[0]["kind"] == "regroup"
    assert any(t.role == "column-group" for t in omni.state("web").tables)
    assert omni.query("SELECT avg(ad_len) AS a, avg(ad_twice) AS b FROM web WHERE ad_len > 3").to_pylist() == before
    assert not [p for p in omni.advise("web").proposals if p.kind == "regroup"]
