"""README's benchmark table is generated from benchmarks/results, so the two cannot drift."""

from __future__ import annotations

from benchmarks.common import headline
from benchmarks.report import README, README_BEGIN, README_END, load_results, readme_rows, readme_table


def test_readme_table_is_what_the_report_writes_from_the_stored_results() -> None:
    readme = README.read_text()
    begin, end = readme.index(README_BEGIN), readme.index(README_END) + len(README_END)
    assert readme[begin:end] == readme_table(load_results()), \
        "README's benchmark table differs from benchmarks/results: run python -m benchmarks.report"


def _doc(name: str, heads: list[dict]) -> dict:
    return {"benchmark": name, "result_name": name, "date": "2026-12-03T00:00:00", "headline": heads,
            "git": {"commit": "abc1234"}, "machine": {"nproc": 2, "load_average": [1.26, 1.0, 0.9]}}


def test_rows_keep_targets_peers_and_misses_and_say_where_they_come_from() -> None:
    rows = readme_rows([
        _doc("speed", [headline("omni / floor", 0.37, "x", ">= 0.5", False),
                       headline("diagnostic ratio", 2.0, "x"),
                       headline("DuckDB on the same files / omni", 0.3, "x", peer=True)]),
        _doc("costs", [headline("REST / JDBC", 11.9, "x"), headline("second figure", 1.0, "x")]),
    ])
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [
        ("omni / floor", "0.37x", ">= 0.5", "**not met**"),
        ("DuckDB on the same files / omni", "0.30x", "report", "-"),
        ("REST / JDBC", "11.90x", "report", "-"),  # no target anywhere: the first figure stands for it
    ]
    assert rows[0][5] == "abc1234, 2026-12-03, 2 cores, load 1.3"


def test_a_result_without_headline_figures_is_refused_not_left_out(tmp_path, monkeypatch) -> None:
    import json

    import pytest

    import benchmarks.report as report

    (tmp_path / "good.json").write_text(json.dumps(_doc("good", [headline("a / b", 1.0, "x")])))
    (tmp_path / "misnamed.json").write_text(json.dumps({"benchmark": "misnamed", "headlines": []}))
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    with pytest.raises(SystemExit, match="misnamed.json"):
        report.load_results()
