"""The omni command: exit codes, one-line errors, --json output."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from omni_iceberg.cli import main

ROOT = Path(__file__).resolve().parents[1]


def omni(*args, home):
    proc = subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--home", str(home), *args], cwd=ROOT,
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_submit_json_and_status_json(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one"}\n{"text": "two"}\n{"text": "one"}\n{"text": ""}\n')
    assert omni("table", "create", "web", home=tmp_path)[0] == 0
    code, out, err = omni("submit", "web", str(src), "--batch", "b1", "--map", "text=raw_data", "--json",
                          home=tmp_path)
    assert code == 0, err
    assert json.loads(out) == {"batch": "b1", "read": 4, "written": 2, "duplicates": 1, "rejected": 1,
                               "logical_version": 2, "already_committed": False}
    assert f"{src}:4: field 'raw_data': empty raw content" in err
    code, out, _ = omni("--json", "status", "web", home=tmp_path)
    st = json.loads(out)
    assert st["logical_version"] == 2 and st["rows"] == 2 and st["batches"][0]["name"] == "b1"
    # files and bytes are those of the snapshot the logical version pins, as Iceberg lists them
    from omni_iceberg.api import Omni

    base = st["physical_tables"][0]
    files = Omni(home=tmp_path).catalog.load_table(base["identifier"]).inspect.files(
        snapshot_id=base["snapshot_id"]).to_pylist()
    assert base["files"] == sum(f["content"] == 0 for f in files) and base["files"] >= 1
    assert base["bytes"] == sum(f["file_size_in_bytes"] for f in files)
    assert base["records"] == sum(f["record_count"] for f in files if f["content"] == 0) == 2
    code, out, _ = omni("submit", "web", str(src), "--batch", "b1", "--map", "text=raw_data", home=tmp_path)
    assert code == 0 and "already committed at version 2; nothing to do" in out
    code, out, _ = omni("table", "list", "--json", home=tmp_path)
    assert json.loads(out) == ["aidata.web"]


@pytest.mark.parametrize("args, code, message", [
    (["submit", "web", "/no/such/file.jsonl", "--batch", "b"], 2, "source not found: /no/such/file.jsonl"),
    (["submit", "nope", "x.jsonl", "--batch", "b"], 2, "no logical table aidata.nope"),
    (["table", "create", "_ai_bad"], 2, "reserved"),
    (["table", "create", "bad-name"], 2, "invalid logical table name 'bad-name'"),
    (["submit", "web", "x.jsonl", "--batch", "b", "--map", "nodelimiter"], 2, "use SOURCE_FIELD=TARGET_FIELD"),
    (["log", "web", "--json"], 0, ""),
    (["sql", "DROP TABLE web"], 2, "only queries are allowed"),
])
def test_errors_are_one_line_with_exit_codes(tmp_path, args, code, message):
    assert main(["--home", str(tmp_path), "table", "create", "web"]) == 0
    rc, out, err = omni(*args, home=tmp_path)
    assert rc == code, (out, err)
    if message:
        assert message in err and len(err.strip().splitlines()) == 1


def test_json_errors_are_machine_readable(tmp_path):
    rc, out, _ = omni("--json", "status", "missing", home=tmp_path)
    assert rc == 2 and json.loads(out)["type"] == "NoSuchLogicalTableError"
