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
    src.write_text(json.dumps({"text": "<p>one</p>"}) + "\n")
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
])
def test_bad_sql_is_one_line_and_exit_2(home, capsys, args, message):
    assert main(["--home", str(home), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("omni: error: ")
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1 and "bug" not in captured.err
