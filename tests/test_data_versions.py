"""Data versions: a computed value's identity includes its whole upstream chain.

When a producer gets a new version, its dependents show as stale (feature status and the
plan say why) and are recomputed when asked; reuse by content copies only values whose
whole chain matches, and finds them without loading unrelated tables.
"""

import json

import pytest

from catalog_ext.data_versions import current_chains
from catalog_ext.store import FamilyStore
from omni_iceberg.api import Omni
from omni_iceberg.backfill.planner import feature_status
from omni_iceberg.backfill.reuse import ReuseIndex
from omni_iceberg.features import feature

# Each helper (re-)registers the UDF "dv_parse" with its own code: the UDF registry is
# per process and keyed by feature name, so a test registers the version it computes next.


def parser_v1():
    @feature(outputs={"ProcessedData.dv_text": "string"}, inputs=["RawData.raw_data"], name="dv_parse", version="1")
    def dv_parse(raw_data):
        return raw_data.lower()

    return dv_parse


def parser_v2():
    @feature(outputs={"ProcessedData.dv_text": "string"}, inputs=["RawData.raw_data"], name="dv_parse", version="2")
    def dv_parse(raw_data):
        return raw_data.lower() + " and two more"

    return dv_parse


@feature(outputs={"dv_len": "long"}, inputs=["ProcessedData.dv_text"])
def dv_len(dv_text):
    return len(dv_text.split())


@feature(outputs={"dv_score": "double"}, inputs=["dv_len"])
def dv_score(dv_len):
    return dv_len / 10


def _docs(tmp_path, name, texts):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"raw_data": t}) + "\n" for t in texts))
    return str(path)


@pytest.fixture
def web(tmp_path):
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    omni.submit("web", [_docs(tmp_path, "cc", [f"cc doc {i} with words" for i in range(12)])], batch="cc")
    omni.submit("web", [_docs(tmp_path, "wiki", [f"wiki page {i}" for i in range(8)])], batch="wiki")
    omni.register_features("web", [parser_v1(), dv_len, dv_score])
    omni.backfill("web", ["dv_score"], isolation="inline")
    return omni


def _status(omni):
    return {row["name"]: row for row in feature_status(omni.state("web")) if row["current"]}


def test_a_new_upstream_version_makes_every_dependent_stale(web):
    assert {n: r["status"] for n, r in _status(web).items()} == {
        "dv_parse": "computed", "dv_len": "computed", "dv_score": "computed"}
    assert web.plan("web", ["dv_score"], has_gpu=False).empty

    web.register_features("web", [parser_v2()])
    status = _status(web)
    assert status["dv_parse"]["status"] == "missing"
    assert status["dv_len"]["status"] == "stale" and sorted(status["dv_len"]["stale"]) == ["cc", "wiki"]
    assert "ProcessedData.dv_text" in status["dv_len"]["stale"]["cc"]
    assert "dv_parse@2" in status["dv_len"]["stale"]["cc"]
    assert status["dv_score"]["status"] == "stale"  # two hops down: its producer is stale
    assert "dv_len" in status["dv_score"]["stale"]["wiki"]

    plan = web.plan("web", ["dv_score"], ["cc"], has_gpu=False)
    assert [s.features for s in plan.stages] == [["dv_parse"], ["dv_len"], ["dv_score"]]
    assert all(s.batches == ["cc"] for s in plan.stages)
    assert set(plan.features["dv_len"].stale) == {"cc"}  # wiki is not in this plan
    text = plan.describe()
    assert "recompute stale batch cc" in text and "dv_parse@2" in text
    assert plan.to_dict()["features"]["dv_score"]["stale"]["cc"]
    chains = current_chains(web.state("web"))
    assert plan.features["dv_len"].data_version == chains["dv_len"].data_version
    assert plan.features["dv_len"].upstream == [f"ProcessedData.dv_text<-dv_parse@2#{chains['dv_parse'].data_version}"]


