"""Features from the command line: a user's .py file across processes, and built-ins by name."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_FEATURES = '''
from omni_iceberg.features import feature


@feature(outputs={"title_words": "long"}, inputs=["RawData.raw_data"])
def title_words(raw_data):
    return len(raw_data.split())
'''


def omni(*args, home, cwd=ROOT):
    proc = subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--home", str(home), *args], cwd=cwd,
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def web(tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["one two three", "four five", "six"]))
    assert omni("table", "create", "web", home=tmp_path)[0] == 0
    rc, _, err = omni("submit", "web", str(src), "--batch", "b1", "--map", "text=raw_data", home=tmp_path)
    assert rc == 0, err
    return tmp_path


def test_py_features_register_then_backfill_in_another_process(web, tmp_path):
    (tmp_path / "my_features.py").write_text(USER_FEATURES)
    # a different working directory than the file's: nothing may depend on the cwd or sys.path
    rc, out, err = omni("feature", "register", str(tmp_path / "my_features.py"), "--table", "web", "--json",
                        home=web)
    assert rc == 0, err
    assert json.loads(out)[0]["registered"] is True
    # a fresh process, default process isolation: the worker must get the user's code too
    rc, out, err = omni("backfill", "web", "--features", "title_words", "--json", home=web)
    assert rc == 0, err
    report = json.loads(out)
    assert report["status"] == "succeeded" and report["rows"] == 3 and report["errors"] == 0
    rc, out, err = omni("sql", "SELECT sum(title_words) AS words, count(*) AS n FROM web", "--format", "json",
                        home=web)
    assert rc == 0, err
    assert json.loads(out) == {"words": 6, "n": 3}  # numbers, not "6"


def test_changed_py_file_is_detected_not_run_under_the_old_version(web, tmp_path):
    path = tmp_path / "my_features.py"
    path.write_text(USER_FEATURES)
    assert omni("feature", "register", str(path), "--table", "web", home=web)[0] == 0
    path.write_text(USER_FEATURES.replace("len(raw_data.split())", "len(raw_data)"))
    rc, _, err = omni("backfill", "web", "--features", "title_words", home=web)
    assert rc == 2
    assert "changed since it was registered" in err and f"omni feature register {path}" in err
    path.unlink()
    rc, _, err = omni("backfill", "web", "--features", "title_words", home=web)
    assert rc == 2 and "no longer exists" in err


def test_py_features_in_one_process_with_process_isolation(web, tmp_path):
    from omni_iceberg.api import Omni

    (tmp_path / "inproc_features.py").write_text(USER_FEATURES)
    api = Omni(home=str(web))
    api.register_features("web", [str(tmp_path / "inproc_features.py")])
    report = api.backfill("web", ["title_words"], isolation="process", progress=False)
    assert report.status == "succeeded" and report.rows == 3
    values = sorted(api.read("web", columns=["title_words"]).column("title_words").to_pylist())
    assert values == [1, 2, 3]


def test_yaml_entry_with_only_udf_registers_the_builtin(web, tmp_path):
    (tmp_path / "f.yaml").write_text("features:\n  - udf: text_length\n    table: web\n")
    rc, out, err = omni("feature", "register", str(tmp_path / "f.yaml"), "--json", home=web)
    assert rc == 0, err
    from omni_iceberg.features.library import text_length

    assert json.loads(out)[0]["feature"] == text_length.definition.key  # the built-in itself, same version
    rc, out, err = omni("--json", "feature", "list", "web", home=web)
    listed = {f["name"]: f for f in json.loads(out)}
    assert listed["text_length"]["inputs"] == ["ProcessedData.parsed_text"]
    assert listed["text_length"]["outputs"] == ["text_length"]


def test_register_builtins_by_name_and_unknown_names_are_suggested(web):
    rc, out, err = omni("feature", "register", "--builtin", "detected_lang", "token_count", "--table", "web",
                        "--json", home=web)
    assert rc == 0, err
    assert sorted(o["feature"].split("@")[0] for o in json.loads(out)) == ["detected_lang", "token_count"]
    rc, _, err = omni("feature", "register", "--builtin", "detected_lnag", "--table", "web", home=web)
    assert rc == 2 and "did you mean 'detected_lang'" in err and len(err.strip().splitlines()) == 1
    rc, _, err = omni("feature", "register", "--builtin", "detected_lang", home=web)
    assert rc == 2 and "--table" in err


def test_udfs_show_inputs_and_outputs_with_types(tmp_path):
    rc, out, err = omni("feature", "udfs", "--json", home=tmp_path)
    assert rc == 0, err
    udfs = {u["name"]: u for u in json.loads(out)}
    assert udfs["detected_lang"]["inputs"] == ["ProcessedData.parsed_text"]
    assert udfs["detected_lang"]["outputs"] == [{"name": "detected_lang", "type": "string"},
                                                {"name": "lang_confidence", "type": "double"}]
    rc, out, _ = omni("feature", "udfs", home=tmp_path)
    line = next(x for x in out.splitlines() if x.startswith("detected_lang"))
    assert "ProcessedData.parsed_text -> detected_lang (string), lang_confidence (double)" in line


def test_unchanged_py_file_moved_then_registered_again_backfills_from_the_new_place(web, tmp_path):
    first = tmp_path / "old" / "my_features.py"
    first.parent.mkdir()
    first.write_text(USER_FEATURES)
    rc, out, err = omni("feature", "register", str(first), "--table", "web", "--json", home=web)
    assert rc == 0, err
    version = json.loads(out)[0]["feature"]
    moved = tmp_path / "new" / "my_features.py"
    moved.parent.mkdir()
    first.rename(moved)
    # same code: not "different code or parameters", and not a new version
    rc, out, err = omni("feature", "register", str(moved), "--table", "web", "--json", home=web)
    assert rc == 0, err
    assert json.loads(out)[0]["feature"] == version and json.loads(out)[0]["registered"] is False
    # a fresh process finds the code where it lives now (the old path no longer exists)
    rc, out, err = omni("backfill", "web", "--features", "title_words", "--json", home=web)
    assert rc == 0, err
    assert json.loads(out)["rows"] == 3


REGEX_FEATURES = '''
import re

from omni_iceberg.features import feature

WORD = re.compile(r"\\w+")


@feature(outputs={"n_tokens": "long"}, inputs=["RawData.raw_data"])
def n_tokens(raw_data):
    return len(WORD.findall(raw_data))
'''


def test_an_edit_outside_the_function_body_is_detected_then_a_new_version(web, tmp_path):
    """Issue #36: changing only a module-level regex kept the version, and the next backfill
    computed with the new code under the old version."""
    path = tmp_path / "tok.py"
    path.write_text(REGEX_FEATURES)
    rc, out, err = omni("feature", "register", str(path), "--table", "web", "--json", home=web)
    assert rc == 0, err
    first = json.loads(out)[0]["feature"]
    path.write_text(REGEX_FEATURES.replace(r'r"\w+"', r'r"\w"'))  # characters, not words
    rc, out, err = omni("backfill", "web", "--features", "n_tokens", "--dry-run", home=web)
    assert rc == 0 and "warning: feature " + first + ": the code of 'n_tokens'" in out
    assert "changed since it was registered" in out
    rc, _, err = omni("backfill", "web", "--features", "n_tokens", home=web)
    assert rc == 2 and "changed since it was registered" in err
    rc, out, err = omni("feature", "register", str(path), "--table", "web", "--json", home=web)
    assert rc == 0, err
    second = json.loads(out)[0]["feature"]
    assert json.loads(out)[0]["registered"] is True and second != first
    rc, out, err = omni("backfill", "web", "--features", "n_tokens", "--dry-run", home=web)
    assert rc == 0 and f"{second} -> n_tokens  batches b1" in out
    rc, out, err = omni("backfill", "web", "--features", "n_tokens", "--json", home=web)
    assert rc == 0, err
    rc, out, _ = omni("sql", "SELECT sum(n_tokens) AS n FROM web", "--format", "json", home=web)
    assert json.loads(out) == {"n": len("onetwothreefourfivesix")}


def test_a_missing_builtin_producer_is_registered_planned_and_run(web, tmp_path):
    """Issue #36: text_length on a table where html_parser was never registered 'succeeded'
    with rows 0 and every value NULL; the plan only warned that its input reads as NULL."""
    assert omni("feature", "register", "--builtin", "text_length", "--table", "web", home=web)[0] == 0
    rc, out, err = omni("backfill", "web", "--features", "text_length", "--dry-run", "--dag",
                        str(tmp_path / "plan.mmd"), home=web)
    assert rc == 0, err
    assert "registers built-in html_parser@" in out and "produces ProcessedData.parsed_text" in out
    assert "reads as NULL" not in out
    picture = (tmp_path / "plan.mmd").read_text()
    assert "html_parser@" in picture and "ProcessedData.parsed_text<br/><i>ingested" not in picture
    rc, out, err = omni("backfill", "web", "--features", "text_length", "--json", home=web)
    assert rc == 0, err
    report = json.loads(out)
    assert report["status"] == "succeeded" and report["rows"] == 6  # html_parser and text_length, 3 rows each
    assert [r.split("@")[0] for r in report["registered"]] == ["html_parser"]
    rc, out, _ = omni("sql", "SELECT count(text_length) AS n, sum(text_length) AS total FROM web", "--format", "json",
                      home=web)
    assert json.loads(out) == {"n": 3, "total": len("one two three") + len("four five") + len("six")}


CUSTOM_CONSUMER = '''
from omni_iceberg.features import feature


@feature(outputs={"trainable_len": "long"}, inputs=["TrainableData.text"])
def trainable_len(text):
    return len(text)
'''


def test_a_missing_custom_producer_is_an_error_before_anything_runs(web, tmp_path):
    path = tmp_path / "consumer.py"
    path.write_text(CUSTOM_CONSUMER)
    assert omni("feature", "register", str(path), "--table", "web", home=web)[0] == 0
    rc, out, err = omni("--json", "log", "web", home=web)
    versions = len(json.loads(out))
    for dry in ([], ["--dry-run"]):
        rc, _, err = omni("backfill", "web", "--features", "trainable_len", *dry, home=web)
        assert rc == 2 and "TrainableData.text" in err and "trainable_len" in err and "no producer" in err
        assert len(err.strip().splitlines()) == 1
    rc, out, err = omni("--json", "log", "web", home=web)
    assert len(json.loads(out)) == versions  # nothing committed
