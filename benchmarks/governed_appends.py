"""governed_appends: do 200 small appends read like one big batch once governance has run?

Issue #9 ("Layout that does not fragment"; the paper saw scans 3-5x slower after many
small appends without governance). Three logical tables in one fresh embedded catalog
hold the same ``--appends`` x ``--rows`` records (distinct real documentation
paragraphs) and the same 12-output feature, computed the way a pipeline would:

- ``fresh``: every record in one batch, one backfill (the baseline);
- ``ungoverned``: ``--appends`` batches, each submitted and then backfilled on its own;
- ``governed``: the same appends, with ``omni.maintain`` (compaction of small files,
  retention keeping the last 20 versions, orphan files) every ``--maintain-every``
  appends and once at the end - what a platform team's periodic job does.

The query is a 15-column filtered scan in logical SQL (``Omni.query``, the local
engine): the two keys, the URL-like ``page`` field and the 12 feature outputs, filtered
on one feature. Trials are interleaved across the three tables so they share the machine's
load. Headline: median query time governed / fresh (target <= 1.1x) and ungoverned /
fresh (what governance saves); files per physical table are reported too.

    python -m benchmarks.governed_appends [--quick] [--appends N] [--rows N] [--maintain-every N]
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from benchmarks import common as C
from omni_iceberg.features import feature

OUTPUTS = {f"ga_{n}": t for n, t in [
    ("chars", "long"), ("words", "long"), ("digits", "long"), ("upper", "long"), ("spaces", "long"),
    ("commas", "long"), ("periods", "long"), ("parens", "long"), ("mean_word", "double"),
    ("digit_ratio", "double"), ("upper_ratio", "double"), ("prefix", "string")]}
FILTER_COLUMN = "ga_words"
VARIANTS = ("fresh", "ungoverned", "governed")


@feature(outputs=OUTPUTS, inputs=["RawData.raw_data"], form="batch", batch_size=65536)
def ga_stats(raw_data):
    """Twelve cheap text statistics: a wide feature whose cost is not what is measured."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.fill_null(raw_data, "")
    chars = pc.utf8_length(text).cast("int64")

    def count(pattern: str):
        return pc.count_substring_regex(text, pattern).cast("int64")

    words = count(r"\S+")
    digits, upper = count(r"[0-9]"), count(r"[A-Z]")
    denominator = pc.max_element_wise(chars, pa.scalar(1, pa.int64())).cast("double")
    return {"ga_chars": chars, "ga_words": words, "ga_digits": digits, "ga_upper": upper,
            "ga_spaces": count(r" "), "ga_commas": count(r","), "ga_periods": count(r"\."),
            "ga_parens": count(r"[()]"),
            "ga_mean_word": pc.divide(chars.cast("double"),
                                      pc.max_element_wise(words, pa.scalar(1, pa.int64())).cast("double")),
            "ga_digit_ratio": pc.divide(digits.cast("double"), denominator),
            "ga_upper_ratio": pc.divide(upper.cast("double"), denominator),
            "ga_prefix": pc.utf8_slice_codeunits(text, 0, 8)}


def _split(source: Path, folder: Path, parts: int) -> list[Path]:
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    size = len(lines) // parts
    out = []
    for i in range(parts):
        path = folder / f"a{i:04d}.jsonl"
        path.write_text("".join(lines[i * size:(i + 1) * size]), encoding="utf-8")
        out.append(path)
    return out


def _files(omni: Any, name: str) -> dict[str, int]:
    """Data files each physical table's pinned snapshot reads."""
    state = omni.state(name)
    out = {}
    for t in state.tables:
        if t.snapshot_id is not None:
            table = omni.catalog.load_table(t.identifier)
            out[t.key] = sum(1 for _ in table.scan(snapshot_id=t.snapshot_id).plan_files())
    return out


