"""fusion: ONE fused backfill of N cheap features vs N separate backfills (one feature each).

Data: every page of the Python 3.11 and Django 3.2 documentation (1,222 distinct pages,
~80 MiB of HTML, through a WARC built by ``corpora.build_warc``; ``--quick``: 20 MiB,
233 pages). Each trial starts from a fresh embedded catalog: ingest, ``html_parser``
computed (so ``ProcessedData.parsed_text`` exists) and the N features registered -
all untimed. Then, timed:

- ``fused``: ``omni.backfill(table, all N features)`` - the planner puts them in one
  stage: parsed_text is read once per batch, the UDFs share one SharedBatch (character
  classes, word and line splits computed once), one worker process, one commit;
- ``separate``: N calls ``omni.backfill(table, [feature])`` one after the other.

A third, diagnostic variant ``fused, batch_size=slice`` registers the same features
(same versions) with ``batch_size`` = 8,192, the engine's slice size. With the shipped
``batch_size`` of 1,024, a slice of more rows is cut into sub-batches per feature,
and each sub-batch gets a fresh SharedBatch - so the fused features no longer share
their character classes, word and line splits (see the notes in the result).

All use ``isolation="process"`` (UDFs run in a worker child; its CPU time is counted
through ``RUSAGE_CHILDREN``) and the default GPU detection. The outputs of the
two variants are compared value by value (digest of all feature columns sorted by id).

Every backfill reports where its time went (``BackfillReport.phases``: plan, worker
start, read, compute, write, checkpoint, commit, system-table appends, ...). The result
holds them per trial (the separate side summed over its N backfills) and a table of
medians: what fusion shares (read, compute) apart from what every backfill pays.

    python -m benchmarks.fusion [--quick] [--repeats N] [--mib M]
"""

from __future__ import annotations

import hashlib
import time

from benchmarks import common as C

#: diagnostic variant: fused, with every feature's batch_size raised to the engine's slice size
DIAGNOSTIC = "fused, batch_size=slice"


def feature_set():
    from omni_iceberg.features import library as L

    return [L.punctuation_ratio, L.digit_ratio, L.uppercase_ratio, L.avg_word_length, L.code_ratio,
            L.repetition_ratio, L.stopword_ratio, L.safety_keyword_hits, L.domain_tag]


def values_digest(omni, table: str, names: list[str]) -> str:
    """sha256 of every feature value, rows sorted by id: equal digests = identical outputs."""
    data = omni.read(table, columns=["_ai_unique_id_"] + names).sort_by("_ai_unique_id_")
    h = hashlib.sha256()
    for name in ["_ai_unique_id_"] + names:
        h.update(repr(data.column(name).to_pylist()).encode())
    return h.hexdigest()[:16]


def trial(variant: str, source, names: list[str]) -> dict:
    omni = C.fresh_omni("fusion")
    try:
        prep = C.ingest_and_parse(omni, "web", [source])
        defs = [f.definition for f in feature_set()]
        if variant == DIAGNOSTIC:  # same features (same versions), batch_size as large as the engine's slices
            from omni_iceberg.backfill.run import SLICE_ROWS

            defs = [d.model_copy(update={"batch_size": SLICE_ROWS}) for d in defs]
        omni.register_features("web", defs)
        per_feature = []
        phases: dict[str, float] = {}
        if variant in ("fused", DIAGNOSTIC):
            report, wall, cpu = C.measure(lambda: omni.backfill("web", names, isolation="process", progress=False))
            stages = len(report.plan["stages"])
            assert report.status == "succeeded" and report.errors == 0, report.status
            phases = dict(report.phases)
        else:
            def run():
                for n in names:
                    r, w, c = C.measure(lambda n=n: omni.backfill("web", [n], isolation="process", progress=False))
                    assert r.status == "succeeded" and r.errors == 0, r.status
                    per_feature.append({"feature": n, "wall_s": w, "cpu_s": c, "phases": r.phases})
                    for k, v in r.phases.items():  # the separate side's phases: summed over its backfills
                        phases[k] = phases.get(k, 0.0) + v
                return len(names)

            stages, wall, cpu = C.measure(run)
        digest = values_digest(omni, "web", names)
    finally:
        C.remove(omni.config.home)
    return {"variant": variant, "wall_s": wall, "cpu_s": cpu, "stages": stages, "rows": prep["rows"],
            "prep_s": prep["ingest_s"] + prep["html_parser_s"], "digest": digest, "per_feature": per_feature,
            "phases": {k: round(v, 3) for k, v in phases.items()}, "load": C.load_average()}


#: phases fusion shares between the features of a stage (read once, one SharedBatch per chunk)
SHARED_PHASES = ("read_s", "compute_s")


