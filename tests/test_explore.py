"""Exploration end to end on real documents: logical SQL, pruning, versions, export, query log."""

import json
import time

import pytest

from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from omni_iceberg.cli import main
from catalog_ext.errors import ConfigError, NoSuchVersionError
from omni_iceberg.explore.export import ExportError
from tests import feature_udfs as U


@pytest.fixture
def omni(tmp_path):
    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:40]
    o = Omni(home=tmp_path / "home")
    o.create_table("web")
    o.submit("web", [str(p) for p in pages[:25]], batch="cc")
    o.submit("web", [str(p) for p in pages[25:]], batch="wiki")
    o.register_features("web", [U.t_parse, U.t_lang, U.t_len, U.t_digits])
    o.backfill("web", ["t_len", "t_lang", "t_digits"], isolation="inline")
    return o


def test_logical_query_matches_a_direct_computation(omni):
    rows = omni.read("web", columns=["_ai_append_name_", "t_len", "t_lang"]).to_pylist()
    expected = {}
    for r in rows:
        if r["t_lang"] == "en" and r["t_len"] > 100:
            expected[r["_ai_append_name_"]] = expected.get(r["_ai_append_name_"], 0) + r["t_len"]
    got = omni.query("SELECT _ai_append_name_ AS b, sum(t_len) AS words FROM web "
                     "WHERE t_lang = 'en' AND t_len > 100 GROUP BY 1 ORDER BY 1").to_pylist()
    assert {r["b"]: r["words"] for r in got} == expected


def test_only_needed_tables_batches_and_rows_are_read(omni):
    from omni_iceberg.explore.planner import plan_query, scan_arrow

    plan = plan_query(omni, "SELECT count(*) FROM web WHERE _ai_append_name_ = 'wiki' AND t_len > 500")
    # t_len > 500 drops every row without a t_len: the base table is not read at all
    assert [s.table.identifier.split("__")[1] for s in plan.scans] == [f"f_t_len_{U.t_len.definition.version}"]
    data = scan_arrow(omni, plan, plan.scans[0])
    assert set(data.column("_ai_append_name_").to_pylist()) == {"wiki"} and min(data.column("t_len").to_pylist()) > 500
    assert "base table not read: " in plan.explain()
    explain = omni.explain("SELECT RawData.raw_data FROM web")
    assert "pruned (not read)" in explain and "f_t_len" in explain.split("pruned (not read):")[1]


SKIP_BASE_QUERIES = [
    "SELECT count(*) AS n FROM web WHERE t_len > 100",
    "SELECT count(*) AS n FROM web WHERE t_len IS NULL",
    "SELECT t_lang, count(*) AS n, avg(t_len) AS a FROM web GROUP BY t_lang ORDER BY t_lang NULLS FIRST",
    "SELECT avg(t_len) AS a, max(t_len) AS m, count(t_len) AS c FROM web",
    "SELECT count(*) AS n, sum(coalesce(t_len, 0)) AS s FROM web",
    "SELECT _ai_append_name_ AS b, count(t_digits) AS c FROM web WHERE t_lang = 'en' GROUP BY 1 ORDER BY 1",
]


def test_skipping_the_base_table_gives_the_same_answers(omni, tmp_path, monkeypatch):
    from omni_iceberg.explore import rules
    from omni_iceberg.explore.planner import plan_query

    def answers_and_base_reads():
        plans = [plan_query(omni, q) for q in SKIP_BASE_QUERIES]
        fast = [omni.query(q).to_pylist() for q in SKIP_BASE_QUERIES]
        with monkeypatch.context() as m:  # the same queries, the base table always read
            m.setattr(rules, "RULES", tuple(r for r in rules.RULES if r.__name__ != "skip_base_table"))
            slow = [omni.query(q).to_pylist() for q in SKIP_BASE_QUERIES]
            assert all(p.to_dict()["tables"][0]["base_table_read"] for p in map(lambda q: plan_query(omni, q),
                                                                                 SKIP_BASE_QUERIES))
        assert fast == slow
        return [p.to_dict()["tables"][0]["base_table_read"] for p in plans]

    # every row has every feature: metadata row counts prove it, so even GROUP BY with count(*) skips
    assert answers_and_base_reads() == [False, False, False, False, False, False]
    extra = tmp_path / "x.jsonl"
    extra.write_text("".join(json.dumps({"raw_data": f"<p>late page {i}</p>"}) + "\n" for i in range(3)))
    omni.submit("web", [str(extra)], batch="late")  # rows without any feature value
    # now only filters that reject NULL and NULL-ignoring aggregates may skip it
    assert answers_and_base_reads() == [False, True, True, False, True, False]


