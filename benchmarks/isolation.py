"""isolation: a fused backfill where 0.005% of records raise vs the same backfill with 0% bad.

Data: distinct paragraphs (>= 40 characters) of the Python and Django documentation,
one record each, written to a JSONL (default 40,000 records; ``--quick`` 20,000), so
0.005% is at least one record. Each trial starts from a fresh embedded catalog with
the records ingested and ``html_parser`` computed (untimed).

The timed backfill fuses 9 features: 8 built-ins (punctuation_ratio, uppercase_ratio,
avg_word_length, code_ratio, repetition_ratio, stopword_ratio, safety_keyword_hits,
domain_tag) and ``fragile_digit_ratio``: the built-in ``digit_ratio`` wrapped so that
the whole Arrow batch raises when it holds a record whose md5 (of its parsed text) is
at or below a threshold. The engine then bisects the batch to isolate the bad records,
records them in ``omni_sys.errors`` and finishes in one pass.

- ``clean``: threshold "" (no md5 is <= "": 0 bad records, same per-row md5 work);
- ``bad``: the threshold is the k-th smallest md5 of the data, k = max(1, round(N * 0.00005)):
  a deterministic 1/20,000 slice of the records.

Headline: (bad - clean) / clean wall time (target <= 3%), end to end (fresh catalog,
ingest and html_parser untimed, then the backfill) and at engine level (the stage's
computation alone on the same in-memory slices, many interleaved pairs: less noise).

    python -m benchmarks.isolation [--quick] [--repeats N] [--records N]
"""

from __future__ import annotations

import hashlib
import json
import time

from benchmarks import common as C
from omni_iceberg.features.library.text import PARSED_TEXT, digit_ratio
from omni_iceberg.features.udf import feature

BAD_SHARE = 0.00005  # 0.005 %


@feature({"fragile_digit_ratio": "double"}, name="fragile_digit_ratio", inputs=[PARSED_TEXT], form="batch",
         batch_size=1024)
def fragile_digit_ratio(parsed_text, threshold="", shared=None):
    """``digit_ratio``, but the batch raises if any text's md5 hex is <= ``threshold`` ("" = never)."""
    import hashlib as _h

    texts = parsed_text.to_pylist()
    for t in texts:
        if t is not None and _h.md5(t.encode("utf-8")).hexdigest() <= threshold:
            raise ValueError(f"injected failure: md5 {_h.md5(t.encode('utf-8')).hexdigest()} <= {threshold}")
    return digit_ratio(parsed_text, shared=shared)


def builtins_set():
    from omni_iceberg.features import library as L

    return [L.punctuation_ratio, L.uppercase_ratio, L.avg_word_length, L.code_ratio, L.repetition_ratio,
            L.stopword_ratio, L.safety_keyword_hits, L.domain_tag]


def threshold_for(source, share: float) -> tuple[str, int]:
    """The md5 at the k-th position of the sorted md5s of the records' text (k = share of N, >= 1)."""
    from omni_iceberg.features.library.text import html_parser

    digests = []
    with open(source, encoding="utf-8") as f:
        for line in f:
            text = html_parser(json.loads(line)["raw_data"], "text/plain")  # as the JSONL reader gives it
            if text is not None:
                digests.append(hashlib.md5(text.encode("utf-8")).hexdigest())
    digests.sort()
    k = max(1, round(len(digests) * share))
    return digests[k - 1], k


def trial(variant: str, source, threshold: str) -> dict:
    omni = C.fresh_omni("isolation")
    try:
        prep = C.ingest_and_parse(omni, "para", [source])
        # the errors system table is created on a catalog's first failed record ever; create it up
        # front in both variants so the figure is the steady-state cost, not a one-time table creation
        from catalog_ext import system_tables

        system_tables.system_table(omni.catalog, system_tables.ERRORS)
        fragile = fragile_digit_ratio.definition.model_copy(update={"params": {"threshold": threshold}})
        omni.register_features("para", [*builtins_set(), fragile])
        names = [f.definition.name for f in builtins_set()] + ["fragile_digit_ratio"]
        report, wall, cpu = C.measure(lambda: omni.backfill("para", names, isolation="process", progress=False,
                                                            max_error_ratio=0.01))
        errors = omni.errors("para", report.run_id)
        stages = len(report.plan["stages"])
    finally:
        C.remove(omni.config.home)
    return {"variant": variant, "wall_s": wall, "cpu_s": cpu, "status": report.status, "rows": prep["rows"],
            "errors": report.errors, "error_rows": errors.num_rows,
            "error_classes": sorted(set(errors.column("exception_class").to_pylist())) if errors.num_rows else [],
            "stages": stages, "passes": 1, "load": C.load_average()}