def phase_table(trials: list[dict], n_features: int) -> tuple[dict, list[list[str]]]:
    """Median seconds per phase, fused vs separate (summed over its backfills), and their ratio."""
    from omni_iceberg.backfill.phases import PHASES

    def med(variant: str, phase: str) -> float:
        return C.median([t["phases"].get(phase, 0.0) for t in trials if t["variant"] == variant])

    seen = [p for p in PHASES + ("other_s",) if any(p in t["phases"] for t in trials)]
    medians = {v: {p: med(v, p) for p in seen} for v in ("fused", "separate")}
    rows = []
    for p in seen:
        f, s = medians["fused"][p], medians["separate"][p]
        rows.append([p.removesuffix("_s"), f"{f:.3f}", f"{s:.3f}", f"{s / n_features:.3f}",
                     f"{s / f:.2f}x" if f > 0.0005 else "-"])
    groups = {"shared by fusion (read + compute)": SHARED_PHASES,
              "every backfill pays (all other phases)": tuple(p for p in seen if p not in SHARED_PHASES)}
    for label, members in groups.items():
        f = sum(medians["fused"][p] for p in members)
        s = sum(medians["separate"][p] for p in members)
        rows.append([f"**{label}**", f"{f:.3f}", f"{s:.3f}", f"{s / n_features:.3f}", f"{s / f:.2f}x" if f else "-"])
    return medians, rows


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--mib", type=float, default=None,
                       help="MiB of HTML in the WARC (default: one round of both corpora, every page once)")

    args = C.parse_args("fusion", __doc__, options, argv)
    started = time.perf_counter()
    mib = args.mib or (20.0 if args.quick else round(C.docs_one_round_mib(), 1))
    repeats = args.repeats or (1 if args.quick else 3)
    source = C.docs_warc(mib)
    names = [f.definition.name for f in feature_set()]
    C.log(f"{len(names)} features: {', '.join(names)}; input {source.name}")

    trials = []
    order = ["fused", "separate", DIAGNOSTIC]
    for r in range(repeats):
        for variant in order[r % 3:] + order[:r % 3]:  # rotate: no variant always first
            t = trial(variant, source, names)
            t["repeat"] = r
            trials.append(t)
            C.log(f"{variant:8s}: {t['wall_s']:.2f} s wall, {t['cpu_s']:.2f} s CPU, {t['stages']} backfill stage(s), "
                  f"{t['rows']} rows, digest {t['digest']}")

    def vals(variant, key):
        return [t[key] for t in trials if t["variant"] == variant]

    fw, sw = C.median(vals("fused", "wall_s")), C.median(vals("separate", "wall_s"))
    fc, sc = C.median(vals("fused", "cpu_s")), C.median(vals("separate", "cpu_s"))
    dw, dc = C.median(vals(DIAGNOSTIC, "wall_s")), C.median(vals(DIAGNOSTIC, "cpu_s"))
    same = len({t["digest"] for t in trials}) == 1
    rows_n = trials[0]["rows"]
    per = {}
    for t in trials:
        for p in t["per_feature"]:
            per.setdefault(p["feature"], []).append(p["wall_s"])
    medians, phase_rows = phase_table(trials, len(names))
    shared_f = sum(medians["fused"].get(p, 0.0) for p in SHARED_PHASES)
    shared_s = sum(medians["separate"].get(p, 0.0) for p in SHARED_PHASES)
    fixed_f = sum(v for p, v in medians["fused"].items() if p not in SHARED_PHASES)
    fixed_s = sum(v for p, v in medians["separate"].items() if p not in SHARED_PHASES)
    heads = [
        C.headline("wall speed-up: separate / fused", sw / fw, "x", ">= 4 (paper: 2.7)", sw / fw >= 4),
        C.headline("read + compute phases: separate / fused", shared_s / shared_f, "x", "", None,
                   "what fusion shares: inputs read once, one SharedBatch per chunk"),
        C.headline("all other phases: separate / fused", fixed_s / fixed_f, "x", "", None,
                   f"worker start, writes, checkpoints, commits, system-table appends: {fixed_f:.2f} s fused, "
                   f"{fixed_s:.2f} s over the {len(names)} separate backfills"),
        C.headline("CPU change: fused vs separate", (fc - sc) / sc * 100, "%", "paper: -55.9%", None,
                   f"CPU ratio separate/fused = {sc / fc:.2f}x"),
        C.headline("outputs identical (all variants)", 1.0 if same else 0.0, "bool", "1", same),
        C.headline(f"diagnostic: wall speed-up separate / ({DIAGNOSTIC})", sw / dw, "x", "", None,
                   "fused with no per-feature sub-batches: what sharing one SharedBatch per chunk gives"),
        C.headline(f"diagnostic: CPU change ({DIAGNOSTIC}) vs separate", (dc - sc) / sc * 100, "%"),
    ]
    table_rows = [
        ["fused (1 backfill)", f"{fw:.2f}", f"{fc:.2f}", f"{rows_n * len(names) / fw:.0f}", "1"],
        [f"separate ({len(names)} backfills)", f"{sw:.2f}", f"{sc:.2f}", f"{rows_n * len(names) / sw:.0f}",
         str(len(names))],
        [f"diagnostic: {DIAGNOSTIC} (1 backfill)", f"{dw:.2f}", f"{dc:.2f}", f"{rows_n * len(names) / dw:.0f}", "1"],
    ]
    notes = [
        f"{rows_n} distinct pages ({source.name}); features: {', '.join(names)}.",
        ("Times cover only the backfill call(s); ingest, html_parser and registration are untimed set-up "
        f"(median {C.median(vals('fused', 'prep_s')):.1f} s per trial)."),
        "Separate backfills, median wall per feature: "
        + ", ".join(f"{k} {C.median(v):.2f} s" for k, v in per.items()) + ".",
        (f"Diagnostic variant ({DIAGNOSTIC}): the same features with batch_size = the engine's slice size, so "
         "no feature cuts a slice into its own sub-batches. Fused close to the diagnostic means the features of the "
         f"stage share one SharedBatch per chunk (here {fw:.2f} s vs {dw:.2f} s). Before commit b1b74c1 they did not: "
         "each feature rebuilt it per sub-batch (word splits computed 8 times, character classes 6 times on 1,222 "
         "pages), and at 04b3bc2 this benchmark measured 8.24 s fused vs 5.37 s diagnostic (2.10x vs 3.22x "
         "speed-up)."),
        f"{repeats} repeat(s), variant order rotating; each trial on a fresh catalog.",
        (f"Phases (the per-phase table): read and compute are what fusion shares ({shared_s / shared_f:.2f}x less on the "
         f"fused side); every other phase is paid per backfill or per feature table: {fixed_s / len(names):.2f} s "
         f"per separate backfill (median), {fixed_f:.2f} s for the fused one. A cost paid once per backfill counts "
         f"{len(names)} times on the separate side and once on the fused side, so cutting it makes each backfill "
         "faster but moves the speed-up towards the read + compute ratio; a cost paid per feature table (writes, "
         "checkpoints, pins) counts the same on both sides, and cutting it raises the speed-up."),
        ("Measured before the fixed-cost cuts (commit b7cfebc, same command, two runs between 06:17 and 06:45 UTC "
         "on 2026-11-30 while the load average on the 2 cores swung between 2.4 and 10): wall medians followed the "
         "load (2.47x and 6.59x); the CPU ratio was 3.40x and 3.64x; the one round at low load (2.4-2.5) took "
         "10.49 s fused vs 33.56 s separate = 3.20x. The cuts: the worker starts when the stage opens (its "
         "imports overlap the first read) and exits without interpreter teardown; one worker serves consecutive "
         "stages of plain-function UDFs; a checkpoint creates its staging branch and snapshot in one catalog "
         "commit."),
    ]
    payload = {
        "title": f"Fusion: one fused backfill of {len(names)} features vs {len(names)} separate backfills",
        "params": {"input_mib": mib, "repeats": repeats, "features": names, "rows": rows_n},
        "headline": heads,
        "table": {"columns": ["variant", "wall s (median)", "CPU s (median, incl. worker)", "feature values/s",
                              "backfill calls"], "rows": table_rows},
        "tables": [{"title": "Where the time goes: median seconds per phase (BackfillReport.phases)",
                    "columns": ["phase", "fused (1 backfill)", f"separate (sum of {len(names)})",
                                "separate, per backfill", "separate / fused"], "rows": phase_rows}],
        "phase_medians": medians,
        "notes": notes,
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2, a3) = C.figure(3, width=14)
    short = {"fused": "fused", "separate": "separate", DIAGNOSTIC: "fused,\nbatch_size=slice\n(diagnostic)"}
    C.plot_trials(a1, {short[v]: vals(v, "wall_s") for v in order}, "wall seconds", "Wall time (dots = trials)")
    C.plot_trials(a2, {short[v]: vals(v, "cpu_s") for v in order}, "CPU seconds (process + worker)", "CPU time")
    C.plot_ratios(a3, {"wall\nseparate/fused": sw / fw, "CPU\nseparate/fused": sc / fc,
                       "wall, diagnostic\nseparate/fused": sw / dw, "CPU, diagnostic\nseparate/fused": sc / dc},
                  {"wall\nseparate/fused": 4.0, "wall, diagnostic\nseparate/fused": 4.0},
                  "Speed-up of fusion (higher is better)")
    C.save_plot(plt, fig, args, f"fusion: {len(names)} cheap features on {rows_n} pages")


if __name__ == "__main__":
    main()
