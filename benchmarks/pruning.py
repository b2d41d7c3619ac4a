"""pruning: a logical query that needs 2 of 5 feature tables vs the same query over the full view.

Set-up (untimed): a fresh embedded catalog; every page of the Python and Django
documentation ingested into ``web`` (``--quick``: 20 MiB of HTML); features
``html_parser``, ``digit_ratio``, ``code_ratio``, ``stopword_ratio`` and ``domain_tag``
registered and backfilled - 6 physical tables (the base table + 5 feature tables).

The query::

    SELECT domain_tag, count(*) AS pages, avg(digit_ratio) AS avg_digit_ratio
    FROM web GROUP BY domain_tag ORDER BY domain_tag

Variants, interleaved, each repeated:

- ``omni.query``: the planner reads only the tables holding referenced columns (the two
  feature tables, plus the keys of the base table), then DuckDB aggregates;
- ``full view``: ``omni.read("web")`` - every column of the logical table, i.e. all
  6 physical tables joined, as a reader of the family's full view gets it - then the
  same aggregation in DuckDB over that Arrow table;
- ``read 2 columns``: ``omni.read("web", columns=[domain_tag, digit_ratio])`` + the same
  DuckDB aggregation: the reader's own column pruning, without the SQL planner.

Results of the three are checked to be equal. Headline: full view / omni.query.

    python -m benchmarks.pruning [--quick] [--repeats N] [--mib M]
"""

from __future__ import annotations

import time

from benchmarks import common as C

QUERY = ("SELECT domain_tag, count(*) AS pages, avg(digit_ratio) AS avg_digit_ratio "
         "FROM web GROUP BY domain_tag ORDER BY domain_tag")
LOCAL_QUERY = ("SELECT domain_tag, count(*) AS pages, avg(digit_ratio) AS avg_digit_ratio "
               "FROM t GROUP BY domain_tag ORDER BY domain_tag")


def features():
    from omni_iceberg.features import library as L

    return [L.digit_ratio, L.code_ratio, L.stopword_ratio, L.domain_tag]


def duckdb_agg(table):
    import duckdb

    con = duckdb.connect()
    con.register("t", table)
    return con.sql(LOCAL_QUERY).to_arrow_table()


def rounded(result) -> list[tuple]:
    return [(r["domain_tag"], r["pages"], round(r["avg_digit_ratio"] or 0.0, 12)) for r in result.to_pylist()]


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--mib", type=float, default=None,
                       help="MiB of HTML (default: one round of both corpora; quick: 20)")

    args = C.parse_args("pruning", __doc__, options, argv)
    started = time.perf_counter()
    mib = args.mib or (20.0 if args.quick else round(C.docs_one_round_mib(), 1))
    repeats = args.repeats or (3 if args.quick else 7)

    omni = C.fresh_omni("pruning")
    trials = []
    try:
        prep = C.ingest_and_parse(omni, "web", [C.docs_warc(mib)])
        omni.register_features("web", features())
        omni.backfill("web", [f.definition.name for f in features()], isolation="inline", progress=False,
                      has_gpu=False)
        state = omni.state("web")
        explain = omni.explain(QUERY)
        status = omni.status("web")
        C.log(f"{prep['rows']} rows, {len(state.tables)} physical tables")
        print(explain)

        variants = {
            "omni.query": lambda: omni.query(QUERY),
            "full view": lambda: duckdb_agg(omni.read("web")),
            "read 2 columns": lambda: duckdb_agg(omni.read("web", columns=["domain_tag", "digit_ratio"])),
        }
        expected = None
        names = list(variants)
        for r in range(repeats):
            for name in (names if r % 2 == 0 else names[::-1]):
                result, wall, cpu = C.measure(variants[name])
                got = rounded(result)
                expected = expected or got
                assert got == expected, f"{name} returned a different result: {got} != {expected}"
                trials.append({"variant": name, "repeat": r, "wall_s": wall, "cpu_s": cpu, "load": C.load_average()})
                C.log(f"{name:15s}: {wall:.3f} s wall, {cpu:.3f} s CPU")
    finally:
        C.remove(omni.config.home)

    def vals(variant, key="wall_s"):
        return [t[key] for t in trials if t["variant"] == variant]

    med = {v: C.median(vals(v)) for v in variants}
    ratio = med["full view"] / med["omni.query"]
    scanned = [ln.strip() for ln in explain.splitlines() if ln.strip().startswith("scan ")]
    pruned = next((ln.strip() for ln in explain.splitlines() if ln.strip().startswith("pruned")), "")
    table_bytes = {t["identifier"] if isinstance(t, dict) and "identifier" in t else str(t): t
                   for t in status.get("physical_tables", [])} if isinstance(status, dict) else {}
    heads = [
        C.headline("wall time: full view / omni.query (planner prunes)", ratio, "x", "> 1", ratio > 1),
        C.headline("wall time: read 2 columns / omni.query", med["read 2 columns"] / med["omni.query"], "x", "",
                   None, "the planner vs the reader's own column pruning"),
        C.headline("CPU time: full view / omni.query",
                   C.median(vals("full view", "cpu_s")) / C.median(vals("omni.query", "cpu_s")), "x"),
    ]
    rows = [[v, f"{med[v]:.3f}", f"{C.median(vals(v, 'cpu_s')):.3f}", f"{med[v] / med['omni.query']:.2f}"]
            for v in variants]
    notes = [
        f"{prep['rows']} pages, {len(state.tables)} physical tables: "
        + ", ".join(t.identifier for t in state.tables) + ".",
        f"omni.query scanned {len(scanned)} of {len(state.tables)} tables: " + " | ".join(scanned)
        + (f"; {pruned}" if pruned else "") + ".",
        ("The full view reads every column of every physical table (raw HTML, parsed text, all features) and "
        "joins them on the keys, which is what SELECT over the family view with all columns costs."),
        f"{repeats} repeat(s), order alternating; results of all variants checked equal every time.",
    ]
    payload = {
        "title": "Pruning: query over 2 of 5 feature tables vs the full view",
        "params": {"input_mib": mib, "repeats": repeats, "rows": prep["rows"], "query": QUERY,
                   "physical_tables": len(state.tables)},
        "headline": heads,
        "table": {"columns": ["variant", "wall s (median)", "CPU s (median)", "wall / omni.query"], "rows": rows},
        "notes": notes,
        "explain": explain,
        "physical_tables": table_bytes,
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2) = C.figure(2, width=11)
    C.plot_trials(a1, {"omni.query\n(pruned)": vals("omni.query"), "full view\n+ DuckDB": vals("full view"),
                       "read 2 cols\n+ DuckDB": vals("read 2 columns")}, "wall seconds",
                  "Query wall time (dots = trials)")
    C.plot_ratios(a2, {"full view /\nomni.query": ratio, "read 2 cols /\nomni.query": med["read 2 columns"] / med["omni.query"]},
                  {"full view /\nomni.query": 1.0}, "Slow-down vs the pruned query")
    C.save_plot(plt, fig, args, f"pruning: {len(scanned)} of {len(state.tables)} physical tables scanned, "
                f"{prep['rows']} rows")


if __name__ == "__main__":
    main()
