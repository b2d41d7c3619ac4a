"""width: does a logical table stay as fast to query and commit at 2,500 columns as at 200?

Issue #9 ("Width"). Two logical tables with the same records (one batch) and W
``omni_iceberg.demo.wide`` features each (W = 200 and 2,500; ``--quick`` 20 and 200),
registered in one call and backfilled in one run: one physical table per feature, as
features are written. Each table is measured twice:

- ``per-feature tables``: as written - the view joins one table per feature;
- ``column groups``: after ``omni regroup`` (governance/column_groups.py) merged the
  narrow feature tables into groups of at most 256 columns, and ``omni rebucket``
  (governance/rebucket.py) chose the id-bucket count for the data's size - the governed
  layout ``omni maintain`` leaves before any query is logged;
- ``co-read groups``: then ``omni maintain`` once more, after the queries above were
  logged: governance/coread.py moves the columns those reads joined across groups into
  one table (at 2,500 columns the spread query's; at 200 nothing moves, one group holds
  them all).

Per (width, layout), interleaved repeats:

- P95 of a 15-column ``omni sql`` query (14 averages and one filter, columns spread over
  the width);
- P95 of the same query in Spark SQL on the Iceberg view omni maintains (Spark
  ``local[2]``, the product's settings, the shared PostgreSQL JDBC catalog), on the
  column-group layout only unless ``--spark-per-feature``: on per-feature tables this
  query joins 15 tables, and Spark's physical planning of 15 storage-partitioned joins
  (EnsureRequirements) was still running after 8 minutes at only 20 features - which is
  exactly the failure column groups fix (one join per group);
- commit latency: a metadata-only logical commit (moving a tag), median;
- view metadata bytes per version: the size of the view's newest metadata file and of
  the view body per dialect.

Headlines: growth from the narrow to the wide width, column groups, of the omni sql
P95 and the Spark P95 (target <= 1.2x; the paper saw 1.5x), and of commit latency.

    python -m benchmarks.width [--quick] [--repeats N] [--records N] [--widths 200,2500]
"""

from __future__ import annotations

import json
import math
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import common as C
from benchmarks.spark_fusion import SparkBench

PER_FEATURE = "per-feature tables"
GROUPED = "column groups"
COREAD = "co-read groups"


