"""Pinned views (catalog_ext/pinned_views.py): a version or a tag as a plain Iceberg view.

Embedded SQLite catalog here; tests/test_time_travel_engines.py reads the same views
from real Spark and Trino.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog_ext.pinned_views import PROP_PINNED_OF, PROP_PINNED_TAG, PROP_PINNED_VERSION, PinnedViewError
from catalog_ext.views import NoSuchViewError
from governance import RetentionPolicy, apply_retention, plan_retention
from omni_iceberg.api import Omni
from omni_iceberg.cli import main as cli_main

NAME = "web"


@pytest.fixture
def omni(omni_home, tmp_path):
    o = Omni(config=omni_home)
    o.create_table(NAME)
    for b in ("a", "b", "c"):
        path = tmp_path / f"{b}.jsonl"
        path.write_text("".join(json.dumps({"raw_data": f"<p>{b} row {i}</p>"}) + "\n" for i in range(3)))
        o.submit(NAME, [str(path)], batch=b)  # versions 2, 3, 4
    return o


def _view(omni: Omni, name: str):
    return omni.store.views.load_view("aidata", name)


def test_pin_a_version_makes_a_view_with_that_versions_sql(omni):
    out = omni.pin(NAME, 2)
    assert out["view"] == "aidata.web__v2" and out["version"] == 2 and out["tag"] is None
    assert out["spark"] == f"SELECT * FROM {omni.config.catalog_name}.aidata.web__v2" == out["trino"]
    view = _view(omni, "web__v2")
    assert view.properties[PROP_PINNED_OF] == "aidata.web" and view.properties[PROP_PINNED_VERSION] == "2"
    from catalog_ext.view_sql import render_view_sql
    from catalog_ext.views import SUPERSEDED_SQL_PREFIX

    bodies = {r["dialect"]: r["sql"] for r in view.current_version["representations"]}
    assert bodies == {d: render_view_sql(omni.state(NAME, as_of=2), d) for d in ("spark", "trino")}  # version 2's body
    # the logical view keeps no superseded body (each commit would copy them all): a stub says where to read it
    logical = omni.store.views.load_view("aidata", NAME).version(2)
    assert all(r["sql"].startswith(SUPERSEDED_SQL_PREFIX) and "omni pin aidata.web 2" in r["sql"]
               for r in logical["representations"])
    assert omni.store.list_tables("aidata") == ["aidata.web"]  # not a logical table
    assert omni.pin(NAME, 2)["view"] == "aidata.web__v2"  # idempotent
    assert [v["view"] for v in omni.pinned_views(NAME)] == ["aidata.web__v2"]


def test_superseded_bodies_are_stubbed_once_and_what_a_commit_remembers_is_the_file(omni):
    from catalog_ext.views import SUPERSEDED_SQL_PREFIX, SqlViewCatalog, with_new_version, without_superseded_sql

    meta = omni.store.views.load_view("aidata", NAME).metadata
    # metadata from before stubs existed: every superseded body is real SQL; one pass stubs them all
    unstubbed = dict(meta, versions=[dict(v, representations=[{**r, "sql": "SELECT 1"} for r in v["representations"]])
                                     for v in meta["versions"]])
    stubbed = without_superseded_sql(unstubbed, "aidata.web")
    current = meta["current-version-id"]
    for v in stubbed["versions"]:
        assert all(r["sql"].startswith(SUPERSEDED_SQL_PREFIX) for r in v["representations"]) == (v["version-id"] != current)
    # after that a commit stubs what it superseded; versions already stubbed are the same objects
    newer = with_new_version(stubbed, stubbed["schemas"][-1], [], ["aidata"], {}, {})
    again = without_superseded_sql(newer, "aidata.web")
    assert all(a is b for a, b in zip(again["versions"][:-2], stubbed["versions"][:-1]))
    assert again["versions"][-2]["representations"] == [] or all(
        r["sql"].startswith(SUPERSEDED_SQL_PREFIX) for r in again["versions"][-2]["representations"])
    # a writer remembers the metadata it wrote instead of re-parsing it: it must equal the file
    omni.tag(NAME, "t1")
    view = omni.store.views.load_view("aidata", NAME)
    fresh = SqlViewCatalog(omni.catalog).read_metadata(view.metadata_location)  # a new reader parses the file
    assert fresh == view.metadata and json.loads(json.dumps(view.metadata)) == view.metadata


def test_a_tag_gets_a_view_that_follows_the_tag(omni):
    out = omni.tag(NAME, "Release-1.0", version=3)
    assert out["view"] == "aidata.web__tag_release_1_0"
    view = _view(omni, "web__tag_release_1_0")
    assert view.properties[PROP_PINNED_TAG] == "Release-1.0" and view.properties[PROP_PINNED_VERSION] == "3"
    omni.tag(NAME, "Release-1.0", version=4)  # moving the tag moves its view
    assert _view(omni, "web__tag_release_1_0").properties[PROP_PINNED_VERSION] == "4"
    # a different tag that folds to the same name is refused, not silently merged
    with pytest.raises(PinnedViewError, match="would share the view web__tag_release_1_0"):
        omni.tag(NAME, "release-1.0", version=2)
    assert "release-1.0" not in omni.tags(NAME)  # refused before anything was committed


def test_a_moved_tag_keeps_one_version_and_retention_removes_its_old_files(omni):
    for version in (2, 3, 4, 2, 3):  # a tag moved five times, e.g. "latest-good"
        omni.tag(NAME, "best", version=version)
    view = _view(omni, "web__tag_best")
    assert [v["version-id"] for v in view.metadata["versions"]] == [view.metadata["current-version-id"]]
    assert view.properties[PROP_PINNED_VERSION] == "3"
    folder = Path(view.metadata_location.removeprefix("file://")).parent
    assert len(list(folder.glob("*.metadata.json"))) == 5  # every move wrote one file...
    report = apply_retention(omni.store, f"aidata.{NAME}", RetentionPolicy(keep_last=2, min_age_s=0))
    assert report.versions_expired  # (a run that expires nothing sweeps only files past its grace period)
    assert report.errors == []
    current = Path(_view(omni, "web__tag_best").metadata_location).name
    assert [p.name for p in folder.glob("*.metadata.json")] == [current]
    assert omni.read(NAME, as_of="best").num_rows == 6  # version 3: batches a and b


def test_retention_keeps_a_pinned_version_until_it_is_unpinned(omni):
    omni.pin(NAME, 2)
    policy = RetentionPolicy(keep_last=1, min_age_s=0)
    plan = plan_retention(omni.store, NAME, policy)
    assert 2 not in plan.expire and any("pinned view aidata.web__v2" in r
                                         for v in plan.versions if v.version == 2 for r in v.reasons)
    apply_retention(omni.store, NAME, policy)
    assert omni.read(NAME, as_of=2).num_rows == 3  # still readable
    assert omni.unpin(NAME, 2) == {"dropped": ["aidata.web__v2"]}
    with pytest.raises(NoSuchViewError):
        omni.unpin(NAME, 2)
    apply_retention(omni.store, NAME, policy)
    assert 2 not in [v.version for v in omni.log(NAME)]


def test_dropping_the_table_drops_its_pinned_views(omni):
    omni.pin(NAME, 2)
    omni.tag(NAME, "keep")
    omni.drop_table(NAME)
    assert omni.store.views.list_views("aidata") == []


def test_cli_pin_list_and_drop(omni, capsys):
    assert cli_main(["pin", NAME, "3"]) == 0
    assert "aidata.web__v3 reads aidata.web version 3" in capsys.readouterr().out
    assert cli_main(["pin", NAME, "--list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["views"][0]["view"] == "aidata.web__v3"
    assert cli_main(["pin", NAME, "3", "--drop"]) == 0
    assert "dropped aidata.web__v3" in capsys.readouterr().out
    assert cli_main(["pin", NAME, "99"]) != 0
    assert "versions 1.." in capsys.readouterr().err
