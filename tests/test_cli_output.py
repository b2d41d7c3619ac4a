"""Machine-readable output: numbers stay numbers, plans are structured, libraries stay quiet."""

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from omni_iceberg.ui.formatting import dumps, format_arrow

ROOT = Path(__file__).resolve().parents[1]


def omni(*args, home):
    proc = subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--home", str(home), *args], cwd=ROOT,
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_decimals_are_json_numbers():
    import pyarrow as pa

    data = pa.table({"s": pa.array([Decimal("12"), Decimal("1.5")], pa.decimal128(38, 1)), "t": ["a", "b"]})
    assert [json.loads(x) for x in format_arrow(data, "json").splitlines()] == [{"s": 12, "t": "a"},
                                                                                {"s": 1.5, "t": "b"}]
    assert json.loads(dumps({"n": Decimal("3"), "b": b"\xff", "p": Path("/x")})) == {"n": 3, "b": "/w==", "p": "/x"}


def test_explain_and_compaction_dry_run_print_structured_json(tmp_path):
    src = tmp_path / "a.jsonl"
    for batch in ("b1", "b2"):
        src.write_text("".join(json.dumps({"text": f"{batch} doc {i}"}) + "\n" for i in range(40)))
        if batch == "b1":
            assert omni("table", "create", "web", home=tmp_path)[0] == 0
        assert omni("submit", "web", str(src), "--batch", batch, "--map", "text=raw_data", home=tmp_path)[0] == 0
    rc, out, err = omni("sql", "SELECT count(*) AS n FROM web WHERE _ai_append_name_ = 'b1'", "--explain", "--json",
                        home=tmp_path)
    assert rc == 0, err
    plan = json.loads(out)
    web = plan["tables"][0]
    assert web["logical_table"] == "aidata.web" and web["logical_version"] == 3
    assert web["scans"][0]["table"] == "aidata.web__base" and isinstance(web["scans"][0]["snapshot_id"], int)
    rc, out, err = omni("compact", "web", "--dry-run", "--json", "--min-files", "1", home=tmp_path)
    assert rc == 0, err
    dry = json.loads(out)
    assert dry["dry_run"] is True and dry["logical_table"] == "aidata.web" and dry["version"] == 3
    base = next(t for t in dry["tables"] if t["identifier"] == "aidata.web__base")
    # small files of both batches share id-bucket partitions: they merge across batches
    assert base["partitions"] and all(p["partition"].startswith("_ai_id_bucket=") and p["files"] >= 2
                                      for p in base["partitions"])
    assert "paths" not in base["partitions"][0]
    rc, out, _ = omni("--json", "log", "web", home=tmp_path)
    assert [v["version"] for v in json.loads(out)] == [1, 2, 3]  # the dry run committed nothing


def test_quiet_switches_reach_library_progress_bars(monkeypatch):
    for var in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(var, raising=False)
    code = ("import os, sys\n"
            "from omni_iceberg.ui.progress import silence_library_progress\n"
            "silence_library_progress()\n"
            "from tqdm.auto import tqdm\n"
            "bar = tqdm(range(3), file=sys.stderr)\n"
            "print(bar.disable, os.environ['HF_HUB_DISABLE_PROGRESS_BARS'])\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.stdout.split() == ["True", "1"], proc.stderr


def test_export_jsonl_and_cli_json_share_one_helper(tmp_path):
    import pyarrow as pa

    from omni_iceberg.explore import export
    from omni_iceberg.ui import formatting

    assert export.jsonable is formatting.jsonable  # one helper, not two that drift apart
    data = pa.table({"s": pa.array([Decimal("12"), Decimal("0.5")], pa.decimal128(38, 1)),
                     "b": pa.array([b"hi", b"\xff\x00"], pa.binary())})
    export._write(data, tmp_path / "part.jsonl", "jsonl")
    lines = [json.loads(x) for x in (tmp_path / "part.jsonl").read_text().splitlines()]
    # default=str would have written "12" and "b'hi'": numbers stay numbers, bytes stay readable
    assert lines == [{"s": 12, "b": "hi"}, {"s": 0.5, "b": "/wA="}]
    assert [json.loads(x) for x in format_arrow(data, "json").splitlines()] == lines


def test_compact_backfill_and_duplicate_submit_say_what_happened_in_words(tmp_path, capsys):
    """#40: compact printed a Python dict, an up-to-date backfill 'run , rows 0 -> version None', and a
    submit of nothing but duplicates committed an empty batch and a version."""
    from omni_iceberg.api import Omni
    from omni_iceberg.cli import main

    home = ["--home", str(tmp_path)]
    src = tmp_path / "a.jsonl"
    assert main([*home, "table", "create", "web"]) == 0
    for batch in ("b1", "b2"):
        src.write_text("".join(json.dumps({"text": f"<p>{batch} doc {i}</p>"}) + "\n" for i in range(40)))
        assert main([*home, "submit", "web", str(src), "--batch", batch, "--map", "text=raw_data"]) == 0
    api = Omni(home=str(tmp_path))
    base = next(t for t in api.status("web")["physical_tables"] if t["identifier"] == "aidata.web__base")
    capsys.readouterr()

    assert main([*home, "compact", "web", "--min-files", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    after = next(t for t in api.status("web")["physical_tables"] if t["identifier"] == "aidata.web__base")
    assert out[0] == "compacted aidata.web -> version 4 (engine local: requested --engine local)"
    assert out[1].startswith(f"  aidata.web__base: {base['files']} files -> {after['files']} (")
    assert after["files"] < base["files"] and not any("{" in line for line in out)
    assert main([*home, "compact", "web", "--min-files", "2", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["empty"], again["dry_run"], again["logical_version"], again["plan"]["tables"]) == (True, False, 4, [])
    assert main([*home, "compact", "web", "--min-files", "2"]) == 0
    assert capsys.readouterr().out.strip() == ("aidata.web v4: nothing to compact (no partition holds 2 or more "
                                               "small files; see --min-files)")

    assert main([*home, "feature", "register", "--builtin", "html_parser", "text_length", "--table", "web"]) == 0
    backfill = [*home, "backfill", "web", "--features", "text_length", "--isolation", "inline", "--no-progress"]
    assert main(backfill) == 0
    version = api.state("web").version
    capsys.readouterr()
    assert main([*backfill, "--batches", "b1"]) == 0
    done = capsys.readouterr()
    assert done.out.strip() == (f"aidata.web: nothing to do: every requested feature is up to date for batches b1 "
                                f"(version {version}); nothing committed")
    assert done.err == "" and api.state("web").version == version
    assert main([*backfill, "--retry-failed"]) == 0
    assert capsys.readouterr().out.strip() == ("aidata.web: nothing to retry: no record of text_length failed "
                                               "without getting a value since; nothing committed")

    src.write_text("".join(json.dumps({"text": f"<p>b1 doc {i}</p>"}) + "\n" for i in range(40)))
    assert main([*home, "submit", "web", str(src), "--batch", "b3", "--map", "text=raw_data"]) == 0
    assert capsys.readouterr().out.strip() == ("aidata.web batch 'b3': 0 new records, 40 duplicates; nothing "
                                               "committed (the batch name is still free)")
    state = api.state("web")
    assert state.version == version and [b.name for b in state.batches] == ["b1", "b2"]
    assert api.plan("web", ["text_length"]).batches == ["b1", "b2"]
    assert main([*home, "submit", "web", str(src), "--batch", "b3", "--map", "text=raw_data", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"batch": "b3", "read": 40, "written": 0, "duplicates": 40,
                                                   "rejected": 0, "logical_version": None,
                                                   "already_committed": False}
