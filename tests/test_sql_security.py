"""omni sql, export and feature filters are read-only: an SQL-escape corpus against the real thing.

Every payload of tests/fixtures/sql_escape_corpus.yaml goes through the real CLI
(``omni sql``, ``omni export --columns/--where``) on a real embedded catalog, and
through the backfill worker's filter evaluation. A canary file outside the warehouse
must never be read and nothing may be written to the ``out`` folder.
"""

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from omni_iceberg.api import Omni
from omni_iceberg.cli import main
from omni_iceberg.read.guard import QueryError
from omni_iceberg.features import feature
from tests import feature_udfs as U

CORPUS = yaml.safe_load((Path(__file__).parent / "fixtures" / "sql_escape_corpus.yaml").read_text())
CANARY_TEXT = "CANARY-7f3a9c-must-never-be-read"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("sec")
    outside = root / "outside"
    outside.mkdir()
    canary = outside / "canary.txt"
    canary.write_text(CANARY_TEXT + "\n")
    out = root / "out"
    out.mkdir()
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"raw_data": f"<p>the page {i} about sqrt and the math module</p>"}) + "\n"
                            for i in range(6)))
    omni = Omni(home=root / "home")
    omni.create_table("web")
    omni.submit("web", [str(docs)], batch="cc")
    omni.register_features("web", [U.t_parse, U.t_lang, U.t_len])
    omni.backfill("web", ["t_len", "t_lang"], isolation="inline")
    return {"omni": omni, "home": str(omni.config.home), "canary": canary, "out": out, "root": root}


def _fill(text, w):
    return (text.replace("{canary}", str(w["canary"])).replace("{canary_dir}", str(w["canary"].parent))
            .replace("{out}", str(w["out"])))


def _assert_no_effect(w, *texts):
    assert not any(w["out"].iterdir()), f"files were written: {list(w['out'].iterdir())}"
    for t in texts:
        assert CANARY_TEXT not in (t or ""), "the canary file was read"


def _check(outcome, expect, code, out, err, w):
    _assert_no_effect(w, out, err)
    if expect == "harmless":
        assert code == 0, f"an inert payload should run: {err}"
    elif expect == "either":
        assert code in (0, 2), err
    else:
        assert code == 2, f"payload was not refused (exit {code}): {out[:300]}"
        assert err.startswith("omni: error: ") and "Traceback" not in err
        assert len(err.strip()) > len("omni: error: ") + 10, "the refusal needs a message"


@pytest.mark.parametrize("case", CORPUS["queries"], ids=[c["sql"][:60] for c in CORPUS["queries"]])
def test_omni_sql_refuses_escapes(world, case, capsys):
    code = main(["--home", world["home"], "sql", _fill(case["sql"], world), "--format", "csv"])
    captured = capsys.readouterr()
    _check(None, case.get("expect", "refused"), code, captured.out, captured.err, world)


@pytest.mark.parametrize("columns", CORPUS["columns"])
def test_export_columns_refuse_escapes(world, columns, capsys, tmp_path):
    code = main(["--home", world["home"], "export", "web", "--out", str(tmp_path / "ex"),
                 "--columns", _fill(columns, world), "--no-progress"])
    captured = capsys.readouterr()
    _check(None, "refused", code, captured.out, captured.err, world)


@pytest.mark.parametrize("case", CORPUS["conditions"], ids=[c["text"][:60] for c in CORPUS["conditions"]])
def test_export_where_refuses_escapes(world, case, capsys, tmp_path):
    code = main(["--home", world["home"], "export", "web", "--out", str(tmp_path / "ex"),
                 "--where", _fill(case["text"], world), "--no-progress"])
    captured = capsys.readouterr()
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "ex").glob("*")) \
        if (tmp_path / "ex").exists() else ""
    _check(None, case.get("expect", "refused"), code, captured.out, captured.err + written, world)


def _with_filter(text):
    @feature(outputs={"f_len": "long"}, inputs=["ProcessedData.parsed_text"], name="f_len", filter=text)
    def f_len(parsed_text):
        return len(parsed_text)

    return f_len.definition


