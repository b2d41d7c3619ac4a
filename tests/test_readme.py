"""The README's Python blocks run as written (#36), each time on a fresh home.

The ```python blocks are put, in the order the page shows them, into one script that a
new process runs - a user pasting them into a file. Its folder holds what the text says
the examples read: ``dump.jsonl.gz`` (JSON lines with ``url`` and ``body_text``) and
``features.yaml`` (the README's own YAML block). A few lines appended after the blocks
report what the examples made, so the test checks values, not only that nothing raised.
The block that starts Spark runs only in the Spark test: Spark refuses the embedded
SQLite catalog, so that test puts the whole page on a PostgreSQL catalog of its own.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: what the test reads back from the script's namespace once the README's blocks have run
REPORT = '''
import json as _json, os as _os
print("README-REPORT " + _json.dumps({
    "written": report.written, "duplicates": report.duplicates, "submit_version": report.logical_version,
    "plan_stages": [s.features for s in plan.stages],
    "run": [run.status, run.rows, run.errors, run.logical_version],
    "langs": sorted(r["detected_lang"] for r in table.to_pylist()),
    "read_rows": rows.num_rows, "read_columns": rows.column_names,
    "exported": _json.load(open("out/_omni_export_manifest.json"))["rows"],
    "ids": len(ids), "tables": omni.list_tables(), "tags": omni.tags("web"),
    "hot": list(omni.state("web").hot.columns),
    "versions": [v.operation for v in omni.log("web")],
}))
'''


def python_blocks(text: str = README) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def _needs_spark(block: str) -> bool:
    return "build_spark_session" in block


def _page_folder(folder: Path) -> None:
    """What the README's text says its examples read, written where they run."""
    yaml_blocks = re.findall(r"^```yaml\n(.*?)^```$", README, flags=re.M | re.S)
    (folder / "features.yaml").write_text(next(b for b in yaml_blocks if "math_recall" in b))
    pages = []
    for i in range(12):
        body = (f"<html><body><h1>Lesson {i}: equations</h1><p>To solve the equation 2x + {i} = 10, subtract "
                f"{i} from both sides and divide by two. The derivative of x squared is 2x, and the integral "
                f"of 2x dx is x squared plus a constant.</p><pre>    def f(x):\n        return 2 * x + {i}</pre>"
                "</body></html>")
        pages.append(json.dumps({"url": f"https://example.org/lesson/{i}", "body_text": body}))
    with gzip.open(folder / "dump.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(pages) + "\n")


def _run_page(folder: Path, blocks: list[str], env: dict[str, str], timeout: int) -> dict:
    script = folder / "readme_examples.py"
    script.write_text("\n\n".join(blocks) + "\n" + REPORT)
    proc = subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"the README's Python blocks failed:\n{proc.stderr[-4000:]}"
    line = next(x for x in proc.stdout.splitlines() if x.startswith("README-REPORT "))
    return json.loads(line.split(" ", 1)[1])


def _env(**omni: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_CACHE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])  # this checkout
    env.update(omni)
    return env


def test_the_readme_has_the_blocks_this_test_runs():
    blocks = python_blocks()
    assert len(blocks) >= 3
    assert any("def code_density" in b for b in blocks) and any("omni = Omni()" in b for b in blocks)
    assert sum(_needs_spark(b) for b in blocks) == 1


def _check(report: dict) -> None:
    assert (report["written"], report["duplicates"], report["submit_version"]) == (12, 0, 2)
    # built-ins by name, a @feature UDF and a YAML file: one registration; html_parser and
    # detected_lang are planned before math_recall, code_density fused with detected_lang
    assert report["plan_stages"] == [["html_parser"], ["code_density", "detected_lang"], ["math_recall"]]
    assert report["run"] == ["succeeded", 4 * 12, 0, 4]  # four features on twelve rows, no failed record
    assert report["langs"] == ["en"]
    assert (report["read_rows"], report["read_columns"]) == (12, ["RawData.url", "math_recall"])
    assert (report["exported"], report["ids"]) == (12, 3)
    assert report["tables"] == ["aidata.web"]  # scratch was created and dropped
    assert report["tags"] == {"train-v1": 4}
    assert report["hot"] == ["math_recall", "detected_lang"]
    # maintain found twelve rows in 16 id buckets: re-bucketed; nothing else was due
    assert report["versions"] == ["create", "ingest", "register", "backfill", "tag", "rebucket", "hot-columns"]


def test_readme_python_blocks_run_as_written(tmp_path):
    _page_folder(tmp_path)
    blocks = [b for b in python_blocks() if not _needs_spark(b)]
    _check(_run_page(tmp_path, blocks, _env(OMNI_HOME=str(tmp_path / ".omni")), timeout=600))


@pytest.mark.spark
@pytest.mark.postgres
def test_readme_python_blocks_with_spark_run_as_written(tmp_path):
    from tests.services.postgres import PostgresServer

    _page_folder(tmp_path)
    with PostgresServer(database="readme") as pg:  # its own catalog: the page names aidata.web and omni
        env = _env(OMNI_HOME=str(tmp_path / ".omni"), OMNI_CATALOG=pg.sqlalchemy_uri,
                   OMNI_WAREHOUSE=(tmp_path / "warehouse").as_uri())
        _check(_run_page(tmp_path, python_blocks(), env, timeout=900))


def test_register_features_takes_built_in_names(tmp_path):
    from catalog_ext.errors import SourceError
    from omni_iceberg.api import Omni

    omni = Omni(home=str(tmp_path))
    omni.create_table("web")
    done = omni.register_features("web", ["html_parser", "text_length"])
    assert [(r.definition.name, r.changed, r.logical_version) for r in done] == [
        ("html_parser", True, 2), ("text_length", True, 2)]
    with pytest.raises(SourceError, match=r"'html_parsr' is neither a feature definition file nor a built-in "
                                          r"feature; did you mean 'html_parser'\?"):
        omni.register_features("web", ["html_parsr"])
    with pytest.raises(SourceError, match="feature definition file not found: missing.yaml"):
        omni.register_features("web", ["missing.yaml"])
