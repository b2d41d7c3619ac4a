"""Regenerate ``benchmarks/RESULTS.md`` from ``benchmarks/results/*.json``.

    python -m benchmarks.report

One section per benchmark: the exact command line that produced it, its date, the
machine facts recorded at the time (nproc, RAM, CPU, load), the headline ratios with
their targets, the table and notes the benchmark wrote, and its plot.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

from benchmarks.common import BENCH, RESULTS, machine_facts

ORDER = ("ingest", "submit_history", "index", "index-hbase", "history", "governed_appends", "fusion", "spark_fusion",
         "isolation", "table_centric", "spark_crossover", "spark_join", "pruning", "export", "query_log", "rest_commit",
         "s3_warehouse", "view_pruning", "width", "hot_columns", "tuning", "reliability")


def _fmt(value: float, unit: str) -> str:
    if unit == "bool":
        return "yes" if value else "NO"
    if unit == "%":
        return f"{value:+.1f}%"
    if abs(value) >= 100 or (float(value).is_integer() and unit == ""):
        return f"{value:,.0f}{unit}"
    return f"{value:.2f}{unit}"


def _verdict(h: dict) -> str:
    if h.get("meets_target") is None:
        return ""
    return "met" if h["meets_target"] else "**not met**"


def _git(doc: dict) -> str:
    g = doc.get("git") or {}
    if not g:
        return "commit not recorded"
    dirty = g.get("dirty_files") or []
    state = f"uncommitted changes in {', '.join(dirty)}" if dirty else "clean tree (outside benchmarks/)"
    return f"commit {g.get('commit')} ({g.get('subject', '')}...), {state}"


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def load_results() -> list[dict]:
    docs = {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}
    names = [n for n in ORDER if n in docs] + sorted(n for n in docs if n not in ORDER)
    return [docs[n] for n in names]


def render(results: list[dict]) -> str:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    here = machine_facts()
    lines = [
        "# Benchmark results",
        "",
        f"Generated {now} by `python -m benchmarks.report` from `benchmarks/results/*.json`.",
        "",
        "Every figure is a ratio against a named baseline measured in the same run: trials of baseline and",
        "candidate interleaved (order alternating), each from fresh state, medians reported, every trial kept",
        "in the JSON. The machines are 2 shared cores (other engineers run tests at the same time), so absolute",
        "seconds mean little; the load average at each trial is in the JSON.",
        "",
        f"Machine (now): {here['nproc']} CPUs ({here['cpu']}), {here['ram_gib']} GiB RAM, Python {here['python']}, "
        + ", ".join(f"{k} {v}" for k, v in here["versions"].items()) + ".",
        "Commits measured: " + ", ".join(sorted({(d.get("git") or {}).get("commit", "?") for d in results}))
        + " (each section names its own; compare figures only within one commit).",
        "",
        "## Summary",
        "",
    ]
    rows = []
    for doc in results:
        for h in doc.get("headline", []):
            rows.append([f"[{doc['benchmark']}](#{doc['benchmark']})", h["metric"], _fmt(h["value"], h["unit"]),
                         h.get("target") or "", _verdict(h)])
    lines += _table(["benchmark", "figure", "value", "target", "verdict"], rows)
    for doc in results:
        m = doc["machine"]
        lines += [
            "",
            f"## {doc['benchmark']}",
            "",
            f"**{doc.get('title', doc['benchmark'])}**",
            "",
            f"- command: `{doc['command']}`" + ("  (smoke size)" if doc.get("quick") else ""),
            f"- date: {doc['date']}, took {doc.get('seconds', '?')} s",
            f"- code: {_git(doc)}",
            (f"- machine: nproc {m['nproc']}, RAM {m['ram_gib']} GiB, {m['cpu']}, load average at the end "
            f"{' / '.join(str(x) for x in m.get('load_average', []))} (1/5/15 min)"),
            "",
        ]
        heads = doc.get("headline", [])
        if heads:
            lines += _table(["figure", "value", "target", "verdict", "note"],
                            [[h["metric"], _fmt(h["value"], h["unit"]), h.get("target") or "", _verdict(h),
                              h.get("note") or ""] for h in heads])
            lines.append("")
        table = doc.get("table")
        if table:
            lines += _table(table["columns"], table["rows"])
            lines.append("")
        for extra in doc.get("tables", []):  # further tables a benchmark wrote, each with a title
            lines += [f"*{extra['title']}*", ""] if extra.get("title") else []
            lines += _table(extra["columns"], extra["rows"])
            lines.append("")
        for note in doc.get("notes", []):
            lines.append(f"- {note}")
        png = RESULTS / f"{doc['benchmark']}.png"
        if png.exists():
            lines += ["", f"![{doc['benchmark']}](results/{png.name})"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    results = load_results()
    if not results:
        sys.exit("no results in benchmarks/results/: run a benchmark first (python -m benchmarks.<name>)")
    out = BENCH / "RESULTS.md"
    out.write_text(render(results))
    print(f"wrote {out.relative_to(BENCH.parent)} ({len(results)} benchmarks)")


if __name__ == "__main__":
    main()