@pytest.mark.parametrize("case", CORPUS["conditions"], ids=[c["text"][:60] for c in CORPUS["conditions"]])
def test_feature_filters_refuse_escapes(world, case):
    from omni_iceberg.backfill.worker import _filter_mask

    data = pa.table({"_ai_unique_id_": ["a", "b"], "_ai_append_name_": ["cc", "cc"],
                     "ProcessedData.parsed_text": ["x", "the page"]})
    expect = case.get("expect", "refused")
    try:
        mask = _filter_mask(_with_filter(_fill(case["text"], world)), data)
    except QueryError as e:
        assert expect != "harmless" and "filter of feature f_len@" in str(e), str(e)
        _assert_no_effect(world, str(e))
        return
    assert expect != "refused", f"filter was not refused: {case['text']}"
    assert mask.to_pylist() == [False, False]
    _assert_no_effect(world)


HOSTILE_FEATURES = '''
from omni_iceberg.features import feature


@feature(outputs={"f_evil": "long"}, inputs=["ProcessedData.parsed_text"], name="f_evil",
         filter=FILTER)
def f_evil(parsed_text):
    return 1
'''


@pytest.mark.parametrize("text, refusal", [
    ("length(parsed_text) > 0 AND getenv('HOME') IS NOT NULL", r"function getenv .* is refused .*environment"),
    ("read_text('{canary}') IS NOT NULL", r"function read_text .* is refused"),
    ("length(parsed_text) > ", r"syntax error in the filter"),
    ("length(raw_data) > 0", r"unknown column 'raw_data' .* only the feature's inputs \(parsed_text\)"),
])
def test_a_bad_filter_is_refused_at_registration_with_the_feature_named(world, tmp_path, capsys, text, refusal):
    """The guard runs at 'omni feature register' (exit 2), not first at the backfill's first batch."""
    omni = world["omni"]
    before = omni.state("web").version
    path = tmp_path / "evil_features.py"
    path.write_text(HOSTILE_FEATURES.replace("FILTER", repr(_fill(text, world))))
    code = main(["--home", world["home"], "feature", "register", str(path), "--table", "web"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("omni: error: feature 'f_evil': invalid filter") and "Traceback" not in err
    import re

    assert re.search(refusal, err), err
    assert omni.state("web").version == before and omni.state("web").feature("f_evil") is None
    _assert_no_effect(world, err)


def test_the_engine_itself_is_locked_even_without_the_guard(world):
    """Second wall: SQL the guard would refuse fails inside DuckDB too."""
    import duckdb

    from omni_iceberg.read.sandbox import locked_duckdb

    con = locked_duckdb({"t": pa.table({"x": [1]})})
    for sql in [f"SELECT * FROM read_text('{world['canary']}')", f"COPY t TO '{world['out']}/x.csv'",
                f"ATTACH '{world['out']}/x.db' AS x", "SET enable_external_access = true", "LOAD httpfs",
                "SET lock_configuration = false"]:
        with pytest.raises(duckdb.Error):
            con.sql(sql).fetchall()
    _assert_no_effect(world)


def test_legitimate_queries_still_run(world):
    omni = world["omni"]
    got = omni.query("WITH x AS (SELECT t_len, lower(t_lang) AS l FROM web WHERE t_len > 0) "
                     "SELECT l, count(*) AS n, sum(t_len) AS s, max(length(l)) AS m FROM x GROUP BY l ORDER BY l")
    assert got.to_pylist()[0]["n"] == 6
    with pytest.raises(QueryError, match="function nonexistent at line 1, column 8 is not on omni sql's allow-list"):
        omni.query("SELECT nonexistent(t_len) FROM web")


@pytest.mark.parametrize("field,value", [
    ("columns", ["t_len FROM read_text('{canary}') --"]),
    ("columns", "t_len, read_text('{canary}')"),
    ("where", "1=1) UNION SELECT content FROM read_text('{canary}') --"),
    ("where", "t_len > 0; COPY (SELECT 1) TO '{out}/m.csv'"),
    ("logical_version", "1; DROP"),
])
def test_a_tampered_export_manifest_is_refused(world, field, value, tmp_path):
    omni = world["omni"]
    first = omni.export("web", str(tmp_path / "ex"), columns=["_ai_unique_id_", "t_len"], where="t_len > 0")
    manifest = tmp_path / "ex" / "_omni_export_manifest.json"
    m = json.loads(manifest.read_text())
    m[field] = [_fill(v, world) for v in value] if isinstance(value, list) else _fill(value, world)
    manifest.write_text(json.dumps(m))
    with pytest.raises(QueryError):
        omni.export_from_manifest(str(manifest), str(tmp_path / "again"))
    _assert_no_effect(world)
    assert first.rows == omni.query("SELECT count(*) AS n FROM web WHERE t_len > 0").column(0)[0].as_py() == 6


REFUSED = [c for c in CORPUS["queries"] if c.get("expect", "refused") == "refused"]


@pytest.mark.parametrize("case", REFUSED, ids=[c["sql"][:60] for c in REFUSED])
def test_the_planner_alone_refuses_every_escape(world, case):
    """First wall on its own: no engine runs, so a refusal here does not lean on the locked DuckDB."""
    from omni_iceberg.explore.planner import plan_query

    with pytest.raises(QueryError):
        plan_query(world["omni"], _fill(case["sql"], world))


def _duckdb_catalog_names():
    """(schema, name) of every function, macro and view a plain DuckDB knows, from its own catalog."""
    import duckdb

    con = duckdb.connect()
    try:
        names = set(con.sql("SELECT schema_name, function_name FROM duckdb_functions()").fetchall())
        names |= set(con.sql("SELECT schema_name, view_name FROM duckdb_views()").fetchall())
        names |= set(con.sql("SELECT table_schema, table_name FROM information_schema.tables").fetchall())
        names |= {("pg_catalog", n) for (n,) in con.sql(
            "SELECT view_name FROM duckdb_views() WHERE schema_name = 'pg_catalog'").fetchall()}
    finally:
        con.close()
    return sorted(names)


#: every way the escape corpus (and the CTE-shadowing report of issue #40) spells a table;
#: {name} is a DuckDB catalog name, {schema} its schema
CATALOG_SPELLINGS = [
    "SELECT * FROM {name}",
    'SELECT * FROM "{name}"',
    "SELECT * FROM {NAME}",
    "FROM {name}",
    "SELECT * FROM {schema}.{name}",
    'SELECT * FROM "{schema}"."{name}"',
    "SELECT * FROM main.{name}",
    "SELECT * FROM system.{schema}.{name}",
    "SELECT * FROM memory.main.{name}",
    "SELECT * FROM {name}()",
    "SELECT * FROM web, {name}()",
    "SELECT * FROM web, {name}",
    "SELECT 1 FROM web JOIN {name} ON TRUE",
    "SELECT * FROM web, LATERAL (SELECT * FROM {name})",
    "SELECT t_len FROM web UNION ALL SELECT 1 FROM {name}",
    "WITH x AS (SELECT * FROM {name}) SELECT * FROM x",
    "SELECT (SELECT 1 FROM {name} LIMIT 1) AS c FROM web",
    "SELECT t_len FROM web WHERE EXISTS (SELECT 1 FROM {name})",
    # a CTE of the name hides it only inside its own WITH's query
    "SELECT {name}.* FROM (WITH {name} AS (SELECT 1 AS x) SELECT x FROM {name}) AS a, {name}, web",
    "WITH a AS (WITH {name} AS (SELECT 1 AS x) SELECT x FROM {name}) SELECT * FROM a, {name}",
    "(WITH {name} AS (SELECT 1 AS x) SELECT x FROM {name}) UNION ALL SELECT 1 FROM {name}",
    "SELECT (WITH {name} AS (SELECT 1 AS x) SELECT x FROM {name}), (SELECT 1 FROM {name} LIMIT 1) FROM web",
    "WITH a AS (SELECT * FROM {name}), {name} AS (SELECT 1 AS x) SELECT * FROM a",
    "WITH {name} AS (SELECT * FROM {name}) SELECT * FROM {name}",
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r, {name} WHERE n < 2) SELECT * FROM r",
    # a subquery's alias is no table name for the queries beside it
    "SELECT * FROM (SELECT 1 AS x) AS {name}, (SELECT * FROM {name})",
]


@pytest.mark.slow
def test_every_duckdb_catalog_function_and_view_is_refused_in_every_spelling(world):
    """No spelling of any name in DuckDB's own catalog (pg_settings, duckdb_settings, information_schema.*) is answered.

    The first wall alone: a refusal here never leans on the locked DuckDB. Every query
    must fail with omni's QueryError - refused while planning, or failing inside the
    engine for a generated name it cannot find - and never return rows.
    """
    omni = world["omni"]
    names = _duckdb_catalog_names()
    assert ("pg_catalog", "pg_settings") in names and ("main", "duckdb_settings") in names and len(names) > 1000
    answered = []
    for schema, name in names:
        for spelling in CATALOG_SPELLINGS:
            sql = spelling.format(name=name, NAME=name.upper(), schema=schema)
            try:
                rows = omni.query(sql)
            except QueryError as e:
                assert str(e), sql
                continue
            answered.append((sql, rows.num_rows))
    assert answered == [], f"{len(answered)} answered, e.g. {answered[:5]}"
    _assert_no_effect(world)


def test_a_cte_does_not_hide_a_catalog_view_outside_its_scope(world, capsys):
    """Issue #40: a CTE named pg_settings inside a subquery let an outer pg_settings reach DuckDB's settings."""
    sql = ("SELECT pg_settings.name, pg_settings.setting FROM (WITH pg_settings AS (SELECT 1 AS x) "
           "SELECT x FROM pg_settings) AS a, pg_settings, web "
           "WHERE pg_settings.name IN ('secret_directory','enable_external_access') GROUP BY 1, 2")
    code = main(["--home", world["home"], "sql", sql, "--format", "csv"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.strip() == ("omni: error: unknown logical table 'aidata.pg_settings' at line 1, column 121 "
                                    "(known: aidata.web)")
    with pytest.raises(QueryError, match="unknown logical table 'aidata.pg_settings'"):
        world["omni"].query(sql)


@pytest.mark.parametrize("sql, rows", [
    # a CTE hides the logical table of its name inside its WITH's query, nowhere else
    ("WITH web AS (SELECT 41 AS t_len) SELECT t_len, (SELECT count(*) FROM aidata.web) AS n FROM web",
     [{"t_len": 41, "n": 6}]),
    ("SELECT count(*) AS n, sum(web.t_len) AS s FROM (WITH web AS (SELECT 1 AS t_len) SELECT t_len FROM web) AS a, web",
     [{"n": 6, "s": 54}]),
    ("SELECT (WITH web AS (SELECT 7 AS t_len) SELECT max(t_len) FROM web) AS a, (SELECT max(t_len) FROM web) AS b",
     [{"a": 7, "b": 9}]),
    ("WITH web AS (SELECT 2 AS t_len) SELECT (SELECT max(t_len) FROM web) AS m, (SELECT count(*) FROM aidata.web) AS n",
     [{"m": 2, "n": 6}]),
    ("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 5) "
     "SELECT sum(n) AS s, (SELECT count(*) FROM web) AS c FROM r", [{"s": 15, "c": 6}]),
    # columns of subqueries and CTEs, and correlated columns, bind in their own scope
    ("SELECT max(s.n) AS m FROM (SELECT t_len AS n FROM web) AS s", [{"m": 9}]),
    ("WITH c(n) AS (SELECT t_len FROM web) SELECT sum(n) AS s FROM c", [{"s": 54}]),
    ("SELECT count(*) AS n FROM web AS w WHERE t_len = "
     "(SELECT max(t_len) FROM web AS v WHERE v._ai_unique_id_ = w._ai_unique_id_)", [{"n": 6}]),
])
def test_table_and_column_names_resolve_by_sql_scope(world, sql, rows):
    assert world["omni"].query(sql).to_pylist() == rows
