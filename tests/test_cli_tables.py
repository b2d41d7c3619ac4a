"""Tags, dropping tables, the error boundary and closed pipes, through the real command."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from omni_iceberg.api import Omni
from omni_iceberg.cli import BUG_EXIT_CODE, main

ROOT = Path(__file__).resolve().parents[1]


def omni(*args, home):
    proc = subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--home", str(home), *args], cwd=ROOT,
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def _jsonl(path: Path, texts: list[str]) -> str:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


def test_tag_names_a_version_for_as_of(tmp_path):
    api = Omni(home=str(tmp_path))
    api.create_table("web")
    api.submit("web", [_jsonl(tmp_path / "a.jsonl", ["a1", "a2"])], "b1", field_map=["text=raw_data"], progress=False)
    assert main(["--home", str(tmp_path), "tag", "web", "first"]) == 0
    api.submit("web", [_jsonl(tmp_path / "b.jsonl", ["b1", "b2", "b3"])], "b2", field_map=["text=raw_data"],
               progress=False)
    assert api.tags("web") == {"first": 2}
    rc, out, err = omni("sql", "SELECT count(*) AS n FROM web", "--as-of", "first", "--format", "json", home=tmp_path)
    assert rc == 0, err
    assert json.loads(out) == {"n": 2}
    rc, out, _ = omni("--json", "status", "web", "--as-of", "first", home=tmp_path)
    assert [b["name"] for b in json.loads(out)["batches"]] == ["b1"]
    assert api.read("web", as_of="first").num_rows == 2 and api.read("web").num_rows == 5
    # tagging again moves the tag; the log keeps both tag commits
    moved = api.tag("web", "first", version=4)
    assert moved["moved_from"] == 2 and api.tags("web") == {"first": 4}
    rc, out, _ = omni("log", "web", home=tmp_path)
    lines = out.splitlines()
    assert "[tags: first]" in lines[3] and [line.split()[3] for line in lines].count("tag") == 2
    rc, _, err = omni("status", "web", "--as-of", "frist", home=tmp_path)
    assert rc == 2 and "did you mean 'first'" in err
    rc, _, err = omni("tag", "web", "later", "--version", "99", home=tmp_path)
    assert rc == 2 and "versions 1..5" in err


def test_read_as_of_names_the_version_a_column_was_added(tmp_path):
    api = Omni(home=str(tmp_path))
    api.create_table("web")
    api.submit("web", [_jsonl(tmp_path / "a.jsonl", ["<p>x</p>"])], "b1", field_map=["text=raw_data"], progress=False)
    api.register_builtins("web", ["html_parser", "text_length"])  # version 3
    with pytest.raises(Exception) as e:
        api.read("web", columns=["text_length"], as_of=2)
    assert "does not exist at version 2: it was added at version 3" in str(e.value)


@pytest.mark.parametrize("purge", [False, True])
def test_drop_table_removes_view_family_and_physical_tables(tmp_path, purge):
    api = Omni(home=str(tmp_path))
    api.create_table("web")
    api.submit("web", [_jsonl(tmp_path / "a.jsonl", ["a1", "a2"])], "b1", field_map=["text=raw_data"], progress=False)
    api.register_builtins("web", ["html_parser"])
    idents = [t.identifier for t in api.state("web").tables]
    assert len(idents) == 2
    warehouse = Path(api.config.warehouse.removeprefix("file://"))
    assert list((warehouse / "aidata").rglob("*.parquet"))
    rc, out, err = omni("table", "drop", "web", *(["--purge"] if purge else []), "--json", home=tmp_path)
    assert rc == 0, err
    assert sorted(json.loads(out)["physical_tables"]) == sorted(idents)
    fresh = Omni(home=str(tmp_path))
    assert fresh.list_tables() == []
    assert not any(fresh.catalog.table_exists(i) for i in idents)
    assert bool(list((warehouse / "aidata").rglob("*.parquet"))) is not purge  # purge deletes data files, drop keeps them
    assert bool(list((warehouse / "aidata").rglob("family-v*.json"))) is not purge
    rc, _, err = omni("table", "drop", "web", home=tmp_path)
    assert rc == 2 and "no logical table aidata.web" in err
    assert omni("table", "create", "web", home=tmp_path)[0] == 0  # the name is free again


def test_an_exception_that_is_not_an_omni_error_is_reported_as_a_bug(tmp_path, monkeypatch, capsys):
    from omni_iceberg.cli import commands

    def broken(args, omni, command_line):
        raise KeyError("boom")

    monkeypatch.setitem(commands._HANDLERS, "log", broken)
    monkeypatch.delenv("OMNI_DEBUG", raising=False)
    assert main(["--home", str(tmp_path), "log", "web"]) == BUG_EXIT_CODE
    err = capsys.readouterr().err
    assert "KeyError: 'boom' - this is a bug in omni" in err and "--debug" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["--home", str(tmp_path), "--debug", "log", "web"]) == BUG_EXIT_CODE
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly(tmp_path):
    api = Omni(home=str(tmp_path))
    api.create_table("web")
    # enough output to fill the pipe buffer, so the write really fails after the reader leaves
    api.submit("web", [_jsonl(tmp_path / "a.jsonl", [f"document {i} " + "x" * 200 for i in range(1500)])], "b1",
               field_map=["text=raw_data"], progress=False)
    proc = subprocess.Popen([sys.executable, "-m", "omni_iceberg.cli", "--home", str(tmp_path), "sql",
                             "SELECT RawData.raw_data FROM web"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"raw_data")  # what `head -1` reads
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err
