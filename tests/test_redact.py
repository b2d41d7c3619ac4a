"""Credentials never reach messages, recorded command lines or the query log (a secret canary)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from catalog_ext.errors import ConfigError, InvalidIdentifierError
from catalog_ext.redact import MASK, redact, redact_argv, redact_command, redact_mapping
from omni_iceberg.api import Omni
from omni_iceberg.cli import main

SECRET = "SECRETPW-canary-91c2"
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text", [
    f"postgresql+psycopg://u:{SECRET}@db.example:5432/omni",
    f"cannot open catalog 'mysql://root:{SECRET}@h/x'",
    f"OMNI_CATALOG=postgresql://a:{SECRET}@c/d",
    f"s3.secret-access-key={SECRET}",
    f"aws_secret_access_key = {SECRET}",
    f'{{"password": "{SECRET}", "user": "u"}}',
    f"https://rest.example/v1?token={SECRET}&x=1",
    f"Authorization: Bearer {SECRET}",
    f"credential: {SECRET}",
    f"--client-secret={SECRET}",
])
def test_redact_removes_the_secret_and_is_idempotent(text):
    once = redact(text)
    assert SECRET not in once and MASK in once
    assert redact(once) == once


def test_redact_keeps_what_is_not_secret():
    for text in ["SELECT t_len FROM web WHERE t_len > 5", "sqlite:////home/u/.omni/catalog.db", "tokenizer=gpt2",
                 "http://localhost:8181/catalog", "user=alice host=db"]:
        assert redact(text) == text


def test_argv_command_and_mappings():
    argv = ["--catalog", f"postgresql://u:{SECRET}@h/db", "--s3-secret-key", SECRET, f"--token={SECRET}",
            "sql", "SELECT 1"]
    assert SECRET not in " ".join(redact_argv(argv))
    assert redact_argv(argv)[-2:] == ["sql", "SELECT 1"]
    assert SECRET not in redact_command(argv) and redact_command(argv).startswith("omni --catalog ")
    event = {"run": {"facets": {"cmd": f"omni --catalog postgresql://u:{SECRET}@h/db backfill web"}},
             "properties": {"rest.password": SECRET, "uri": "http://h"}}
    assert SECRET not in json.dumps(redact_mapping(event))


def test_catalog_open_failure_does_not_print_the_password(tmp_path, capsys):
    uri = f"postgresql+psycopg://u:{SECRET}@127.0.0.1:1/omni"  # nothing listens on port 1
    code = main(["--catalog", uri, "--warehouse", f"file://{tmp_path}/wh", "table", "list"])
    err = capsys.readouterr().err
    assert code == ConfigError.exit_code and "cannot open catalog" in err and "u:***@127.0.0.1:1" in err
    assert SECRET not in err


def test_query_log_stores_the_sql_redacted(tmp_path):
    omni = Omni(home=tmp_path / "home")
    omni.create_table("web")
    docs = tmp_path / "d.jsonl"
    docs.write_text(json.dumps({"raw_data": "<p>x</p>"}) + "\n")
    omni.submit("web", [str(docs)], batch="b")
    omni.query(f"SELECT count(*) FROM web WHERE _ai_append_name_ <> 'password={SECRET}'")
    omni.flush_query_log()
    logged = [r["sql"] for r in omni.catalog.load_table("omni_sys.query_log").scan().to_arrow().to_pylist()]
    assert logged and all(SECRET not in s for s in logged) and "password=***" in logged[-1]


@pytest.mark.parametrize("name", ["omni_sys.query_log", "omni_sys.rejects", "OMNI_SYS.mine", "Omni_Sys.web"])
def test_the_system_namespace_is_reserved(tmp_path, name, capsys):
    omni = Omni(home=tmp_path / "home")
    with pytest.raises(InvalidIdentifierError, match="'omni_sys' is reserved for omni's system tables"):
        omni.create_table(name)
    assert main(["--home", str(omni.config.home), "table", "create", name]) == 2
    assert "reserved" in capsys.readouterr().err
    omni.create_table("web")  # and queries keep working: the system tables were not shadowed
    assert omni.query("SELECT count(*) AS n FROM web").to_pylist() == [{"n": 0}]


MB = 1 << 20
#: inputs on which a backtracking pattern takes time quadratic in their length (Python expressions, built
#: in the child process); a password placed after each must still be found
ADVERSARIAL = {
    "repeated a": "'a' * MB",
    "repeated a=": "'a=' * (MB // 2)",
    "long quoted literal": "\"SELECT count(*) FROM web WHERE raw_data = '\" + 'a' * MB + \"'\"",
    "many key=value pairs": "'&'.join(f'k{i}=v{i}' for i in range(MB // 12))",
    "secret words without a separator": "'token' * (MB // 5)",
    "a long dotted word": "'a.' * (MB // 2)",
    "uri heads without a host": "'x://a:' * (MB // 6)",
    "a key then blanks": "'password' + ' ' * MB",
}


@pytest.mark.parametrize("shape", sorted(ADVERSARIAL))
def test_redact_takes_linear_time_on_adversarial_megabytes(shape):
    code = f"""
from catalog_ext.redact import is_secret_name, redact, redact_argv
MB = {MB}
text = {ADVERSARIAL[shape]}
ending = " password={SECRET} postgresql://u:{SECRET}@db:5432/omni"
assert redact(text + ending) == text + " password=*** postgresql://u:***@db:5432/omni"
assert redact(text) == text
assert redact_argv(["--" + text + "!", "--catalog", "postgresql://u:{SECRET}@db/omni"])[1:] == [
    "--catalog", "postgresql://u:***@db/omni"]
assert not is_secret_name("--" + text + "!")
"""
    # a generous bound in a child process: before, 16,000 characters took 13 s and a megabyte hours
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, timeout=20, check=True)
