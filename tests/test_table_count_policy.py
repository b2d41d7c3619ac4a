"""The physical table bound (governance/table_bound.py): maintenance keeps the view under
``OMNI_FAMILY_MAX_TABLES`` tables by merging the least-read feature tables into column groups.

A 7-feature family (base + 7 feature tables = 8 tables the view reads) with a bound of 5:
the narrow regroup is not due (7 tables would move, fewer than OMNI_GROUP_DUE_TABLES' 8),
so only the bound can bring it down. Logged reads of w000-w002 make w003-w006 the least
read. Embedded SQLite catalog, real Parquet, real query log.
"""

from __future__ import annotations

import json

import pytest

from catalog_ext.errors import ConfigError
from governance import maintenance
from governance.table_bound import plan_table_bound, view_tables
from omni_iceberg.api import Omni
from omni_iceberg.cli import main as cli_main
from omni_iceberg.demo.wide import wide_features
from tests.pages import pages_jsonl

HOT = "SELECT count(*) AS n, avg(w000) AS a, avg(w001) AS b, avg(w002) AS c FROM web WHERE w000 > 10"
COLUMNS = ["_ai_unique_id_", "_ai_append_name_", *[f"w{i:03d}" for i in range(7)]]


@pytest.fixture
def omni(omni_home, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_FAMILY_MAX_TABLES", "5")
    o = Omni(config=omni_home)
    o.create_table("web")
    features = wide_features(7)
    o.register_features("web", features)
    o.submit("web", [str(pages_jsonl(tmp_path, "a", 9))], batch="a", progress=False)
    o.backfill("web", [f.name for f in features], isolation="inline", progress=False)
    return o


def _count(omni: Omni, as_of: int | None = None) -> int:
    return len(view_tables(omni.state("web", as_of=as_of)))


def _rows(omni: Omni, as_of: int | None = None) -> list[dict]:
    return sorted(omni.read("web", columns=COLUMNS, as_of=as_of).to_pylist(), key=lambda r: r["_ai_unique_id_"])


def _feature_table(omni: Omni, feature: str) -> str:
    state = omni.state("web")
    return next(pc.table for pc in state.physical_columns_of(feature) if state.physical_table(pc.table).role == "feature")


def test_maintain_merges_the_least_read_tables_under_the_bound_and_every_value_stays(omni):
    assert _count(omni) == 8
    rows, hot = _rows(omni), omni.query(HOT).to_pylist()
    assert sum(r["w003"] is not None for r in rows) == 9  # the family holds values to keep
    for _ in range(2):
        omni.query(HOT)
    cold = {_feature_table(omni, f"w{i:03d}") for i in range(3, 7)}
    before = omni.state("web")

    report = omni.maintain("web")

    bound = report.table_bound
    assert bound is not None and "regroup" in bound, bound["describe"]
    plan = bound["plan"]
    # 8 -> 5: the 4 least-read tables (no logged read) make one new group; the 3 read ones stay alone
    assert (plan["tables_before"], plan["tables_after"], plan["max_tables"]) == (8, 5, 5)
    assert set(plan["merge"]) == cold and plan["reads"] == {k: 0 for k in plan["merge"]}
    # the narrow regroup ran first and was not due
    assert any(t.startswith("column groups (when >= 8") for t in report.tasks)
    assert "not due" in report.column_groups["describe"]
    after = omni.state("web")
    assert _count(omni) == 5
    assert all(after.physical_table(k).emptied for k in cold)
    assert len({pc.table for f in ("w003", "w004", "w005", "w006") for pc in after.read_parts(f)}) == 1
    assert {pc.table for pc in after.read_parts("w000")} == {_feature_table(omni, "w000")}  # read: left alone
    assert _rows(omni) == rows and omni.query(HOT).to_pylist() == hot
    # the old version reads its old layout, the same values
    assert _count(omni, as_of=before.version) == 8
    assert _rows(omni, as_of=before.version) == rows
    assert "physical table bound" in report.describe() and "-> 5 table(s)" in report.describe()

    again = omni.maintain("web")  # under the bound now: nothing more moves
    assert "nothing to merge (5 <= 5)" in again.table_bound["describe"] and "regroup" not in again.table_bound
    assert _rows(omni) == rows


def test_advise_shows_the_planned_merge_and_why_before_maintain_runs(omni, capsys):
    version = omni.state("web").version
    advice = omni.advise("web")  # nothing logged yet: the bound is proposed all the same
    assert [p.kind for p in advice.proposals] == ["bound"]
    first = advice.proposals[0]
    assert len(first.tables) == 4 and "OMNI_FAMILY_MAX_TABLES=5" in first.benefit
    assert "the view reads 8 physical tables" in first.benefit and "leaving 5" in first.benefit

    for _ in range(3):
        omni.query(HOT)
    advice = omni.advise("web")
    bound = next(p for p in advice.proposals if p.kind == "bound")
    cold = [_feature_table(omni, f"w{i:03d}") for i in range(3, 7)]
    assert bound.tables == cold  # least read first, ties in registration order
    assert "0 logged reads touched them" in bound.benefit
    assert bound.command == f"omni regroup {advice.logical_table} --tables {','.join(cold)}"
    assert omni.state("web").version == version  # advising changed nothing

    home = str(omni.config.home)
    assert cli_main(["--home", home, "advise", "web"]) == 0
    out = capsys.readouterr().out
    assert "bound: w003, w004, w005, w006" in out and "more than OMNI_FAMILY_MAX_TABLES=5" in out
    assert cli_main(["--home", home, "maintain", "web", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["table_bound"]["plan"]["merge"] == cold and "regroup" not in dry["table_bound"]
    assert omni.state("web").version == version

    # what advise proposed is what maintain does
    report = omni.maintain("web")
    assert report.table_bound["plan"]["merge"] == cold and _count(omni) == 5


def test_the_bound_runs_in_maintenance_after_a_commit_when_auto_maintain_is_on(omni, tmp_path, monkeypatch):
    rows = _rows(omni)
    monkeypatch.setattr(maintenance, "AUTO_MAINTAIN_EVERY", 1)  # every commit maintains
    old = omni.state("web")
    omni.submit("web", [str(pages_jsonl(tmp_path, "b", 3))], batch="b", progress=False)
    assert _count(omni) == 5  # the submit's commit was followed by maintenance, which merged
    new = _rows(omni)
    assert [r for r in new if r["_ai_append_name_"] == "a"] == [r for r in rows if r["_ai_append_name_"] == "a"]
    assert sum(r["_ai_append_name_"] == "b" for r in new) == 3
    assert _rows(omni, as_of=old.version) == rows and _count(omni, as_of=old.version) == 8


@pytest.mark.parametrize("raw", ["0", "1", "-3", "forty"])
def test_a_bound_below_two_or_not_a_number_is_a_clear_error_and_changes_nothing(omni, monkeypatch, raw):
    monkeypatch.setenv("OMNI_FAMILY_MAX_TABLES", raw)
    version = omni.state("web").version
    with pytest.raises(ConfigError, match=r"OMNI_FAMILY_MAX_TABLES='?" + raw) as err:
        omni.maintain("web")
    assert ">= 2" in str(err.value) or "whole number" in str(err.value)
    with pytest.raises(ConfigError, match="OMNI_FAMILY_MAX_TABLES"):
        omni.advise("web")
    assert omni.state("web").version == version and _count(omni) == 8


def test_an_explicit_bound_is_checked_and_an_unreachable_one_says_why(omni):
    with pytest.raises(ConfigError, match=r"OMNI_FAMILY_MAX_TABLES=1: .* >= 2"):
        plan_table_bound(omni.store, "web", max_tables=1)
    with pytest.raises(ConfigError, match="OMNI_FAMILY_MAX_TABLES=True"):
        plan_table_bound(omni.store, "web", max_tables=True)
    # the 7 feature tables into one group: base + group = 2, the least a family reaches
    plan = plan_table_bound(omni.store, "web", max_tables=2, reads=[])
    assert (plan.tables_after, len(plan.merge), plan.why_not) == (2, 7, "")
    # after that merge only the base and a group are left: nothing more can move
    from governance.table_bound import bound_tables

    bound_tables(omni.store, "web", max_tables=2, reads=[])
    from governance.column_groups import split_columns

    split_columns(omni.store, "web", ["w000"])  # a third table: a column group of its own
    plan = plan_table_bound(omni.store, "web", max_tables=2, reads=[])
    assert plan.empty and plan.tables_before == 3
    assert "column groups are not merged with each other" in plan.why_not


def test_maintain_refreshes_a_stale_materialization_and_bounds_the_layout_it_leaves(omni, tmp_path):
    from governance.materialize import materialize

    materialize(omni.store, "web", ["w000", "w001"])
    omni.submit("web", [str(pages_jsonl(tmp_path, "b", 4))], batch="b", progress=False)
    omni.backfill("web", ["w000", "w001"], isolation="inline", progress=False)
    stale = omni.state("web")
    assert not stale.fresh_materialized_tables()  # batch b is not in the copy: nobody reads it
    rows = _rows(omni)
    assert sum(r["w000"] is not None for r in rows) == 13
    advice = omni.advise("web")
    assert any("is stale" in n and "omni maintain refreshes it" in n for n in advice.notes), advice.notes

    report = omni.maintain("web")

    assert [r["plan"]["action"] for r in report.refreshed] == ["append"] and report.refreshed[0]["rows_written"] == 4
    assert "stale materializations: " in report.describe() and "(append) refreshed" in report.describe()
    assert "regroup" in report.table_bound
    after = omni.state("web")
    assert after.fresh_materialized_tables()
    # the fresh copy drives the view in place of w000's and w001's tables: base, copy and 5 feature
    # tables is 7; the 3 least-read of those (w002-w004) merge into one group
    assert _count(omni) == 5 and report.table_bound["plan"]["tables_before"] == 7
    assert len({pc.table for f in ("w002", "w003", "w004") for pc in after.read_parts(f)}) == 1
    assert _rows(omni) == rows and _rows(omni, as_of=stale.version) == rows
    again = omni.maintain("web", dry_run=True)
    assert again.refreshed == [] and "stale materializations: none" in again.describe()


def test_maintain_splits_the_cold_columns_out_of_a_read_group_within_the_bound(omni):
    from governance.column_groups import regroup

    regroup(omni.store, "web")  # the 7 narrow tables into one group: base + group
    assert _count(omni) == 2
    rows = _rows(omni)
    for _ in range(3):
        omni.query(HOT)  # reads w000-w002 of the group: w003-w006, 4 of its 7 long columns, are never read
    split = next(p for p in omni.advise("web").proposals if p.kind == "split")
    assert split.columns == ["w003", "w004", "w005", "w006"] and split.reads == 3
    assert split.benefit.endswith("; omni maintain applies it")
    before = omni.state("web")

    report = omni.maintain("web")

    assert "split" in report.cold_split, report.cold_split["describe"]
    assert report.cold_split["plan"]["columns"] == ["w003", "w004", "w005", "w006"]
    after = omni.state("web")
    assert _count(omni) == 3 and report.cold_split["logical_version"] == before.version + 1  # one commit
    cold = {pc.table for f in ("w003", "w004", "w005", "w006") for pc in after.read_parts(f)}
    hot = {pc.table for f in ("w000", "w001", "w002") for pc in after.read_parts(f)}
    assert len(cold) == 1 and len(hot) == 1 and cold != hot
    assert _rows(omni) == rows and _rows(omni, as_of=before.version) == rows
    assert _count(omni, as_of=before.version) == 2
    again = omni.maintain("web")  # the group's reads now use every column it keeps: nothing more
    assert "none to split" in again.cold_split["describe"] and "split" not in again.cold_split


def test_a_cold_split_waits_while_it_would_pass_the_bound(omni, monkeypatch):
    from governance.column_groups import regroup

    regroup(omni.store, "web")
    monkeypatch.setenv("OMNI_FAMILY_MAX_TABLES", "2")
    for _ in range(3):
        omni.query(HOT)
    split = next(p for p in omni.advise("web").proposals if p.kind == "split")
    assert "omni maintain waits with it: the view reads 2 physical tables" in split.benefit
    report = omni.maintain("web")
    assert "not applied: the view reads 2 physical tables and a split adds one, past OMNI_FAMILY_MAX_TABLES=2" \
        in report.cold_split["describe"] and "split" not in report.cold_split
    state = omni.state("web")  # (maintain's re-bucketing may have made a version: no split did)
    assert _count(omni) == 2 and not any(t.key.startswith("g_split_") for t in state.tables)
    assert {pc.table for pc in state.read_parts("w003")} == {pc.table for pc in state.read_parts("w000")}


def test_past_the_maintenance_budget_the_merge_is_left_to_the_next_run(omni):
    version = omni.state("web").version
    report = maintenance.maintain(omni.store, "web", budget_s=0)  # every task starts past a budget of 0 s
    task = next(t for t in report.tasks if t.startswith("physical table bound"))
    assert task == "physical table bound (the view reads at most 5 tables) - not started: past the 0 s budget, " \
                   "left to the next run"
    assert report.table_bound is None and _count(omni) == 8 and omni.state("web").version == version
    report = maintenance.maintain(omni.store, "web")  # the next run, without a budget, merges
    assert report.table_bound["plan"]["tables_after"] == 5 and _count(omni) == 5


def test_a_bad_bound_in_automatic_maintenance_warns_and_the_commit_stands(omni, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(maintenance, "AUTO_MAINTAIN_EVERY", 1)
    monkeypatch.setenv("OMNI_FAMILY_MAX_TABLES", "0")
    version = omni.state("web").version
    omni.submit("web", [str(pages_jsonl(tmp_path, "b", 2))], batch="b", progress=False)
    assert omni.state("web").version == version + 1 and _count(omni) == 8  # committed; nothing maintained
    err = capsys.readouterr().err
    assert "automatic maintenance of aidata.web failed: OMNI_FAMILY_MAX_TABLES='0' (environment): must be >= 2" in err


def test_trino_reads_the_whole_width_once_maintain_bounded_the_family_with_the_default(trino, tmp_path, monkeypatch):
    """The default bound against the measurement it comes from: SELECT * over the view of 61
    physical tables passes Trino's default cap of 150 stages; after maintain (default bound)
    it runs as is, and returns what it returned with the cap raised."""
    from governance import column_groups

    monkeypatch.delenv("OMNI_FAMILY_MAX_TABLES", raising=False)  # the declared default
    monkeypatch.setattr(column_groups, "GROUP_DUE_TABLES", 10**6)  # only the bound merges here
    o = Omni(config=trino.config)
    o.create_table("tb_wide")
    features = wide_features(60)
    o.register_features("tb_wide", features)
    o.submit("tb_wide", [str(pages_jsonl(tmp_path, "a", 4))], batch="a", progress=False)
    o.backfill("tb_wide", [f.name for f in features], isolation="inline", progress=False)
    assert len(view_tables(o.state("tb_wide"))) == 61
    star = "SELECT * FROM omni.aidata.tb_wide ORDER BY _ai_unique_id_"
    with pytest.raises(Exception, match="exceeds the allowed maximum"):
        trino.query(star)
    wide = trino.query(star, session={"query_max_stage_count": "400"})
    assert len(wide) == 4 and len(wide[0]) == 5 + 60 and all(v is not None for v in wide[0][5:])

    report = o.maintain("tb_wide")

    assert report.table_bound["plan"]["max_tables"] == 40 and report.table_bound["plan"]["tables_after"] == 40
    assert len(view_tables(o.state("tb_wide"))) == 40
    assert trino.query(star) == wide  # the default cap: no session property needed any more


def test_the_fewest_tables_merge_one_joins_an_existing_group(omni):
    from governance.table_bound import bound_tables

    first = bound_tables(omni.store, "web", max_tables=7, reads=[])  # a new group takes two: 8 - 2 + 1
    assert len(first["plan"]["merge"]) == 2 and _count(omni) == 7
    plan = plan_table_bound(omni.store, "web", max_tables=6, reads=[])
    group = next(iter(first["plan"]["groups"]))
    assert len(plan.merge) == 1 and plan.tables_after == 6 and list(plan.groups) == [group]  # into the same group


def test_advise_apply_runs_the_planned_merge(omni):
    rows = _rows(omni)
    advice = omni.advise("web", apply=True)
    [applied] = advice.applied
    assert applied["kind"] == "bound" and applied["report"]["plan"]["merge"] == advice.proposals[0].tables
    assert _count(omni) == 5 and _rows(omni) == rows
    assert not omni.advise("web").proposals  # under the bound: nothing more to propose