def test_point_lookup_by_id_plans_one_file_per_table(omni):
    from omni_iceberg.explore.planner import plan_query

    from omni_iceberg.explore.planner import _to_iceberg

    some_id = omni.read("web", columns=["_ai_unique_id_"]).column(0)[0].as_py()
    plan = plan_query(omni, f"SELECT t_len FROM web WHERE _ai_unique_id_ = '{some_id}'")
    assert plan.scans
    for scan in plan.scans:
        table = omni.catalog.load_table(scan.table.identifier)
        # without the filter there is more than one file to choose from, so "one" is pruning
        assert len(list(table.scan(snapshot_id=scan.table.snapshot_id).plan_files())) > 1
        expr = _to_iceberg(scan.filters[0], plan.ctx, plan.ctx.tables["web"].state, scan.table.key)
        files = list(table.scan(row_filter=expr, snapshot_id=scan.table.snapshot_id).plan_files())
        assert len(files) == 1
    assert omni.query(f"SELECT t_len FROM web WHERE _ai_unique_id_ = '{some_id}'").num_rows == 1


def test_as_of_pins_a_version_and_unknown_versions_fail(omni, tmp_path):
    v = omni.state("web").version
    before = omni.query("SELECT count(*) AS n FROM web").column(0)[0].as_py()
    extra = tmp_path / "x.jsonl"
    extra.write_text(json.dumps({"raw_data": "<p>one more page about the sqrt of math</p>"}) + "\n")
    omni.submit("web", [str(extra)], batch="later")
    assert omni.query("SELECT count(*) AS n FROM web", as_of=v).column(0)[0].as_py() == before
    assert omni.query("SELECT count(*) AS n FROM web").column(0)[0].as_py() == before + 1
    with pytest.raises(NoSuchVersionError, match="no version 999"):
        omni.query("SELECT count(*) FROM web", as_of=999)


def test_join_between_logical_tables(omni, tmp_path):
    omni.create_table("mirror")
    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:10]
    omni.submit("mirror", [str(p) for p in pages], batch="m")
    got = omni.query("SELECT count(*) AS n, sum(w.t_len) AS s FROM web AS w JOIN mirror AS m "
                     "ON w._ai_unique_id_ = m._ai_unique_id_").to_pylist()[0]
    mirrored = set(omni.read("mirror", columns=["_ai_unique_id_"]).column(0).to_pylist())
    lengths = [r["t_len"] for r in omni.read("web", columns=["_ai_unique_id_", "t_len"]).to_pylist()
               if r["_ai_unique_id_"] in mirrored]
    assert got["n"] == len(lengths) == 10 and got["s"] == sum(lengths) and None not in lengths


def test_export_streams_and_re_creates_byte_for_byte(omni, tmp_path, monkeypatch):
    from omni_iceberg.explore import export as export_module

    written = []  # (file, rows) of every write: the export goes part by part, never all rows at once
    real_write = export_module._write

    def spy(data, path, fmt):
        written.append((path.name, data.num_rows))
        return real_write(data, path, fmt)

    monkeypatch.setattr(export_module, "_write", spy)
    out = tmp_path / "ex1"
    r = omni.export("web", str(out), columns=["_ai_unique_id_", "t_len", "t_lang", "RawData.raw_data"],
                    where="t_lang = 'en'", fmt="parquet")
    m = r.manifest
    # pieces are written in parallel, so in any order
    assert sorted(written) == sorted((f["file"], f["rows"]) for f in m["files"]) and len(written) > 1
    assert max(n for _, n in written) < m["rows"] == sum(n for _, n in written)
    assert {f["batch"] for f in m["files"]} == {"cc", "wiki"}
    written.clear()
    assert m["rows"] == omni.query("SELECT count(*) FROM web WHERE t_lang = 'en'").column(0)[0].as_py()
    assert m["feature_versions"]["t_len"] == U.t_len.definition.version
    assert set(m["pinned_snapshots"]) >= set(m["read_tables"]) and m["files"]
    # how Spark SQL and Trino read the same rows: the version's pinned view, made by the command given
    view = f"aidata.web__v{m['logical_version']}"
    assert m["engine_reads"]["make_view"] == f"omni pin aidata.web {m['logical_version']}"
    assert m["engine_reads"]["spark"] == m["engine_reads"]["trino"] == (
        f"SELECT _ai_unique_id_, t_len, t_lang, RawData.raw_data FROM {omni.config.catalog_name}.{view} "
        "WHERE (t_lang = 'en')")
    # later ingest + backfill + new feature version must not change a replay
    extra = tmp_path / "x.jsonl"
    extra.write_text(json.dumps({"raw_data": "<p>the late page</p>"}) + "\n")
    omni.submit("web", [str(extra)], batch="late")
    omni.backfill("web", ["t_len"], isolation="inline")
    again = omni.export_from_manifest(str(out), str(tmp_path / "ex2"))
    assert [f["sha256"] for f in again.manifest["files"]] == [f["sha256"] for f in m["files"]]
    for f in m["files"]:
        assert (out / f["file"]).read_bytes() == (tmp_path / "ex2" / f["file"]).read_bytes()
    with pytest.raises(ExportError, match="not empty"):
        omni.export("web", str(out))
    jl = omni.export("web", str(tmp_path / "jl"), columns=["_ai_unique_id_", "t_len"], fmt="jsonl")
    first = json.loads((tmp_path / "jl" / jl.manifest["files"][0]["file"]).read_text().splitlines()[0])
    assert set(first) == {"_ai_unique_id_", "t_len"}


