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


@feature(outputs={"ad_c1": "double", "ad_c2": "double", "ad_c3": "double"}, inputs=["RawData.raw_data"])
def ad_cold(raw_data):
    h = hash(raw_data) % 10_007
    return {"ad_c1": h / 7, "ad_c2": h / 11, "ad_c3": h / 13}  # fixed width: grouped; never read below


def test_a_group_whose_reads_skip_most_of_its_bytes_proposes_a_split(omni):
    omni.register_features("web", [ad_twice, ad_cold])
    omni.backfill("web", ["ad_twice", "ad_cold"], isolation="inline")
    omni.regroup("web")
    group = next(t for t in omni.state("web").tables if t.role == "column-group")
    sql = "SELECT avg(ad_len) AS a, sum(ad_twice) AS b FROM web WHERE ad_len > 3"
    for _ in range(2):
        omni.query(sql)
    assert not [p for p in omni.advise("web").proposals if p.kind == "split"]  # 2 reads: too few to judge
    omni.query(sql)
    split = next(p for p in omni.advise("web").proposals if p.kind == "split")
    assert split.columns == ["ad_c1", "ad_c2", "ad_c3"]
    assert split.reads == 3 and split.storage_bytes == 0 and group.identifier in split.benefit
    assert split.command == "omni regroup aidata.web --split ad_c1,ad_c2,ad_c3"
    before = omni.query(sql).to_pylist()
    cold = omni.read("web", columns=["_ai_unique_id_", "ad_c1", "ad_c3"]).sort_by("_ai_unique_id_")  # not logged
    applied = omni.advise("web", apply=True)
    assert "split" in [a["kind"] for a in applied.applied]
    state = omni.state("web")
    assert all(pc.table != group.key for c in ("ad_c1", "ad_c2", "ad_c3") for pc in state.read_parts(c))
    assert omni.query(sql).to_pylist() == before
    assert omni.read("web", columns=["_ai_unique_id_", "ad_c1", "ad_c3"]).sort_by("_ai_unique_id_").equals(cold)
    assert not [p for p in omni.advise("web").proposals if p.kind == "split"]
