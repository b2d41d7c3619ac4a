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


def _leaf_commands():
    """Every runnable command path of the parser itself (nested ones like ``index verify`` included)."""
    from omni_iceberg.cli.parser import build_parser, subcommands

    tree = subcommands(build_parser())
    return {path: p for path, p in tree.items()
            if not any(other[:len(path)] == path and other != path for other in tree)}


def _required_args(parser):
    """The least argv a command parses with: its required positionals, options and exclusive groups."""
    import argparse

    def value(action):
        if action.choices:
            return str(next(iter(action.choices)))
        return "1" if action.type in (int, float) else "x"

    argv = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:
            if action.nargs in (None, "+", 1):
                argv.append(value(action))
        elif action.required:
            argv += [action.option_strings[0], value(action)]
    for group in parser._mutually_exclusive_groups:
        if group.required:
            first = group._group_actions[0]
            argv += [first.option_strings[0]] + ([] if first.nargs == 0 else [value(first)])
    return argv


#: what the README promises every command: --json, --no-progress, --debug, catalog and data location
COMMON_OPTIONS = ("--no-progress", "--json", "--debug", "--home", "--catalog", "--warehouse")


def test_every_command_accepts_the_common_options():
    from omni_iceberg.cli.parser import build_parser

    leaves = _leaf_commands()
    assert ("index", "verify") in leaves and ("status",) in leaves and ("table", "create") in leaves
    assert len(leaves) >= 34
    refused = []
    for path, sub in leaves.items():
        fill = _required_args(sub)
        plain = build_parser().parse_args([*path, *fill])
        assert (plain.no_progress, plain.json, plain.debug, plain.home) == (False, False, False, None), path
        try:
            args = build_parser().parse_args([*path, *fill, "--no-progress", "--json", "--debug", "--home", "H",
                                              "--catalog", "C", "--warehouse", "W"])
        except SystemExit:
            refused.append(" ".join(path))
            continue
        assert (args.no_progress, args.json, args.debug, args.home, args.catalog, args.warehouse) == (
            True, True, True, "H", "C", "W"), path
        # given before the command, an option is not reset by the command's own copy of it
        before = build_parser().parse_args(["--no-progress", "--home", "G", *path, *fill])
        assert (before.no_progress, before.home) == (True, "G"), path
    assert not refused, f"commands refusing the common options {COMMON_OPTIONS}: {refused}"


def test_no_progress_after_a_command_runs_it(tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one"}\n{"text": "two"}\n')
    assert main(["--home", str(tmp_path), "table", "create", "docs", "--no-progress"]) == 0
    assert main(["submit", "docs", str(src), "--batch", "b1", "--map", "text=raw_data", "--home", str(tmp_path),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["status", "docs", "--no-progress", "--home", str(tmp_path), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["logical_table"], st["logical_version"], st["rows"]) == ("aidata.docs", 2, 2)
    assert [b["name"] for b in st["batches"]] == ["b1"]