def engine_level(source, threshold: str, repeats: int) -> list[dict]:
    """The stage's computation alone, clean vs bad, on the same in-memory slices, interleaved.

    The slices are what the engine feeds its worker (``iter_logical_slices`` regrouped
    into ``SLICE_ROWS`` parts); an InlineWorker computes the 9 fused features on each.
    No prep per trial, no I/O and no commits: many short paired trials, so the
    bisection cost is measured with less noise than end to end.
    """
    from omni_iceberg.backfill.local import _rebatch
    from omni_iceberg.backfill.run import SLICE_ROWS
    from omni_iceberg.backfill.worker import InlineWorker
    from omni_iceberg.features.udf import get_udf
    from omni_iceberg.read.reader import iter_logical_slices

    omni = C.fresh_omni("isolation-engine")
    try:
        C.ingest_and_parse(omni, "para", [source])
        state = omni.state("para")
        parts = list(_rebatch(iter_logical_slices(omni.catalog, state, [PARSED_TEXT], "b1"), SLICE_ROWS, None))
    finally:
        C.remove(omni.config.home)
    base = [f.definition for f in builtins_set()]
    workers = {}
    for variant, thr in (("clean", ""), ("bad", threshold)):
        defs = base + [fragile_digit_ratio.definition.model_copy(update={"params": {"threshold": thr}})]
        workers[variant] = (InlineWorker(defs, {d.name: get_udf(d.udf) for d in defs}), [d.name for d in defs])
    out = []
    for r in range(repeats):
        for variant in (("clean", "bad") if r % 2 == 0 else ("bad", "clean")):
            worker, names = workers[variant]
            results, wall, cpu = C.measure(lambda w=worker, ns=names: [w.compute(ns, part) for part in parts])
            failed = sum(len(res.failures.get("fragile_digit_ratio", [])) for res in results)
            out.append({"variant": variant, "repeat": r, "wall_s": wall, "cpu_s": cpu, "failed": failed,
                        "slices": len(parts)})
            C.log(f"engine-level {variant:5s}: {wall:.2f} s wall, {cpu:.2f} s CPU, {failed} failed record(s)")
    # the bisection's own cost, with less noise: the fragile feature alone, clean vs bad, many pairs
    alone = {}
    for variant, thr in (("clean", ""), ("bad", threshold)):
        d = fragile_digit_ratio.definition.model_copy(update={"params": {"threshold": thr}})
        alone[variant] = InlineWorker([d], {d.name: get_udf(d.udf)})
    for r in range(2 * repeats):
        for variant in (("clean", "bad") if r % 2 == 0 else ("bad", "clean")):
            _, wall, cpu = C.measure(lambda w=alone[variant]: [w.compute(["fragile_digit_ratio"], p) for p in parts])
            out.append({"variant": f"{variant}, fragile feature alone", "repeat": r, "wall_s": wall, "cpu_s": cpu})
    return out


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--records", type=int, default=None, help="paragraph records (40,000; quick 20,000)")
        p.add_argument("--engine-repeats", type=int, default=None,
                       help="paired trials of the engine-level measurement (9; quick 3)")

    args = C.parse_args("isolation", __doc__, options, argv)
    started = time.perf_counter()
    n = args.records or (20_000 if args.quick else 40_000)
    repeats = args.repeats or (1 if args.quick else 3)
    source = C.paragraphs_jsonl(n)
    threshold, k = threshold_for(source, BAD_SHARE)
    C.log(f"{n} paragraph records ({source.name}); {k} bad record(s): md5 <= {threshold}")

    trials = []
    for r in range(repeats):
        for variant in (("clean", "bad") if r % 2 == 0 else ("bad", "clean")):
            t = trial(variant, source, threshold if variant == "bad" else "")
            t["repeat"] = r
            trials.append(t)
            C.log(f"{variant:5s}: {t['wall_s']:.2f} s wall, {t['cpu_s']:.2f} s CPU, status {t['status']}, "
                  f"{t['errors']} failed record(s) {t['error_classes']}, {t['stages']} stage(s)")

    engine = engine_level(source, threshold, args.engine_repeats or (3 if args.quick else 9))

    def vals(variant, key, rows=None):
        return [t[key] for t in (trials if rows is None else rows) if t["variant"] == variant]

    ec, eb = C.median(vals("clean", "wall_s", engine)), C.median(vals("bad", "wall_s", engine))
    e_paired = [(b - c) / c * 100 for c, b in zip(vals("clean", "wall_s", engine), vals("bad", "wall_s", engine))]
    per_bad = C.median([b - c for c, b in zip(vals("clean", "wall_s", engine), vals("bad", "wall_s", engine))]) \
        / max(k, 1)
    fa_clean = C.median(vals("clean, fragile feature alone", "wall_s", engine))
    fa_bad = C.median(vals("bad, fragile feature alone", "wall_s", engine))
    attributed = (fa_bad - fa_clean) / ec * 100  # extra seconds of the bisection, over the clean 9-feature stage
    e_cpu = (C.median(vals("bad", "cpu_s", engine)) - C.median(vals("clean", "cpu_s", engine))) \
        / C.median(vals("clean", "cpu_s", engine)) * 100

    cw, bw = C.median(vals("clean", "wall_s")), C.median(vals("bad", "wall_s"))
    cc, bc = C.median(vals("clean", "cpu_s")), C.median(vals("bad", "cpu_s"))
    # overheads are medians of the per-repeat paired differences (each repeat ran clean and bad back to back)
    paired = [(b - c) / c * 100 for c, b in zip(vals("clean", "wall_s"), vals("bad", "wall_s"))]
    paired_cpu = [(b - c) / c * 100 for c, b in zip(vals("clean", "cpu_s"), vals("bad", "cpu_s"))]
    overhead, overhead_cpu = C.median(paired), C.median(paired_cpu)
    one_pass = all(t["status"] == "succeeded" for t in trials)
    bad_ok = all(t["errors"] == k for t in trials if t["variant"] == "bad") and \
        all(t["errors"] == 0 for t in trials if t["variant"] == "clean")
    rows_n = trials[0]["rows"]
    heads = [
        C.headline("wall overhead of 0.005% bad records (median of paired repeats)", overhead, "%", "<= 3%",
                   overhead <= 3, f"per-repeat: {', '.join(f'{p:+.1f}%' for p in paired)}"),
        C.headline("CPU overhead of 0.005% bad records (median of paired repeats)", overhead_cpu, "%", "<= 3%",
                   overhead_cpu <= 3, f"per-repeat: {', '.join(f'{p:+.1f}%' for p in paired_cpu)}"),
        C.headline("engine-level wall overhead (stage computation only, same slices)", C.median(e_paired), "%", "<= 3%",
                   C.median(e_paired) <= 3,
                   f"median of {len(e_paired)} paired trials; medians {ec:.2f} s clean vs {eb:.2f} s bad; "
                   f"CPU {e_cpu:+.1f}%"),
        C.headline("attributed overhead: bisection seconds / clean 9-feature stage", attributed, "%", "<= 3%",
                   attributed <= 3,
                   f"fragile feature alone: {fa_clean:.3f} s clean vs {fa_bad:.3f} s bad (median of "
                   f"{len(vals('clean, fragile feature alone', 'wall_s', engine))} pairs) = "
                   f"+{(fa_bad - fa_clean) * 1000:.0f} ms, over the {ec:.2f} s clean engine-level stage"),
        C.headline("completed in one pass with exactly the bad records isolated", 1.0 if one_pass and bad_ok else 0.0,
                   "bool", "1", one_pass and bad_ok),
    ]
    table_rows = [
        ["clean (0% bad)", f"{cw:.2f}", f"{cc:.2f}", str(rows_n), "0", "succeeded"],
        [f"bad (0.005% = {k})", f"{bw:.2f}", f"{bc:.2f}", str(rows_n), str(k),
         ", ".join(sorted(set(vals("bad", "status"))))],
        ["engine-level clean", f"{ec:.2f}", f"{C.median(vals('clean', 'cpu_s', engine)):.2f}", str(rows_n), "0", "-"],
        ["engine-level bad", f"{eb:.2f}", f"{C.median(vals('bad', 'cpu_s', engine)):.2f}", str(rows_n),
         str(C.median(vals("bad", "failed", engine))), "-"],
    ]
    notes = [
        f"{rows_n} records ({source.name}), 9 features fused in one stage (8 built-ins + fragile_digit_ratio).",
        (f"Bad records: the {k} record(s) whose parsed-text md5 is <= {threshold}; fragile_digit_ratio raises for the "
        "whole 1,024-row Arrow batch holding one, and the engine bisects it down to the record."),
        ("Times cover the backfill call only; ingest, html_parser and creating the (empty) omni_sys.errors table "
        "are untimed set-up on a fresh catalog per trial (in a catalog that never saw a failure, the first one "
        "also creates that table)."),
        (f"{repeats} repeat(s), order alternating. Timing noise on this shared 2-core machine is of the same order "
        "as the target (a few %): read the per-repeat values, not only the median; CPU time (process + worker) "
        "is less sensitive to other users' load than wall time."),
        ("Engine-level rows: the 9 fused features computed by an InlineWorker on the same in-memory slices the "
        "engine would read (no ingest, I/O or commit per trial), clean and bad interleaved; they isolate the cost "
        "of bisecting the failing batches. The end-to-end bad run also appends the failed records to "
        "omni_sys.errors (one more commit)."),
        ("Attributed overhead: the fragile feature alone on the same slices, clean vs bad, many pairs; the extra "
         "seconds are the bisection (each bad record costs ~20 extra UDF calls on halving sub-batches), divided by "
         "the clean 9-feature stage time. It is a LOWER bound: inside the fused stage the clean run of the fragile "
         "feature finds the chunk's SharedBatch already filled by the other features, while each bisection "
         "sub-batch gets a fresh SharedBatch and recomputes it; the engine-level pair includes that."),
        (f"Per bad record, the engine-level paired difference is {per_bad * 1000:+.0f} ms (median), i.e. the clean "
         f"stage's work on ~{per_bad / (ec / rows_n):,.0f} rows: the overhead is set by the bad-record rate and "
         "the batch size, not by the table size."),
    ]
    payload = {
        "title": "Isolation: fused backfill with 0.005% failing records vs 0%",
        "params": {"records": n, "bad_records": k, "threshold": threshold, "repeats": repeats},
        "headline": heads,
        "table": {"columns": ["variant", "wall s (median)", "CPU s (median)", "rows", "failed records", "status"],
                  "rows": table_rows},
        "notes": notes,
        "trials": trials,
        "engine_level_trials": engine,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2) = C.figure(2, width=11)
    C.plot_trials(a1, {"0% bad": vals("clean", "wall_s"), f"0.005% bad\n({k} records)": vals("bad", "wall_s")},
                  "wall seconds", "Fused backfill wall time (dots = trials)")
    # signed overheads: noise can make the bad run faster than the clean one
    series = {"end-to-end wall": paired, "end-to-end CPU": paired_cpu, "engine-level wall": e_paired}
    for i, (label, values) in enumerate(series.items()):
        med_v = C.median(values)
        a2.barh(i, med_v, color="#4c72b0" if med_v >= 0 else "#55a868", alpha=0.7, height=0.5)
        a2.scatter(values, [i] * len(values), color="black", s=14, zorder=3)
        a2.annotate(f"median {med_v:+.1f}%", (med_v, i + 0.3), fontsize=9, ha="center")
    a2.axvline(0, color="black", linewidth=0.8)
    a2.axvline(3, color="#c44e52", linestyle="--", linewidth=1.5, label="target +3%")
    a2.set_yticks(range(len(series)))
    a2.set_yticklabels(list(series))
    a2.invert_yaxis()
    a2.set_xlabel("(bad - clean) / clean, % (dots = repeats)")
    a2.set_title("Overhead of 0.005% raising records", fontsize=10)
    a2.legend(loc="best", fontsize=8)
    a2.grid(axis="x", alpha=0.3)
    C.save_plot(plt, fig, args, f"isolation: {rows_n} records, {k} raising")


if __name__ == "__main__":
    main()