def query(table: str, width: int, shape: str) -> str:
    """15 feature columns, 14 averages and one filter: ``spread`` over the width, or the 15
    registered ``together`` first (w000..w014, as one feature family's outputs would be)."""
    from omni_iceberg.demo.wide import feature_name

    picks = [feature_name(i * width // 15 if shape == "spread" else i) for i in range(15)]
    avgs = ", ".join(f"avg({c}) AS a{i}" for i, c in enumerate(picks[1:]))
    return f"SELECT count(*) AS n, {avgs} FROM {table} WHERE {picks[0]} > 10"


SHAPES = ("spread", "together")
#: a Spark query still planning after this long is recorded as not finished (see the docstring)
SPARK_TIMEOUT_S = 300


def set_up(omni: Any, name: str, width: int, records: int, folder: Path) -> dict[str, float]:
    from omni_iceberg.demo.wide import wide_features

    src = folder / f"{name}.jsonl"
    src.write_text("".join(json.dumps({"raw_data": "<p>" + "x" * (i % 37) + f" record {i} of {name}</p>"}) + "\n"
                           for i in range(records)))
    out = {}
    t0 = time.perf_counter()
    omni.create_table(name)
    omni.submit(name, [str(src)], batch="a", progress=False)
    out["ingest_s"] = time.perf_counter() - t0
    features = wide_features(width)
    t0 = time.perf_counter()
    omni.register_features(name, features)
    out["register_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    omni.backfill(name, [f.name for f in features], isolation="inline", progress=False)
    out["backfill_s"] = time.perf_counter() - t0
    C.log(f"{name}: {width} features, ingest {out['ingest_s']:.1f} s, register {out['register_s']:.1f} s, "
          f"backfill {out['backfill_s']:.1f} s")
    return out


def view_facts(omni: Any, name: str) -> dict[str, Any]:
    """Physical tables the view reads, and the bytes ONE view version takes in the view metadata
    (its SQL per dialect and its schema; the file also holds the versions retention keeps)."""
    state = omni.state(name)
    view = omni.store.views.load_view("aidata", name)
    doc = json.loads(Path(view.metadata_location.removeprefix("file://")).read_text())
    version = next(v for v in doc["versions"] if v["version-id"] == doc["current-version-id"])
    schema = next(sc for sc in doc["schemas"] if sc["schema-id"] == version["schema-id"])
    bodies = {r["dialect"]: len(r["sql"]) for r in version["representations"]}
    return {"physical_tables": sum(1 for t in state.tables if not t.emptied),
            "view_version_bytes": len(json.dumps(version)) + len(json.dumps(schema)),
            "view_metadata_file_bytes": Path(view.metadata_location.removeprefix("file://")).stat().st_size,
            "spark_body_bytes": bodies.get("spark", 0), "trino_body_bytes": bodies.get("trino", 0)}


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--records", type=int, default=None, help="records per table (default 2,000; quick 500)")
        p.add_argument("--widths", default=None, help="comma-separated feature counts (default 200,2500; quick 20,200)")
        p.add_argument("--spark-per-feature", action="store_true",
                       help="also run Spark on the per-feature layout (minutes per query: see above)")

    args = C.parse_args("width", __doc__, options, argv)
    started = time.perf_counter()
    records = args.records or (500 if args.quick else 2_000)
    widths = [int(w) for w in (args.widths or ("20,200" if args.quick else "200,2500")).split(",")]
    repeats = args.repeats or (5 if args.quick else 10)
    folder = C.scratch_dir("width-input")
    trials: list[dict[str, Any]] = []
    facts: dict[str, Any] = {}
    setup: dict[str, Any] = {}
    answers: dict[str, Any] = {}
    sb = SparkBench("width").__enter__()
    spark_stuck = False
    try:
        from omni_iceberg.api import Omni

        omni = Omni(config=sb._config("omni"))
        names = {w: f"wid{w}" for w in widths}
        for w in widths:
            setup[str(w)] = set_up(omni, names[w], w, records, folder)

        def timed(w: int, layout: str, kind: str, run, repeat: int) -> None:
            t0 = time.perf_counter()
            run()
            trials.append({"width": w, "layout": layout, "kind": kind, "repeat": repeat,
                           "wall_s": time.perf_counter() - t0})

        def keep_answer(key: str, got: Any) -> None:
            first = got[0]
            answers[key] = [float(v) for v in (first.values() if isinstance(first, dict) else first)]

        def measure(layout: str) -> None:
            for w in widths:
                name = names[w]
                facts[f"{w} {layout}"] = view_facts(omni, name)
                runs = {f"omni sql {sh}": lambda q=query(name, w, sh): omni.query(q).to_pylist() for sh in SHAPES}
                runs["commit"] = lambda n=name: omni.tag(n, "probe")
                if layout != PER_FEATURE or args.spark_per_feature:  # spread over groups: measured last, see below
                    for sh in ("together", "spread") if layout == COREAD else ("together",):
                        runs[f"spark view {sh}"] = lambda q=query(f"omni.aidata.{name}", w, sh): [
                            tuple(r) for r in sb.spark.sql(q).collect()]
                for kind, run in runs.items():  # warm-up, untimed; the engines must agree
                    t0 = time.perf_counter()
                    got = run()
                    C.log(f"warm-up {w} {layout} {kind}: {time.perf_counter() - t0:.2f} s")
                    if kind != "commit":
                        keep_answer(f"{w} {kind.rsplit(' ', 1)[1]} {layout} {kind}", got)
                for r in range(repeats):
                    for kind in (list(runs) if r % 2 == 0 else list(reversed(runs))):
                        if kind.startswith("spark") and r >= max(3, repeats // 2):
                            continue  # Spark is slow per query: half the repeats, at least three
                        timed(w, layout, kind, runs[kind], r)
                mine = [t for t in trials if t["width"] == w and t["layout"] == layout]
                C.log(f"{w} {layout}: " + ", ".join(
                    f"{k} p95 {p95([t['wall_s'] for t in mine if t['kind'] == k]):.3f} s" for k in runs))

        measure(PER_FEATURE)
        for w in widths:
            t0 = time.perf_counter()
            report = omni.regroup(names[w], progress=False)
            setup[str(w)]["regroup_s"] = time.perf_counter() - t0
            moved = sum(len(m["members"]) for m in report["plan"]["moves"])
            setup[str(w)]["groups"] = len(report["plan"]["moves"])
            C.log(f"regrouped {names[w]}: {moved} tables into {len(report['plan']['moves'])} group(s) in "
                  f"{setup[str(w)]['regroup_s']:.1f} s")
            # what `omni maintain` does next: the id-bucket count the data's size calls for
            t0 = time.perf_counter()
            report = omni.rebucket(names[w], progress=False)
            setup[str(w)]["rebucket_s"] = time.perf_counter() - t0
            setup[str(w)]["buckets"] = omni.state(names[w]).table.bucket_count
            C.log(f"re-bucketed {names[w]}: {report['plan']['current']} -> {setup[str(w)]['buckets']} buckets in "
                  f"{setup[str(w)]['rebucket_s']:.1f} s")
        measure(GROUPED)
        # last: Spark on the spread query, which joins one table per group it touches. A query
        # still planning after SPARK_TIMEOUT_S is recorded as such; the JVM stays busy, so nothing
        # runs after it and the process ends without waiting for it.
        for w in widths:
            sql = query(f"omni.aidata.{names[w]}", w, "spread")
            box: dict[str, Any] = {}
            def spread_query() -> None:
                try:
                    box.update(rows=[tuple(x) for x in sb.spark.sql(sql).collect()])
                except Exception as e:  # noqa: BLE001 - e.g. the driver's heap: recorded, not timed
                    box.update(error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")

            for r in range(-1, max(3, repeats // 2)):
                box.clear()
                thread = threading.Thread(target=spread_query, daemon=True)
                t0 = time.perf_counter()
                thread.start()
                thread.join(SPARK_TIMEOUT_S)
                if thread.is_alive():
                    spark_stuck = True
                    facts[f"{w} {GROUPED}"]["spark_spread_timeout_s"] = SPARK_TIMEOUT_S
                    C.log(f"{w} column groups spark view spread: not finished after {SPARK_TIMEOUT_S} s")
                    break
                if "error" in box:  # a failed query is an outcome, not a time; the JVM may be gone
                    spark_stuck = True
                    facts[f"{w} {GROUPED}"]["spark_spread_error"] = box["error"]
                    C.log(f"{w} column groups spark view spread failed (repeat {r}): {box['error']}")
                    break
                if r < 0:
                    C.log(f"warm-up {w} column groups spark view spread: {time.perf_counter() - t0:.2f} s")
                    keep_answer(f"{w} spread {GROUPED} spark view spread", box["rows"])
                else:
                    trials.append({"width": w, "layout": GROUPED, "kind": "spark view spread", "repeat": r,
                                   "wall_s": time.perf_counter() - t0})
            if spark_stuck:
                break
        if not spark_stuck:
            # the workload is logged now (the omni sql queries above): omni maintain moves what it joined
            for w in widths:
                t0 = time.perf_counter()
                report = omni.maintain(names[w], progress=False)
                setup[str(w)]["coread_s"] = time.perf_counter() - t0
                setup[str(w)]["coread"] = report.coread["plan"] if report.coread else None
                setup[str(w)]["coread_moved"] = bool(report.coread and "split" in report.coread)
                C.log(f"maintain {names[w]} after the logged queries: {report.coread and report.coread['describe']}")
            measure(COREAD)
    finally:
        if not spark_stuck:
            sb.close()
        elif sb.pg is not None:
            import contextlib

            with contextlib.suppress(Exception):
                sb.pg.stop()
    C.remove(folder)

    for key in {k.split(" ", 2)[0] + " " + k.split(" ", 2)[1] for k in answers}:  # same answer everywhere
        got = [v for k, v in answers.items() if k.startswith(key + " ")]
        assert all(len(g) == len(got[0]) and all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(g, got[0]))
                   for g in got), answers

    def stat(w: int, layout: str, kind: str, fn=p95) -> float | None:
        vals = [t["wall_s"] for t in trials if t["width"] == w and t["layout"] == layout and t["kind"] == kind]
        return fn(vals) if vals else None

    hi = widths[-1]
    lo = 200 if 200 in widths and hi != 200 else widths[0]  # the growth: 200 -> 2,500 columns

    def growth(kind: str, fn=p95, layout: str = GROUPED) -> float | None:
        a, b = stat(lo, layout, kind, fn), stat(hi, layout, kind, fn)
        return b / a if a and b else None

    kinds = ["omni sql together", "omni sql spread", "spark view together", "spark view spread"]
    heads = []
    for kind in kinds:
        g = growth(kind)
        what = "15 columns registered together" if kind.endswith("together") else "15 columns spread over the width"
        engine = "omni sql" if kind.startswith("omni") else "Spark SQL on the view"
        if g is None:
            heads.append(C.headline(f"{engine} P95, {what}, {hi} / {lo} columns, column groups", float("nan"), "x",
                                    "<= 1.2x", False, f"did not finish within {SPARK_TIMEOUT_S} s at {hi}"))
            continue
        heads.append(C.headline(f"{engine} P95, {what}, {hi} / {lo} columns, column groups", g, "x", "<= 1.2x",
                                g <= 1.2, "paper: 1.5x" if engine != "omni sql" else ""))
    for kind in kinds:
        g = growth(kind, layout=COREAD)
        what = "15 columns registered together" if kind.endswith("together") else "15 columns spread over the width"
        engine = "omni sql" if kind.startswith("omni") else "Spark SQL on the view"
        if g is not None:
            heads.append(C.headline(f"{engine} P95, {what}, {hi} / {lo} columns, co-read groups (after omni "
                                    "maintain saw the queries)", g, "x", "<= 1.2x", g <= 1.2,
                                    "paper: 1.5x" if engine != "omni sql" else ""))
    commit = growth("commit", statistics.median)
    heads.append(C.headline(f"metadata-only commit latency, {hi} / {lo} columns, column groups", commit, "x", "",
                            None))
    for w in widths:  # what regrouping saved, at each width
        for kind in ("omni sql together", "omni sql spread"):
            a, b = stat(w, PER_FEATURE, kind), stat(w, GROUPED, kind)
            if a and b:
                heads.append(C.headline(f"{kind} P95 at {w} columns: per-feature tables / column groups", a / b,
                                        "x", "", None))
    rows = []
    for w in widths:
        for layout in (PER_FEATURE, GROUPED, COREAD):
            if f"{w} {layout}" not in facts:
                continue
            f = facts[f"{w} {layout}"]

            def cell(kind: str, fn=p95) -> str:
                v = stat(w, layout, kind, fn)
                if v is not None:
                    return f"{v:.3f}"
                if kind == "spark view spread" and f.get("spark_spread_error"):
                    return f"failed: {f['spark_spread_error'][:80]}"
                return f"not finished in {SPARK_TIMEOUT_S} s" if f.get("spark_spread_timeout_s") and \
                    kind == "spark view spread" else "not run"

            rows.append([str(w), layout, str(f["physical_tables"]), cell("omni sql together"), cell("omni sql spread"),
                         cell("spark view together"), cell("spark view spread"), cell("commit", statistics.median),
                         f"{f['view_version_bytes']:,}", f"{f['spark_body_bytes']:,} / {f['trino_body_bytes']:,}"])
    payload = {
        "title": f"Width: 15-column queries and a commit at {lo} and {hi} logical feature columns, "
                 "per-feature tables vs column groups vs co-read groups",
        "params": {"records": records, "widths": widths, "repeats": repeats, "spark_timeout_s": SPARK_TIMEOUT_S},
        "headline": heads,
        "table": {"columns": ["feature columns", "layout", "physical tables the view reads",
                              "omni sql P95 s (together)", "omni sql P95 s (spread)", "Spark view P95 s (together)",
                              "Spark view P95 s (spread)", "commit median s", "bytes per view version",
                              "view body bytes spark / trino"], "rows": rows},
        "notes": [
            f"{records:,} records in one batch per table; features omni_iceberg.demo.wide (w000...: one long each), "
            "registered in one call and backfilled in one run (set-up seconds in 'setup', with the regroup's "
            "seconds and the number of groups).",
            f"Queries: 'together' = {query('<table>', hi, 'together')}; 'spread' = {query('<table>', hi, 'spread')}",
            "Per-feature tables: the layout features are written in. Column groups: after omni regroup, then "
            "omni rebucket (both untimed, as omni maintain runs them; seconds and the bucket count chosen in "
            "'setup'); the same tables, the same data, the same answers (checked).",
            "Co-read groups: omni maintain run once more after the measurements above, whose omni sql queries "
            "it read from omni_sys.query_log (governance/coread.py: a move of the columns those reads joined "
            "across groups, weighed against every logged read; plan and seconds in 'setup'). At "
            f"{lo} columns nothing moves (one group holds the 15 columns), so that row re-measures the "
            "same layout.",
            "Commit: omni tag (a metadata-only logical commit that renders and writes the view for both "
            "engines), the median of the repeats. Bytes per view version: its SQL for both engines and its "
            "schema, as stored in the view metadata.",
            "Spark: half the repeats (at least three) per cell; the spread query last, each try cut at "
            f"{SPARK_TIMEOUT_S} s. Not run on per-feature tables (--spark-per-feature to force): a first run at 20 "
            "features (15 read, so 15 storage-partitioned joins) was still in Spark's physical planning "
            "(EnsureRequirements) after 8 minutes, on one query.",
        ],
        "setup": setup, "facts": facts, "answers": answers, "trials": trials,
    }
    C.write_result(args, payload, started)
    plt, fig, (a1, a2) = C.figure(2, width=12)
    colors = {PER_FEATURE: "#dd8452", GROUPED: "#4c72b0", COREAD: "#55a868"}
    for layout in (PER_FEATURE, GROUPED, COREAD):
        for kind, marker in zip(kinds, ("o-", "o:", "s-", "s:")):
            xs = [w for w in widths if stat(w, layout, kind) is not None]
            if xs:
                a1.plot(xs, [stat(w, layout, kind) for w in xs], marker, color=colors[layout],
                        label=f"{kind}, {layout}")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlabel("logical feature columns")
    a1.set_ylabel("P95 s")
    a1.set_title("15-column query P95", fontsize=10)
    a1.legend(fontsize=7)
    a1.grid(alpha=0.3)
    ratios = {f"{k} {hi}/{lo}": g for k in kinds if (g := growth(k)) is not None}
    ratios.update({f"{k} {hi}/{lo}, co-read": g for k in kinds if (g := growth(k, layout=COREAD)) is not None})
    if commit is not None:
        ratios[f"commit {hi}/{lo}"] = commit
    C.plot_ratios(a2, ratios, {k: 1.2 for k in ratios if not k.startswith("commit")}, "Growth with column groups")
    C.save_plot(plt, fig, args, f"width: {lo} -> {hi} feature columns, {records:,} records")
    if spark_stuck:  # a Spark query is still planning in this JVM: do not wait for it
        os._exit(0)


if __name__ == "__main__":
    main()
