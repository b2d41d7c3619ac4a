"""The main job (``omni demo``): real corpora into three logical tables, end to end.

web  <- Python documentation HTML in two overlapping batches (dedup shows) plus real
        sample crawls from WARC files;
code <- Python standard-library source, two batches;
sft  <- HumanEval problems (prompt as raw content) in two overlapping batches.
Then features on web: html_parser, language detection (fastText), math_recall and
three cheap CPU features, backfilled on one batch (the planner fills only the missing
ancestors and fuses the cheap ones), a status summary, logical SQL queries and the
lineage of math_recall. Re-running it is safe: committed batches, registered features
and computed units are recognised and skipped.
"""

from __future__ import annotations

from catalog_ext.redact import redact

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from omni_iceberg.demo import corpora
from catalog_ext.errors import LogicalTableExistsError

DEMO_FEATURES = ["html_parser", "detected_lang", "math_recall", "stopword_ratio", "code_ratio", "domain_tag"]
FEATURE_QUERY = (
    "SELECT domain_tag, count(*) AS docs, round(avg(math_recall), 4) AS math, round(avg(stopword_ratio), 3) AS stop "
    "FROM web WHERE _ai_append_name_ = 'docs-a' GROUP BY 1 ORDER BY 2 DESC"
)
DEMO_QUERY = (
    "SELECT _ai_append_name_ AS batch, count(*) AS docs, "
    "round(avg(length(RawData.raw_data))) AS avg_chars FROM web GROUP BY 1 ORDER BY 1"
)


def _plan(work: Path) -> list[tuple[str, str, str, list[str], dict[str, str]]]:
    """(table, id mode, batch, sources, field map) in ingest order."""
    docs = corpora.fetch("python-docs-html")
    pages = sorted(str(p) for p in docs.rglob("*.html"))
    third = len(pages) // 3
    warcs = sorted(str(p) for p in corpora.fetch("pywb-warcs").rglob("*.warc.gz"))
    code_root = corpora.fetch("python-stdlib-code")
    code_dirs = sorted(str(p) for p in code_root.iterdir() if p.is_dir())
    half = max(1, len(code_dirs) // 2)
    humaneval = next(corpora.fetch("humaneval-jsonl").rglob("*.jsonl*"))
    sft_a, sft_b = _split_jsonl(humaneval, work, overlap=20)
    return [
        ("web", "md5", "docs-a", pages[: 2 * third], {}),
        ("web", "md5", "docs-b", pages[third:], {}),  # a third of the pages again: dedup
        ("web", "md5", "crawl", warcs, {}),
        ("code", "md5", "stdlib-a", code_dirs[:half], {}),
        ("code", "md5", "stdlib-b", code_dirs[half:], {}),
        ("sft", "md5", "humaneval-a", [str(sft_a)], {"prompt": "raw_data"}),
        ("sft", "md5", "humaneval-b", [str(sft_b)], {"prompt": "raw_data"}),
    ]


def _split_jsonl(path: Path, work: Path, overlap: int) -> tuple[Path, Path]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    cut = len(lines) // 2 + overlap // 2
    work.mkdir(parents=True, exist_ok=True)
    a, b = work / "humaneval-a.jsonl", work / "humaneval-b.jsonl"
    a.write_text("".join(lines[:cut]), encoding="utf-8")
    b.write_text("".join(lines[cut - overlap:]), encoding="utf-8")
    return a, b


# ``omni`` is the facade (omni_iceberg.api.Omni), handing itself in from its demo verb; not
# imported for the annotation, since the facade imports this module for that verb
def run_demo(omni: Any, *, fresh: bool = False, as_json: bool = False) -> int:
    say = (lambda *a: print(*a, file=sys.stderr)) if as_json else print
    if fresh and omni.config.is_embedded and omni.config.home.exists():
        shutil.rmtree(omni.config.home)
    say(f"catalog: {redact(omni.config.catalog_uri)}\nwarehouse: {redact(omni.config.warehouse)}")
    plan = _plan(omni.config.home / "demo-inputs")
    reports = []
    for table, id_mode, batch, sources, field_map in plan:
        try:
            omni.create_table(table, id_mode=id_mode, command=f"omni demo: create {table}")
            say(f"created logical table aidata.{table}")
        except LogicalTableExistsError:
            pass
        r = omni.submit(table, sources, batch, field_map=field_map, command=f"omni demo: submit {table} {batch}")
        reports.append(r.to_dict())
        if r.already_committed:
            say(f"  {table}/{batch}: already committed at version {r.logical_version}, skipped")
        else:
            say(f"  {table}/{batch}: read {r.read}, written {r.written}, duplicates {r.duplicates}, "
                f"rejected {r.rejected} -> version {r.logical_version}")
    plan, run = _features(omni, say)
    summary = []
    for table in ("web", "code", "sft"):
        st = omni.status(table)
        summary.append({k: st[k] for k in ("logical_table", "logical_version", "rows")} |
                       {"batches": {b["name"]: b["rows"] for b in st["batches"]},
                        "duplicates": sum(b["duplicates"] for b in st["batches"]),
                        "physical_tables": [t["identifier"] for t in st["physical_tables"]],
                        "bytes": sum(t["bytes"] for t in st["physical_tables"])})
    result = omni.query(DEMO_QUERY)
    features = omni.query(FEATURE_QUERY)
    if as_json:
        print(json.dumps({"submits": reports, "tables": summary, "query": DEMO_QUERY,
                          "result": result.to_pylist(), "backfill": run.to_dict(), "plan": plan.to_dict(),
                          "feature_query": FEATURE_QUERY, "feature_result": features.to_pylist()},
                         default=str, indent=2))
        return 0
    print("\nstatus:")
    for s in summary:
        batches = ", ".join(f"{k}={v}" for k, v in s["batches"].items())
        print(f"  {s['logical_table']:<12} version {s['logical_version']:<3} rows {s['rows']:<6} "
              f"duplicates {s['duplicates']:<4} [{batches}]  {s['bytes'] / 1e6:.1f} MB in "
              f"{len(s['physical_tables'])} physical table(s)")
    from omni_iceberg.ui.formatting import format_arrow

    print(f"\nomni sql \"{DEMO_QUERY}\"\n")
    print(format_arrow(result, "table"))
    print(f"\nomni sql \"{FEATURE_QUERY}\"\n")
    print(format_arrow(features, "table"))
    print("\nomni lineage web.math_recall\n")
    print(omni.lineage("web", "math_recall").render())
    print("\nnext: omni status web | omni log web | omni feature list web | omni errors web  (see README)")
    return 0


def _features(omni: Any, say) -> tuple[Any, Any]:
    """Register built-in features on web and backfill math_recall + cheap features on docs-a."""
    from omni_iceberg.features.library import BUILTINS

    wanted = [b for b in BUILTINS if b.definition.name in DEMO_FEATURES]
    omni.register_features("web", wanted, command="omni demo: feature register")
    targets = ["math_recall", "stopword_ratio", "code_ratio", "domain_tag"]
    plan = omni.plan("web", targets, ["docs-a"])
    say("\n" + plan.describe())
    run = omni.backfill("web", targets, ["docs-a"], command="omni demo: backfill web")
    version = run.logical_version or omni.state("web").version
    say(f"backfill: {run.status}; {run.rows} values, {run.errors} isolated errors; web is at version {version}")
    return plan, run