def test_export_cuts_big_parts_into_pieces_and_a_replay_cuts_them_the_same(omni, tmp_path, monkeypatch):
    """Pieces written in parallel hold the part's rows in id order; a replay on a machine
    with another core count writes the same files (it cuts where the manifest says)."""
    import pyarrow.parquet as pq

    from omni_iceberg.explore import export as export_module

    monkeypatch.setattr(export_module, "PIECE_MIN_BYTES", 1)
    monkeypatch.setenv("OMNI_EXPORT_WRITERS", "3")
    cols = ["_ai_unique_id_", "t_len", "RawData.raw_data"]
    first = omni.export("web", str(tmp_path / "a"), columns=cols, where="t_len > 0")
    by_part: dict = {}
    for f in first.manifest["files"]:
        by_part.setdefault((f["batch"], f["bucket"]), []).append(f)
    assert any(len(v) == 3 for v in by_part.values())
    for files in by_part.values():  # the pieces of a part, in name order, are the part sorted by id
        ids = [i for f in sorted(files, key=lambda f: f["file"])
               for i in pq.read_table(tmp_path / "a" / f["file"]).column(0).to_pylist()]
        assert ids == sorted(ids) and len(ids) == sum(f["rows"] for f in files)
    expected = omni.query("SELECT count(*) FROM web WHERE t_len > 0").column(0)[0].as_py()
    assert first.rows == expected == sum(f["rows"] for f in first.manifest["files"])
    monkeypatch.setenv("OMNI_EXPORT_WRITERS", "1")
    again = omni.export_from_manifest(str(tmp_path / "a"), str(tmp_path / "b"))
    assert [(f["file"], f["sha256"]) for f in again.manifest["files"]] == \
        [(f["file"], f["sha256"]) for f in first.manifest["files"]]
    monkeypatch.setenv("OMNI_EXPORT_WRITERS", "many")
    with pytest.raises(ConfigError, match=r"OMNI_EXPORT_WRITERS='many' \(environment\): expected a whole number"):
        omni.export("web", str(tmp_path / "c"), columns=cols)


def test_query_log_records_columns_filters_batches(omni):
    started = time.perf_counter()
    omni.query("SELECT avg(t_len) FROM web WHERE _ai_append_name_ = 'cc' AND t_digits < 0.5")
    measured_ms = (time.perf_counter() - started) * 1000
    assert omni.flush_query_log() >= 1  # queries spool their log rows
    log = max(omni.catalog.load_table("omni_sys.query_log").scan().to_arrow().to_pylist(), key=lambda r: r["at"])
    assert log["logical_table"] == "aidata.web" and log["kind"] == "sql" and log["engine"] == "local"
    assert json.loads(log["columns"]) == ["_ai_unique_id_", "_ai_append_name_", "t_len", "t_digits"]
    assert json.loads(log["filter_columns"]) == ["_ai_append_name_", "t_digits"]
    assert json.loads(log["batches"]) == ["cc"] and log["rows"] == 1
    assert 0 < log["latency_ms"] <= measured_ms + 1  # the logged time is the call's own


