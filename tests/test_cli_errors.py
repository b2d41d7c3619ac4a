"""Bad input anywhere is one clear line with exit code 2, never a Python exception; secrets stay out."""

import json

import pytest

from omni_iceberg.api import Omni
from omni_iceberg.cli import main


@pytest.fixture
def home(tmp_path):
    api = Omni(home=str(tmp_path))
    api.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"text": "<p>one</p>", "src": "s1"}) + "\n")
    api.submit("web", [str(src)], "b1", field_map=["text=raw_data"], progress=False)
    api.register_builtins("web", ["html_parser", "text_length"])
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["rejects", "nope"], "no logical table aidata.nope"),
    (["errors", "nope"], "no logical table aidata.nope"),
    (["status", "web", "--as-of", "1.5"], "no version or tag '1.5'"),
    (["status", "web", "--as-of", "0"], "has no version 0"),
    (["export", "web", "--columns", ",", "--out", "OUT"], "--columns: give at least one"),
    (["backfill", "web", "--features", "text_lenght"], "text_lenght"),
    (["feature", "register", "YAML", "--table", "web"], "expected a mapping"),
    (["feature", "register"], "needs definition files or --builtin"),
    (["tag", "web", "9lives"], "invalid tag '9lives'"),
    (["lineage", ".x"], "use NAME.COLUMN"),
    # an unknown batch is bad input wherever it is named (#40): drop-batch as backfill --batches
    (["drop-batch", "web", "b11"], "aidata.web has no batch 'b11'; did you mean 'b1'? (batches: b1;"),
    (["backfill", "web", "--features", "text_length", "--batches", "b11"],
     "aidata.web has no batch 'b11'; did you mean 'b1'? (batches: b1)"),
    # a bucket count that is no power-of-two multiple or divisor of the current 16
    (["rebucket", "web", "--buckets", "3"], "has 16 id buckets; 3 neither divides nor is a multiple of it, so a "
     "bucket's rows would come from every old bucket. Use one of: 1, 2, 4, 8, 32, 64, 128, 256, 512, 1024"),
    (["rebucket", "web", "--buckets", "0"], "invalid bucket count 0 for aidata.web (it has 16 id buckets; counts go "
     "from 1 to 1024): use one of: 1, 2, 4, 8, 32"),
])
def test_bad_input_is_one_line_and_exit_2(home, capsys, args, message):
    (home / "bad.yaml").write_text("features:\n  - 5\n")
    args = [str(home / "bad.yaml") if a == "YAML" else str(home / "out") if a == "OUT" else a for a in args]
    assert main(["--home", str(home), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "bug" not in err


def test_recorded_command_lines_carry_no_passwords(home):
    secret_uri = "postgresql://etl:S3CRETpw@db:5432/omni"
    assert main(["--home", str(home), "tag", "web", "v1-release", "--version", "1"]) == 0
    assert main(["--home", str(home), "table", "create", "web2", "--comment", secret_uri]) == 0
    recorded = [v.command for v in Omni(home=str(home)).log("web2")]
    assert recorded and all("S3CRETpw" not in c for c in recorded) and "etl:***@db" in recorded[0]
    assert "table create web2" in recorded[0]


@pytest.mark.parametrize("args, message", [
    # time travel the planner cannot honour is refused, never dropped (issue #40)
    (["sql", "SELECT count(*) FROM web FOR SYSTEM_TIME AS OF '2020-01-01'"], "use --as-of N"),
    (["sql", "SELECT count(*) FROM web TIMESTAMP AS OF '2020-01-01'"], "use --as-of N"),
    (["sql", "SELECT count(*) FROM web AT (TIMESTAMP => '2020-01-01')"], "use --as-of N"),
    (["sql", "SELECT count(*) FROM web BEFORE (VERSION => 2)"], "use --as-of N"),
    (["sql", "SELECT count(*) FROM web VERSION AS OF 'v1'"], "use --as-of N"),
    (["sql", "SELECT count(*) FROM web CHANGES (INFORMATION => DEFAULT) AT (VERSION => 1)"],
     "after the table 'web' at line 1, column 22 is not supported in omni sql"),
    (["sql", "SELECT count(*) FROM web VERSION AS OF 1", "--as-of", "2"], "give the version once"),
    (["sql", "SELECT count(*) FROM omni_sys.runs VERSION AS OF 1"], "system tables are logs"),
    # nesting past the limit is the user's query, not a bug in omni (it was exit 70)
    (["sql", "SELECT " + "CASE WHEN true THEN " * 100 + "1" + " END" * 100 + " AS x FROM web"],
     "the query nests 203 levels deep; omni sql allows 128 levels of parentheses, CASE, function calls or "
     "subqueries: flatten it, e.g. with a CTE"),
    (["sql", "SELECT count(*) FROM " + "(SELECT * FROM " * 100 + "web" + ") AS s" * 100],
     "the query nests 304 levels deep; omni sql allows 128 levels"),
    (["sql", "SELECT " + "(" * 5000 + "1" + ")" * 5000 + " FROM web"],
     "the query nests deeper than omni sql allows (128 levels of parentheses, CASE, function calls or subqueries)"),
    (["export", "web", "--out", "OUT", "--where", "(" * 200 + "1 = 1" + ")" * 200],
     "the export filter (--where) nests 202 levels deep; omni sql allows 128 levels"),
    # DuckDB's binder and conversion errors in --where: exit 2 as in omni sql, and no folder left (was 70)
    (["export", "web", "--out", "OUT", "--where", "count(*) > 1"],
     "the export's query failed: Binder Error: WHERE clause cannot contain aggregates!"),
    (["export", "web", "--out", "OUT", "--where", "RawData.raw_data"],
     "the export's query failed: Conversion Error: Could not convert string '<p>one</p>' to BOOL"),
    (["sql", "SELECT count(*) FROM web WHERE RawData.raw_data"],
     "query failed: Conversion Error: Could not convert string '<p>one</p>' to BOOL"),
    # messages in the user's terms (#36)
    (["export", "web", "--out", "OUT", "--where", "x >"],
     "syntax error in the export filter (--where) at line 1, column 3: expected an expression after '>' "
     "(near 'x >')"),
    (["sql", "SELECT src FROM web"], "unknown column 'src' at line 1, column 8; did you mean 'RawData.src'?"),
    (["sql", "SELECT w.srce FROM web AS w"], "unknown column 'w.srce' at line 1, column 10; did you mean 'RawData.src'?"),
    (["export", "web", "--out", "OUT", "--columns", "RawData.raw_data,bogus"],
     "unknown column 'bogus'; the columns are _ai_unique_id_, _ai_append_name_, RawData"),
    (["export", "web", "--out", "OUT", "--columns", "RawData.raw_data,RawData.sr"],
     "unknown column 'RawData.sr'; did you mean 'RawData.src'?"),
    (["sql", "SELECT count(*) FROM web__v2"],
     "web__v2 at line 1, column 22 is the pinned view of version 2 of web (made by omni pin, for Spark and Trino); "
     "in omni sql read web with --as-of 2 (or FROM web VERSION AS OF 2)"),
    (["sql", "SELECT count(*) FROM aidata.web__tag_train_v1"], "in omni sql read aidata.web with --as-of TAG"),
])
def test_bad_sql_is_one_line_and_exit_2(home, capsys, args, message):
    args = [str(home / "out") if a == "OUT" else a for a in args]
    assert main(["--home", str(home), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("omni: error: ")
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1 and "bug" not in captured.err
    assert "sqlglot" not in captured.err and "<class" not in captured.err
    assert not (home / "out").exists(), "a failed export left its folder behind"


@pytest.mark.parametrize("sql, rows", [
    ("SELECT " + "(" * 50 + "41 + 1" + ")" * 50 + " AS x FROM web", [{"x": 42}]),
    ("SELECT count(*) AS n FROM web WHERE " + " AND ".join(["length(RawData.raw_data) > 3"] * 1000), [{"n": 1}]),
    ("SELECT count(*) AS n FROM web WHERE " + " OR ".join([f"length(RawData.raw_data) = {i}" for i in range(1000)]),
     [{"n": 1}]),
    ("SELECT " + "abs(" * 100 + "-1" + ")" * 100 + " AS x FROM web", [{"x": 1}]),
])
def test_deep_but_allowed_sql_is_answered(home, sql, rows):
    """Nesting within the limit is planned and run (50 parentheses and 1,000 ANDs crashed with exit 70)."""
    assert Omni(home=str(home)).query(sql).to_pylist() == rows


@pytest.mark.parametrize("statement", ["RESET threads", "CALL duckdb_settings()", "LOAD httpfs",
                                       "EXPLAIN SELECT 1", "PREPARE p AS SELECT 1", "SHOW TABLES",
                                       "CREATE TYPE mood AS ENUM ('a')"])
def test_refused_statements_print_only_the_error(home, capsys, caplog, statement):
    """sqlglot's 'contains unsupported syntax' warning printed a line of its own before omni's refusal."""
    assert main(["--home", str(home), "sql", statement]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("omni: error: ") and "is not allowed" in err
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sqlglot")] == []


def test_a_refused_statement_is_one_line_from_the_real_command(home):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--home", str(home), "sql", "RESET threads"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["omni: error: RESET is not allowed in the query: only queries are allowed "
                                        "(one SELECT or WITH); omni sql is read-only"]


DEEP_FEATURE = """from omni_iceberg.features import feature


@feature(outputs={"f_deep": "long"}, inputs=["RawData.raw_data"], name="f_deep", filter=FILTER)
def f_deep(raw_data):
    return len(raw_data)
"""


def test_a_feature_filter_nests_like_a_query(home, capsys):
    """A filter with 50 parentheses registers (it crashed with exit 70); one past the limit is refused in one line."""
    definition = home / "deep_features.py"
    definition.write_text(DEEP_FEATURE.replace("FILTER", repr("(" * 200 + "length(raw_data) > 0" + ")" * 200)))
    assert main(["--home", str(home), "feature", "register", str(definition), "--table", "web"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nests 204 levels deep; omni sql allows 128 levels" in err
    definition.write_text(DEEP_FEATURE.replace("FILTER", repr("(" * 50 + "length(raw_data) > 0" + ")" * 50)))
    assert main(["--home", str(home), "feature", "register", str(definition), "--table", "web"]) == 0
    assert Omni(home=str(home)).state("web").feature("f_deep") is not None