def _query(name: str) -> str:
    columns = ", ".join(["_ai_unique_id_", "_ai_append_name_", "RawData.page AS page"] + list(OUTPUTS))
    return f"SELECT {columns} FROM aidata.{name} WHERE {FILTER_COLUMN} >= 12"


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--appends", type=int, default=None, help="small appends (200; quick 30)")
        p.add_argument("--rows", type=int, default=None, help="records per append (250; quick 100)")
        p.add_argument("--maintain-every", type=int, default=25, help="appends between two maintain runs (25)")

    args = C.parse_args("governed_appends", __doc__, options, argv)
    started = time.perf_counter()
    appends = args.appends or (30 if args.quick else 200)
    rows = args.rows or (100 if args.quick else 250)
    repeats = args.repeats or (7 if args.quick else 21)
    source = C.paragraphs_jsonl(appends * rows)
    inputs = C.scratch_dir("governed-inputs")
    omni = C.fresh_omni("governed")
    build: dict[str, float] = {}
    maintains: list[dict[str, Any]] = []
    try:
        parts = _split(source, inputs, appends)
        for v in VARIANTS:
            omni.create_table(v)
            omni.register_features(v, [ga_stats])
        t0 = time.perf_counter()
        omni.submit("fresh", [str(source)], batch="all", progress=False)
        omni.backfill("fresh", ["ga_stats"], isolation="inline", progress=False, has_gpu=False)
        build["fresh_s"] = time.perf_counter() - t0
        build["ungoverned_s"] = build["governed_s"] = 0.0
        for i, part in enumerate(parts):
            for v in ("ungoverned", "governed"):
                t0 = time.perf_counter()
                omni.submit(v, [str(part)], batch=f"a{i:04d}", progress=False)
                omni.backfill(v, ["ga_stats"], batches=[f"a{i:04d}"], isolation="inline", progress=False,
                              has_gpu=False)
                build[f"{v}_s"] += time.perf_counter() - t0
            if (i + 1) % args.maintain_every == 0 or i + 1 == appends:
                m, wall, _ = C.measure(lambda: omni.maintain("governed", 20, min_age_s=0, progress=False))
                maintains.append({"after_append": i + 1, "wall_s": round(wall, 2),
                                  "compacted_tables": len(m.compaction["plan"]["tables"]) if m.compaction else 0})
                build["maintain_s"] = build.get("maintain_s", 0.0) + wall
            if (i + 1) % 25 == 0:
                C.log(f"append {i + 1}/{appends}")
        counts = {v: omni.query(f"SELECT count(*) AS n FROM aidata.{v}").column(0)[0].as_py() for v in VARIANTS}
        if len(set(counts.values())) != 1:
            raise SystemExit(f"the three tables hold different row counts: {counts}")
        answers = {}
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for trial in range(repeats):
            order = VARIANTS if trial % 2 == 0 else tuple(reversed(VARIANTS))
            for v in order:
                t0 = time.perf_counter()
                result = omni.query(_query(v))
                times[v].append(time.perf_counter() - t0)
                answers[v] = result.num_rows
        if len(set(answers.values())) != 1:
            raise SystemExit(f"the three tables answer the query differently: {answers}")
        files = {v: _files(omni, v) for v in VARIANTS}
    finally:
        C.remove(omni.config.home)
        C.remove(inputs)

    p50 = {v: C.median(t) for v, t in times.items()}
    p95 = {v: sorted(t)[min(len(t) - 1, int(round(0.95 * (len(t) - 1))))] for v, t in times.items()}
    governed, ungoverned = p50["governed"] / p50["fresh"], p50["ungoverned"] / p50["fresh"]
    heads = [
        C.headline(f"15-column filtered scan after {appends} small appends, governed / one fresh batch (P50)",
                   governed, "x", "<= 1.1x", governed <= 1.1,
                   f"omni.maintain every {args.maintain_every} appends and at the end"),
        C.headline("the same, ungoverned / one fresh batch (P50)", ungoverned, "x", "", None,
                   "what governance saves (the paper saw 3-5x)"),
        C.headline("files read per query, ungoverned / governed", sum(files["ungoverned"].values())
                   / max(1, sum(files["governed"].values())), "x", "", None,
                   f"{sum(files['ungoverned'].values())} vs {sum(files['governed'].values())}"),
    ]
    payload = {
        "title": f"{appends} small appends then a 15-column filtered scan: governed vs one fresh batch",
        "params": {"appends": appends, "rows_per_append": rows, "maintain_every": args.maintain_every,
                   "repeats": repeats, "query": _query("<table>")},
        "headline": heads,
        "table": {"columns": ["variant", "P50 ms", "P95 ms", "data files (base + feature)", "rows returned"],
                  "rows": [[v, round(p50[v] * 1000, 1), round(p95[v] * 1000, 1),
                            " + ".join(str(n) for n in files[v].values()), answers[v]] for v in VARIANTS]},
        "notes": [
            (f"{appends * rows:,} distinct documentation paragraphs ({rows} per append); the feature ga_stats has "
             "12 outputs (text statistics with pyarrow), so the view joins the base table and one feature table."),
            (f"Build time (not the measured figure): fresh {build['fresh_s']:.0f} s, ungoverned "
             f"{build['ungoverned_s']:.0f} s, governed {build['governed_s']:.0f} s plus "
             f"{build.get('maintain_s', 0):.0f} s in {len(maintains)} maintain runs."),
            f"Query: {_query('<table>')} (Omni.query, local engine), {repeats} interleaved trials per table.",
        ],
        "maintains": maintains,
        "trials": {v: [round(x * 1000, 2) for x in t] for v, t in times.items()},
    }
    C.write_result(args, payload, started)
    plt, fig, (ax1, ax2) = C.figure()
    C.plot_trials(ax1, {v: [x * 1000 for x in t] for v, t in times.items()}, "ms", "15-column filtered scan")
    C.plot_ratios(ax2, {"governed / fresh": governed, "ungoverned / fresh": ungoverned}, {"governed / fresh": 1.1},
                  "P50 ratio vs one fresh batch")
    C.save_plot(plt, fig, args, payload["title"])
    print(json.dumps({"p50_ms": {v: round(x * 1000, 1) for v, x in p50.items()}, "files": files}, indent=1))


if __name__ == "__main__":
    main()