def test_cli_sql_formats_explain_and_dialects(omni, capsys):
    home = str(omni.config.home)
    assert main(["--home", home, "sql", "SELECT _ai_append_name_, count(*) AS n FROM web GROUP BY 1 ORDER BY 1",
                 "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["_ai_append_name_,n", "cc,25", "wiki,15"]
    assert main(["--home", home, "sql", "SELECT t_len FROM web", "--dialect", "trino"]) == 0
    assert "FOR VERSION AS OF" in capsys.readouterr().out
    assert main(["--home", home, "sql", "SELECT t_len FROM web", "--explain"]) == 0
    assert "scan aidata.web__f_t_len" in capsys.readouterr().out
    assert main(["--home", home, "sql", "SELECT nope FROM web"]) == 2
    assert "unknown column 'nope' at line 1, column 8" in capsys.readouterr().err


def test_system_tables_read_only_json_numbers_and_explain_data(omni, capsys):
    from omni_iceberg.explore.planner import plan_query

    home = str(omni.config.home)
    omni.query("SELECT count(*) FROM web")
    assert main(["--home", home, "sql", "SELECT kind, count(*) AS n, sum(rows) AS r FROM omni_sys.query_log "
                 "GROUP BY kind", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["kind"] == "sql" and type(row["n"]) is int and type(row["r"]) is int
    # a sum of a long feature is a JSON number, not a string
    assert main(["--home", home, "sql", "SELECT _ai_append_name_ AS b, sum(t_len) AS s FROM web GROUP BY 1 ORDER BY 1",
                 "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    sums: dict[str, int] = {}
    for r in omni.read("web", columns=["_ai_append_name_", "t_len"]).to_pylist():
        sums[r["_ai_append_name_"]] = sums.get(r["_ai_append_name_"], 0) + (r["t_len"] or 0)
    assert [r["b"] for r in rows] == ["cc", "wiki"] and all(type(r["s"]) is int for r in rows)
    assert {r["b"]: r["s"] for r in rows} == sums
    # joined with a logical table, still read-only: every logged query of web times every cc row
    omni.flush_query_log()
    logged = sum(r["logical_table"] == "aidata.web"
                 for r in omni.catalog.load_table("omni_sys.query_log").scan().to_arrow().to_pylist())
    got = omni.query("SELECT count(*) AS n FROM omni_sys.query_log AS q JOIN web AS w "
                     "ON q.logical_table = 'aidata.web' AND w._ai_append_name_ = 'cc'").to_pylist()
    assert logged > 0 and got[0]["n"] == logged * 25
    assert main(["--home", home, "sql", "DELETE FROM omni_sys.query_log"]) == 2
    assert "DELETE is not allowed" in capsys.readouterr().err
    data = plan_query(omni, "SELECT avg(t_len) FROM web WHERE t_lang = 'en'").to_dict()
    assert json.loads(json.dumps(data)) == data
    entry = data["tables"][0]
    assert entry["logical_table"] == "aidata.web" and entry["base_table_read"] is False
    assert len(entry["scans"]) == 2 and not any(s["table"].endswith("__base") for s in entry["scans"])


def test_a_filter_outside_a_limited_subquery_is_not_pushed_into_its_scans(omni):
    """The outer WHERE filters the subquery's 3 rows; read early it would pick 3 other rows (and batches)."""
    rows = omni.read("web", columns=["_ai_unique_id_", "_ai_append_name_", "t_len"]).to_pylist()
    smallest = sorted(r["t_len"] for r in rows)[:3]
    threshold = sorted(r["t_len"] for r in rows)[len(rows) // 2]
    got = omni.query(f"SELECT count(*) AS n FROM (SELECT t_len FROM web ORDER BY t_len LIMIT 3) AS s "
                     f"WHERE t_len > {threshold}").to_pylist()
    assert got == [{"n": sum(1 for x in smallest if x > threshold)}] == [{"n": 0}]
    first = sorted(rows, key=lambda r: r["_ai_unique_id_"])[:5]
    got = omni.query("SELECT count(*) AS n FROM (SELECT _ai_append_name_ FROM web ORDER BY _ai_unique_id_ LIMIT 5) "
                     "WHERE _ai_append_name_ = 'wiki'").to_pylist()
    assert got == [{"n": sum(1 for r in first if r["_ai_append_name_"] == "wiki")}]


@pytest.mark.parametrize("clause", ["AT (VERSION => {v})", "VERSION AS OF {v}", "FOR VERSION AS OF {v}"])
def test_a_version_clause_reads_that_logical_version_like_as_of(omni, clause):
    """Issue #40: the clause was dropped, so AT (VERSION => 1) answered today's 40 rows."""
    from omni_iceberg.read.guard import QueryError

    for v, n in ((1, 0), (2, 25), (3, 40)):
        sql = f"SELECT count(*) AS n FROM web {clause.format(v=v)}"
        assert omni.query(sql).to_pylist() == [{"n": n}] == omni.query("SELECT count(*) AS n FROM web",
                                                                        as_of=v).to_pylist()
    # t_len was registered at version 4: at version 3 it does not exist (it was read from today before)
    with pytest.raises(QueryError, match="unknown column 't_len'"):
        omni.query(f"SELECT max(t_len) FROM web {clause.format(v=3)}")
    # each table reference at its own version
    got = omni.query(f"SELECT (SELECT count(*) FROM web {clause.format(v=2)}) AS old, "
                     f"(SELECT count(*) FROM web AS w) AS now").to_pylist()
    assert got == [{"old": 25, "now": 40}]
    assert omni.query(f"SELECT count(*) AS n FROM web {clause.format(v=2)}", as_of=2).to_pylist() == [{"n": 25}]
    with pytest.raises(QueryError, match="asks for version 2 but --as-of asks for 3; give the version once"):
        omni.query(f"SELECT count(*) FROM web {clause.format(v=2)}", as_of=3)


@pytest.mark.parametrize("sample, n", [
    ("TABLESAMPLE reservoir(5 ROWS)", 5),
    ("TABLESAMPLE reservoir(5 ROWS) REPEATABLE (7)", 5),
    ("TABLESAMPLE bernoulli(0 PERCENT)", 0),
    ("TABLESAMPLE bernoulli(100 PERCENT)", 40),
    ("USING SAMPLE reservoir(7 ROWS)", 7),
    ("AS w USING SAMPLE 3 ROWS", 3),
])
def test_a_sample_clause_samples_the_logical_rows(omni, sample, n):
    """Issue #40: TABLESAMPLE on a logical table was dropped and every row came back."""
    assert omni.query(f"SELECT count(*) AS n FROM web {sample}").to_pylist() == [{"n": n}]


def test_a_sampled_table_is_read_whole_before_its_filter(omni):
    """The sample is drawn before WHERE: filters pushed into the scans or batch pruning would draw from fewer rows."""
    for sql in ("SELECT count(*) AS n FROM web TABLESAMPLE reservoir(5 ROWS) "
                "WHERE t_len > 100 AND _ai_append_name_ = 'wiki'",
                "SELECT avg(t_len) AS a FROM web USING SAMPLE reservoir(5 ROWS)"):
        plan = omni.explain_dict(sql)["tables"][0]
        assert plan["batches"] is None and all(not s["pushed"] for s in plan["scans"])
    rows = omni.read("web", columns=["t_len"]).to_pylist()
    got = omni.query("SELECT count(*) AS n FROM web TABLESAMPLE bernoulli(100 PERCENT) WHERE t_len > 100").to_pylist()
    assert got == [{"n": sum(1 for r in rows if r["t_len"] > 100)}]


def test_a_pivot_on_a_logical_table_is_kept(omni):
    """PIVOT after a logical table was dropped with the table name (the rows came back unpivoted)."""
    from collections import Counter

    langs = Counter(r["t_lang"] for r in omni.read("web", columns=["t_lang"]).to_pylist())
    got = omni.query("SELECT * FROM web PIVOT (count(*) FOR t_lang IN ('en', 'xx'))")
    assert "t_lang" not in got.column_names and {"en", "xx"} <= set(got.column_names)
    assert (sum(got.column("en").to_pylist()), sum(got.column("xx").to_pylist())) == (langs["en"], langs["xx"])
    got = omni.query("SELECT sum(en) AS en, sum(p.xx) AS xx FROM web PIVOT (count(*) FOR t_lang IN ('en', 'xx')) AS p")
    assert got.to_pylist() == [{"en": langs["en"], "xx": langs["xx"]}]


def test_is_null_on_the_optional_side_of_an_outer_join_is_not_pushed_into_its_scan(omni):
    """Pushed into mirror's scan, m._ai_unique_id_ IS NULL kept no mirror row, so every web row matched 'nothing'."""
    omni.create_table("mirror")
    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:10]
    omni.submit("mirror", [str(p) for p in pages], batch="m")
    total = omni.query("SELECT count(*) AS n FROM web").to_pylist()[0]["n"]
    join = "FROM web AS w LEFT JOIN mirror AS m ON w._ai_unique_id_ = m._ai_unique_id_"
    assert omni.query(f"SELECT count(*) AS n {join} WHERE m._ai_unique_id_ IS NULL").to_pylist() == [{"n": total - 10}]
    assert omni.query(f"SELECT count(*) AS n {join} WHERE m._ai_append_name_ = 'm'").to_pylist() == [{"n": 10}]
    right = "FROM mirror AS m RIGHT JOIN web AS w ON w._ai_unique_id_ = m._ai_unique_id_"
    assert omni.query(f"SELECT count(*) AS n {right} WHERE m._ai_append_name_ IS NULL").to_pylist() == [{"n": total - 10}]