def test_an_unrelated_new_version_leaves_other_chains_fresh(web):
    @feature(outputs={"dv_other": "long"}, inputs=["RawData.raw_data"], name="dv_other")
    def dv_other(raw_data):
        return 1

    web.register_features("web", [dv_other])
    status = _status(web)
    assert status["dv_len"]["status"] == "computed" and status["dv_other"]["status"] == "missing"


def test_data_versions_follow_code_and_chain_not_batch_or_table(web, tmp_path):
    before = current_chains(web.state("web"))
    other = Omni(home=tmp_path / "h")
    other.create_table("mirror")
    other.register_features("mirror", [parser_v1(), dv_len, dv_score])
    mirror = current_chains(other.state("mirror"))
    assert {n: c.data_version for n, c in mirror.items()} == {n: c.data_version for n, c in before.items()}
    web.register_features("web", [parser_v2()])
    after = current_chains(web.state("web"))
    assert after["dv_parse"].data_version != before["dv_parse"].data_version
    assert after["dv_len"].data_version != before["dv_len"].data_version  # same version, new chain
    assert web.state("web").feature("dv_len").version == json.loads(
        web.state("web").feature("dv_len").definition)["version"]


def test_stale_units_are_recomputed_in_place_when_asked(web):
    web.register_features("web", [parser_v2()])
    report = web.backfill("web", ["dv_score"], isolation="inline")
    assert report.status == "succeeded"
    assert {n: r["status"] for n, r in _status(web).items()} == {
        "dv_parse": "computed", "dv_len": "computed", "dv_score": "computed"}
    data = web.read("web", columns=["_ai_unique_id_", "dv_len", "dv_score"])
    assert data.num_rows == 20  # replaced, not appended next to the stale rows
    cc = [r for r in data.to_pylist()]
    assert all(r["dv_len"] in (8, 6) and r["dv_score"] == r["dv_len"] / 10 for r in cc)


def test_reuse_copies_only_values_whose_whole_chain_matches(tmp_path, monkeypatch):
    omni = Omni(home=tmp_path / "h")
    texts = [f"shared doc {i} about things" for i in range(10)]
    for name in ("web", "other_parser", "same_parser"):
        omni.create_table(name)
        omni.submit(name, [_docs(tmp_path, name, texts)], batch="b")
    omni.create_table("unrelated")  # never looked at by reuse
    omni.register_features("web", [parser_v1(), dv_len])
    omni.backfill("web", ["dv_len"], isolation="inline")

    omni.register_features("other_parser", [parser_v2(), dv_len])  # same dv_len version, other parser
    assert omni.state("other_parser").feature("dv_len").key == omni.state("web").feature("dv_len").key
    report = omni.backfill("other_parser", ["dv_len"], isolation="inline")
    assert report.reused == 0  # web's dv_len came from dv_parse@1: not these values
    assert set(omni.read("other_parser", columns=["dv_len"]).column("dv_len").to_pylist()) == {8}

    omni.register_features("same_parser", [parser_v1(), dv_len])
    state = omni.state("same_parser")

    def no_catalog_walk(*args, **kwargs):
        raise AssertionError("reuse must not load other logical tables")

    monkeypatch.setattr(FamilyStore, "list_tables", no_catalog_walk)
    monkeypatch.setattr(FamilyStore, "load", no_catalog_walk)
    index = ReuseIndex.build(omni.store, state, [state.feature("dv_parse"), state.feature("dv_len")])
    monkeypatch.undo()
    assert [s.identifier for s in index.sources["dv_len"]] == ["aidata.web__f_dv_len_" + state.feature(
        "dv_len").version]
    assert [s.batches for s in index.sources["dv_len"]] == [["b"]]
    report = omni.backfill("same_parser", ["dv_len"], isolation="inline")
    assert report.reused == 2 * 10  # both features copied from web
    assert set(omni.read("same_parser", columns=["dv_len"]).column("dv_len").to_pylist()) == {5}
