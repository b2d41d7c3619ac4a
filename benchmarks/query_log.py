"""query_log: does ``omni.query`` latency grow with the number of queries already run?

Every ``omni.query`` logs one row of ``omni_sys.query_log``: to a local spool, flushed
into the Iceberg table in one commit per 200 rows (``catalog_ext/log_spool.py``; before,
one commit per query). This benchmark runs the same small logical query N times on one catalog (default 400,
``--quick`` 100) and, every 10th query, also times the same plan executed WITHOUT the
log append (``plan_query`` + ``execute_local``: the same scans and DuckDB SQL) as the
baseline measured in the same run.

Headlines: median latency of the last 10% of queries / of the first 10%, for
``omni.query`` and for the no-log baseline; and what the log costs a query: median
``omni.query`` / median no-log (spool flushes included where they fall).

    python -m benchmarks.query_log [--quick] [--queries N]
"""

from __future__ import annotations

import time

from benchmarks import common as C

QUERY = "SELECT count(*) AS pages, avg(digit_ratio) AS avg_digit_ratio FROM web"


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--queries", type=int, default=None, help="queries to run (400; quick 100)")

    args = C.parse_args("query_log", __doc__, options, argv)
    started = time.perf_counter()
    n = args.queries or (100 if args.quick else 400)
    from omni_iceberg.explore.planner import execute_local, plan_query
    from omni_iceberg.features import library as L

    omni = C.fresh_omni("query_log")
    trials = []
    try:
        prep = C.ingest_and_parse(omni, "web", [C.docs_warc(5)])
        omni.register_features("web", [L.digit_ratio])
        omni.backfill("web", ["digit_ratio"], isolation="inline", progress=False, has_gpu=False)
        for i in range(n):
            _, wall, _ = C.measure(lambda: omni.query(QUERY))
            trials.append({"variant": "omni.query", "i": i, "wall_s": wall})
            if i % 10 == 0:
                _, wall0, _ = C.measure(lambda: execute_local(omni, plan_query(omni, QUERY)))
                trials.append({"variant": "no log", "i": i, "wall_s": wall0})
                C.log(f"query {i:4d}: omni.query {wall * 1000:.0f} ms, same plan without the log {wall0 * 1000:.0f} ms")
        log_table = omni.catalog.load_table("omni_sys.query_log")
        snapshots = len(log_table.metadata.snapshots)
        files = len(log_table.inspect.files())
    finally:
        C.remove(omni.config.home)

    def window(variant, first: bool):
        xs = [t for t in trials if t["variant"] == variant]
        k = max(1, len(xs) // 10)
        return [t["wall_s"] for t in (xs[:k] if first else xs[-k:])]

    growth = {v: C.median(window(v, False)) / C.median(window(v, True)) for v in ("omni.query", "no log")}
    heads = [
        C.headline(f"omni.query latency, last 10% / first 10% of {n} queries", growth["omni.query"], "x", "~1", None),
        C.headline("same plan without the query-log append, last / first", growth["no log"], "x", "~1", None),
        C.headline("omni.query / the same plan without the log (medians, whole run)",
                   C.median([t["wall_s"] for t in trials if t["variant"] == "omni.query"])
                   / C.median([t["wall_s"] for t in trials if t["variant"] == "no log"]), "x", "~1", None,
                   "the log's cost per query"),
    ]
    rows = [[v, f"{C.median(window(v, True)) * 1000:.0f}", f"{C.median(window(v, False)) * 1000:.0f}",
             f"{growth[v]:.2f}"] for v in ("omni.query", "no log")]
    notes = [
        f"{prep['rows']} pages (5 MiB of HTML), one feature; the query reads 2 physical tables.",
        (f"After {n} queries omni_sys.query_log had {snapshots} snapshot(s) and {files} data file(s) (rows still "
         "in the spool not counted). Each flush is one append: a manifest list and a metadata file; the table "
         "compacts itself and expires its snapshots past 64."),
    ]
    payload = {
        "title": "Query log: omni.query latency as omni_sys.query_log grows",
        "params": {"queries": n, "query": QUERY},
        "headline": heads,
        "table": {"columns": ["variant", "first 10% ms (median)", "last 10% ms (median)", "last / first"],
                  "rows": rows},
        "notes": notes,
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2) = C.figure(2, width=12)
    for v, color in (("omni.query", "#4c72b0"), ("no log", "#55a868")):
        xs = [t for t in trials if t["variant"] == v]
        a1.plot([t["i"] for t in xs], [t["wall_s"] * 1000 for t in xs], ".", color=color, alpha=0.6, label=v)
    a1.set_xlabel("queries already run on this catalog")
    a1.set_ylabel("latency ms")
    a1.set_title("Latency of the same query", fontsize=10)
    a1.legend(fontsize=9)
    a1.grid(alpha=0.3)
    C.plot_ratios(a2, {"omni.query\nlast/first": growth["omni.query"], "no log\nlast/first": growth["no log"]},
                  {"omni.query\nlast/first": 1.0, "no log\nlast/first": 1.0}, "Latency growth (1 = flat)")
    C.save_plot(plt, fig, args, f"query log: {n} queries on one catalog")


if __name__ == "__main__":
    main()
