"""Co-read groups (governance/coread.py): columns that logged reads join across groups move into one.

A 12-feature table in three column groups of four; a "spread" query names columns of all
three groups, a "together" query names columns of the first. The move must follow the
logged workload (nothing before a read is logged, only what saves joins, nothing twice),
keep every answer, and leave older versions reading the old layout. Embedded SQLite
catalog, real Parquet.
"""

from __future__ import annotations

import json

import pytest

from governance.column_groups import regroup
from governance.coread import MIN_TABLES_JOINED, plan_coread
from omni_iceberg.api import Omni
from omni_iceberg.cli import main as cli_main
from omni_iceberg.demo.wide import wide_features
from tests.pages import pages_jsonl

SPREAD = "SELECT count(*) AS n, avg(w001) AS a, avg(w005) AS b, avg(w009) AS c FROM web WHERE w000 > 10"
TOGETHER = "SELECT count(*) AS n, avg(w002) AS a, avg(w003) AS b FROM web WHERE w000 > 10"
COLUMNS = ["_ai_unique_id_", *[f"w{i:03d}" for i in range(12)]]


@pytest.fixture
def omni(omni_home, tmp_path):
    o = Omni(config=omni_home)
    o.create_table("web")
    features = wide_features(12)
    o.register_features("web", features)
    o.submit("web", [str(pages_jsonl(tmp_path, "a", 9))], batch="a", progress=False)
    o.backfill("web", [f.name for f in features], isolation="inline", progress=False)
    regroup(o.store, "web", max_columns=4)  # w000-w003, w004-w007, w008-w011
    return o


def _tables(omni: Omni, *columns: str, as_of: int | None = None) -> set[str]:
    state = omni.state("web", as_of=as_of)
    return {p.table for c in columns for p in state.read_parts(c)}


def _rows(omni: Omni, as_of: int | None = None):
    return sorted(omni.read("web", columns=COLUMNS, as_of=as_of).to_pylist(), key=lambda r: r["_ai_unique_id_"])


def test_the_spread_columns_move_into_one_table_and_every_answer_stays(omni, monkeypatch):
    import governance.coread as coread

    grouped = omni.state("web")
    assert len(_tables(omni, "w001", "w005", "w009")) == 3
    report = omni.maintain("web")  # nothing logged yet: nothing moves
    assert report.coread is not None and "no read of it is logged" in report.coread["describe"]
    assert omni.state("web").version >= grouped.version and not report.coread.get("split")

    rows, spread, together = _rows(omni), omni.query(SPREAD).to_pylist(), omni.query(TOGETHER).to_pylist()
    for _ in range(2):
        omni.query(SPREAD)
        omni.query(TOGETHER)
    monkeypatch.setattr(coread, "MIN_READS", 4)  # 3 spread reads logged: not due yet
    report = omni.maintain("web")
    assert "not due" in report.coread["describe"] and "split" not in report.coread
    monkeypatch.setattr(coread, "MIN_READS", 3)
    before = omni.state("web")
    report = omni.maintain("web")
    assert "split" in report.coread, report.coread["describe"]
    plan = report.coread["plan"]
    # w005 and w009 leave alone (w000 and w001 tied: the together query reads w000 with w002-w003),
    # 12 tables read; taking the together query's columns along: both read one table, 6 tables read
    assert plan["columns"] == ["w001", "w005", "w009", "w000", "w002", "w003"] and plan["served"] == 3
    assert (plan["joins_before"], plan["joins_after"]) == (12, 6)
    moved = omni.state("web")
    assert moved.operation == "split" and len(_tables(omni, "w000", "w001", "w005", "w009")) == 1  # was 3
    assert _tables(omni, "w000", "w002", "w003") == _tables(omni, "w005")  # the same one table
    assert _tables(omni, "w000", "w002", "w003", as_of=before.version) == _tables(omni, "w001", as_of=before.version)
    assert omni.query(SPREAD).to_pylist() == spread and omni.query(TOGETHER).to_pylist() == together
    assert _rows(omni) == rows
    assert _rows(omni, as_of=before.version) == rows  # the old layout still reads
    assert len(_tables(omni, "w005", "w009", as_of=before.version)) == 2
    # the next run finds the move done
    again = omni.maintain("web").coread
    assert "split" not in again and "nothing to move" in again["describe"]


def test_plan_weighs_the_whole_workload_and_ignores_single_table_reads(omni):
    state = omni.state("web")

    def read(*columns: str) -> dict:
        return {"kind": "sql", "columns": list(columns), "engine": "duckdb", "latency_ms": 1, "tables": 0}

    assert plan_coread(state, [read("w000", "w001")] * 5).empty  # one group: no join to save
    assert MIN_TABLES_JOINED == 3
    assert plan_coread(state, [read("w000", "w004")] * 5).empty  # two tables joined: below the bar
    # reads joining three groups, and more reads of w004 with its group-mate w005: both move
    # along (the second read then reads the new table alone, as the first does)
    plan = plan_coread(state, [read("w000", "w004", "w008")] * 2 + [read("w004", "w005")] * 10)
    assert plan.columns == ["w000", "w004", "w008", "w005"] and (plan.joins_before, plan.joins_after) == (16, 12)
    # ... unless w005 is also read with w006 (taking w004 and w005 along would split that read): w004 stays
    plan = plan_coread(state, [read("w000", "w004", "w008")] * 2 + [read("w004", "w005")] * 10
                       + [read("w005", "w006")] * 10)
    assert plan.columns == ["w000", "w008"] and (plan.joins_before, plan.joins_after) == (26, 24)
    plan = plan_coread(state, [read("w001", "w005", "w009", "w010")] * 2)
    assert plan.columns == ["w001", "w005", "w009", "w010"] and (plan.joins_before, plan.joins_after) == (6, 2)
    assert "w001" in plan.describe()


def test_cli_co_read_dry_run_changes_nothing_and_conflicts_with_split(omni, capsys):
    for _ in range(3):
        omni.query(SPREAD)
    version = omni.state("web").version
    home = str(omni.config.home)
    assert cli_main(["--home", home, "regroup", "web", "--co-read", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] is True and out["plan"]["columns"] and "split" not in out
    assert omni.state("web").version == version
    assert cli_main(["--home", home, "regroup", "web", "--co-read", "--split", "w001"]) != 0
    assert "--co-read" in capsys.readouterr().err
    advice = omni.advise("web")
    kinds = [p.kind for p in advice.proposals]
    assert "coread" in kinds and "materialize" not in kinds  # the move serves those reads: no copy proposed
    assert cli_main(["--home", home, "regroup", "web", "--co-read"]) == 0
    assert "moved -> version" in capsys.readouterr().out
    assert omni.state("web").version == version + 1
