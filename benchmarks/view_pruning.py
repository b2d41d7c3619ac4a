"""view_pruning: a filtered aggregate on the logical VIEW vs on only the tables it needs, in Spark and Trino.

Set-up (untimed): one throwaway PostgreSQL catalog, one Spark session (``local[2]``,
the product's settings) and one Trino server on it. N distinct records made of
documentation paragraphs (``spark_crossover.records_jsonl``; default 100,000; ``--quick``
5,000) are ingested into two logical tables, and
``omni_iceberg.demo.wide`` features backfilled so that their families hold 10 and 100
physical tables (the base + 9 / 99 one-feature tables).

The query, on each width and each engine::

    SELECT count(*), avg(w001) FROM <table> WHERE w002 > 500

Variants, interleaved, each repeated (first run of each untimed: the warm-up):

- ``view``: the query as a Spark SQL / Trino user writes it, on the Iceberg view omni
  maintains (``omni.aidata.<table>``);
- ``needed tables``: the same query as ``omni sql --dialect spark|trino`` writes it -
  only the base and the two feature tables, each at its pinned snapshot. This is the
  baseline: what the view costs when the engine drops every table it does not read;
- ``plain-join body`` (10 tables only: at 100 it runs for minutes): the body the view had
  before, every table LEFT JOINed plainly (``render_family_select``), as a subquery -
  what the engines cannot prune;
- ``view, regrouped`` (both widths, after the rounds above): the same view query after
  ``omni regroup`` merged the narrow feature tables into column groups
  (governance/column_groups.py; at most 256 columns a group, so one group at both
  widths), against ``needed tables, regrouped``: ``omni sql --dialect``'s rewrite for the
  regrouped family (base + the group);
- ``view, materialized`` (100 tables, measured last): the same view query after
  ``omni accelerate --materialize`` copied every column into one table
  (governance/materialize.py): the view then drives from that copy and names no other
  table, so nothing grows with the width, not even analysis.

Headlines: view / needed tables per engine and width (target <= 1.5x), and the view's
growth from 10 to 100 tables per engine (target <= 1.2x). The EXPLAIN of every view
query is kept, with the physical tables it scans (at most 3 at both widths: Spark drops the base too).

    python -m benchmarks.view_pruning [--quick] [--repeats N] [--records N]
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from benchmarks import common as C
from benchmarks.spark_fusion import SparkBench

WIDTHS = (10, 100)  # physical tables in the family, base included
VIEW, NEEDED, PLAIN, MAT = "view", "needed tables", "plain-join body", "view, materialized"
REGROUPED, NEEDED_REGROUPED = "view, regrouped", "needed tables, regrouped"
ENGINES = ("spark", "trino")


def table_name(width: int) -> str:
    return f"wide{width}"


def logical_query(table: str) -> str:
    return f"SELECT count(*) AS n, avg(w001) AS a FROM {table} WHERE w002 > 500"


def set_up(omni: Any, records: int) -> dict[str, Any]:
    from omni_iceberg.demo.wide import wide_features

    from benchmarks.spark_crossover import records_jsonl

    source = records_jsonl(records)
    out: dict[str, Any] = {}
    for width in WIDTHS:
        name = table_name(width)
        t0 = time.perf_counter()
        omni.create_table(name)
        omni.submit(name, [str(source)], batch="b1", progress=False)
        t1 = time.perf_counter()
        features = wide_features(width - 1)
        omni.register_features(name, features)
        omni.backfill(name, [f.name for f in features], isolation="inline", progress=False)
        state = omni.store.load("aidata", name)
        assert len(state.tables) == width, (name, len(state.tables))
        out[name] = {"ingest_s": round(t1 - t0, 1), "backfill_s": round(time.perf_counter() - t1, 1),
                     "physical_tables": len(state.tables)}
        C.log(f"{name}: {len(state.tables)} physical tables, ingest {t1 - t0:.1f} s, "
              f"backfill {out[name]['backfill_s']:.1f} s")
    return out


def scanned_tables(engine: str, plan: str) -> list[str]:
    pattern = r"BatchScan omni\.aidata\.(\w+)" if engine == "spark" else r"table = omni:aidata\.(\w+)\$data"
    return sorted(set(re.findall(pattern, plan)))


class Engines:
    """Run one SQL text on Spark or Trino, return rows; EXPLAIN it."""

    def __init__(self, spark: Any, trino: Any):
        self.spark, self.trino = spark, trino

    def run(self, engine: str, sql: str) -> list[tuple]:
        if engine == "spark":
            return [tuple(r) for r in self.spark.sql(sql).collect()]
        return self.trino.query(sql)

    def explain(self, engine: str, sql: str) -> str:
        if engine == "spark":
            return self.spark.sql("EXPLAIN " + sql).collect()[0][0]
        return "\n".join(r[0] for r in self.trino.query("EXPLAIN " + sql))


def queries(omni: Any, width: int, engine: str) -> dict[str, str]:
    from catalog_ext.view_sql import render_family_select

    name = table_name(width)
    needed = omni.translate(logical_query(name), engine)
    out = {VIEW: logical_query(f"omni.aidata.{name}"), NEEDED: needed}
    if width == WIDTHS[0]:
        out[PLAIN] = logical_query(f"({render_family_select(omni.state(name), engine)}) AS v")
    if engine == "spark":  # name omni's catalog in Spark (Trino's connection has it as its default)
        out = {k: re.sub(r"(`aidata`\.`)", r"`omni`.\1", v) for k, v in out.items()}
    return out


def trial(eng: Engines, engine: str, width: int, variant: str, sql: str, repeat: int) -> dict[str, Any]:
    """One timed run of ``sql``, then its EXPLAIN alone (resolving, analysing, planning), timed apart."""
    t0 = time.perf_counter()
    eng.run(engine, sql)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    eng.explain(engine, sql)
    plan_s = time.perf_counter() - t1
    C.log(f"{engine:5s} {width:3d} tables {variant:24s}: {wall:.2f} s (EXPLAIN alone {plan_s:.2f} s)")
    return {"engine": engine, "width": width, "variant": variant, "repeat": repeat, "wall_s": wall,
            "explain_s": plan_s}


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--records", type=int, default=None, help="rows per table (default 100000; quick 5000)")

    from tests.services.trino import TrinoServer

    args = C.parse_args("view_pruning", __doc__, options, argv)
    started = time.perf_counter()
    records = args.records or (5_000 if args.quick else 100_000)
    repeats = args.repeats or (2 if args.quick else 5)
    trials: list[dict[str, Any]] = []
    plans: dict[str, dict[str, Any]] = {}
    checks: dict[str, Any] = {}
    with SparkBench("view_pruning") as sb:
        from omni_iceberg.api import Omni

        config = sb._config("omni")
        spark_extensions = sb.spark.conf.get("spark.sql.extensions")
        omni = Omni(config=config)
        setup = set_up(omni, records)
        with TrinoServer(config) as trino:
            C.log(f"Trino up in {trino.startup_s:.1f} s")
            eng = Engines(sb.spark, trino)
            cells = [(w, e) for w in WIDTHS for e in ENGINES]
            texts = {(w, e): queries(omni, w, e) for w, e in cells}
            for w, e in cells:  # warm-up (untimed) + plans + same answer from both variants
                for variant, sql in texts[(w, e)].items():
                    t0 = time.perf_counter()
                    rows = eng.run(e, sql)
                    checks[f"{e} {w} {variant}"] = [(int(r[0]), round(float(r[1]), 6)) for r in rows]
                    C.log(f"warm-up {e:5s} {w:3d} tables {variant:13s}: {time.perf_counter() - t0:.2f} s -> {rows}")
                plan = eng.explain(e, texts[(w, e)][VIEW])
                plans[f"{e} {w}"] = {"scans": scanned_tables(e, plan), "plan": plan}
            for r in range(repeats):
                for w, e in cells:
                    order = list(texts[(w, e)]) if r % 2 == 0 else list(reversed(texts[(w, e)]))
                    for variant in order:
                        trials.append(trial(eng, e, w, variant, texts[(w, e)][variant], r))

            # phase 1b: both families after omni regroup (column groups)
            regroup_s = {}
            for w in WIDTHS:
                t0 = time.perf_counter()
                report = omni.regroup(table_name(w), progress=False)
                regroup_s[w] = round(time.perf_counter() - t0, 1)
                state = omni.state(table_name(w))
                setup[table_name(w)]["regrouped_tables"] = sum(1 for t in state.tables if not t.emptied)
                C.log(f"regrouped {table_name(w)}: {len(report['plan']['moves'])} group(s), "
                      f"{setup[table_name(w)]['regrouped_tables']} tables with rows, in {regroup_s[w]} s")
                for e in ENGINES:
                    fresh = queries(omni, w, e)
                    texts[(w, e)][REGROUPED], texts[(w, e)][NEEDED_REGROUPED] = fresh[VIEW], fresh[NEEDED]
                    for variant in (REGROUPED, NEEDED_REGROUPED):
                        rows = eng.run(e, texts[(w, e)][variant])  # warm-up
                        checks[f"{e} {w} {variant}"] = [(int(r[0]), round(float(r[1]), 6)) for r in rows]
                    plan = eng.explain(e, texts[(w, e)][REGROUPED])
                    plans[f"{e} {w} regrouped"] = {"scans": scanned_tables(e, plan), "plan": plan}
            for r in range(repeats):
                for w, e in cells:
                    for variant in ([REGROUPED, NEEDED_REGROUPED] if r % 2 == 0 else [NEEDED_REGROUPED, REGROUPED]):
                        trials.append(trial(eng, e, w, variant, texts[(w, e)][variant], r))

            # phase 2: the wide family with every column materialized into one copy
            wide = table_name(WIDTHS[1])
            t0 = time.perf_counter()
            report = omni.materialize(wide, ["RawData"] + [c.path for c in omni.state(wide).columns
                                                             if c.kind == "feature"], progress=False)
            materialize_s = round(time.perf_counter() - t0, 1)
            C.log(f"materialized {report['plan']['identifier']}: {report['rows_written']:,} rows in "
                  f"{materialize_s} s")
            for e in ENGINES:
                texts[(WIDTHS[1], e)][MAT] = texts[(WIDTHS[1], e)][VIEW]
                rows = eng.run(e, texts[(WIDTHS[1], e)][MAT])  # warm-up
                checks[f"{e} {WIDTHS[1]} {MAT}"] = [(int(r[0]), round(float(r[1]), 6)) for r in rows]
                plan = eng.explain(e, texts[(WIDTHS[1], e)][MAT])
                plans[f"{e} {WIDTHS[1]} materialized"] = {"scans": scanned_tables(e, plan), "plan": plan}
            for r in range(repeats):
                for e in ENGINES:
                    for variant in ([MAT, NEEDED] if r % 2 == 0 else [NEEDED, MAT]):
                        label = variant + (" (phase 2)" if variant == NEEDED else "")
                        trials.append(trial(eng, e, WIDTHS[1], label, texts[(WIDTHS[1], e)][variant], r))

    def med(e: str, w: int, v: str, key: str = "wall_s") -> float:
        return C.median(t[key] for t in trials if (t["engine"], t["width"], t["variant"]) == (e, w, v))

    same = len({json.dumps(c) for c in checks.values()}) == 1
    heads, rows = [], []
    for e in ENGINES:
        for w in WIDTHS:
            ratio = med(e, w, VIEW) / med(e, w, NEEDED)
            heads.append(C.headline(f"{e}: view / needed tables, {w} tables", ratio, "x", "<= 1.5", ratio <= 1.5,
                                    f"view {med(e, w, VIEW):.2f} s, needed {med(e, w, NEEDED):.2f} s (medians, warm)"))
            rows.append([e, str(w), f"{med(e, w, VIEW):.2f}", f"{med(e, w, NEEDED):.2f}", f"{ratio:.2f}",
                         str(len(plans[f"{e} {w}"]["scans"])),
                         f"{med(e, w, VIEW, 'explain_s'):.2f} / {med(e, w, NEEDED, 'explain_s'):.2f}",
                         f"{med(e, w, PLAIN):.2f}" if PLAIN in texts[(w, e)] else "not run"])
        plain = med(e, WIDTHS[0], PLAIN) / med(e, WIDTHS[0], VIEW)
        heads.append(C.headline(f"{e}: plain-join body / view, {WIDTHS[0]} tables", plain, "x", "> 1", plain > 1,
                                f"what the old body cost: {med(e, WIDTHS[0], PLAIN):.2f} s"))
        growth = med(e, WIDTHS[1], VIEW) / med(e, WIDTHS[0], VIEW)
        heads.append(C.headline(f"{e}: view growth, {WIDTHS[0]} -> {WIDTHS[1]} tables", growth, "x", "<= 1.2",
                                growth <= 1.2))
    for e in ENGINES:
        for w in WIDTHS:
            ratio = med(e, w, REGROUPED) / med(e, w, NEEDED_REGROUPED)
            heads.append(C.headline(f"{e}: regrouped view / needed tables, {w} tables before regroup", ratio, "x",
                                    "<= 1.5", ratio <= 1.5,
                                    f"view {med(e, w, REGROUPED):.2f} s (EXPLAIN {med(e, w, REGROUPED, 'explain_s'):.2f}"
                                    f" s), needed {med(e, w, NEEDED_REGROUPED):.2f} s"))
            rows.append([e, f"{w}, regrouped ({setup[table_name(w)]['regrouped_tables']} tables)",
                         f"{med(e, w, REGROUPED):.2f}", f"{med(e, w, NEEDED_REGROUPED):.2f}", f"{ratio:.2f}",
                         str(len(plans[f"{e} {w} regrouped"]["scans"])),
                         f"{med(e, w, REGROUPED, 'explain_s'):.2f} / {med(e, w, NEEDED_REGROUPED, 'explain_s'):.2f}",
                         "not run"])
        growth = med(e, WIDTHS[1], REGROUPED) / med(e, WIDTHS[0], REGROUPED)
        heads.append(C.headline(f"{e}: regrouped view growth, {WIDTHS[0]} -> {WIDTHS[1]} tables before regroup",
                                growth, "x", "<= 1.2", growth <= 1.2))
    for e in ENGINES:
        ratio = med(e, WIDTHS[1], MAT) / med(e, WIDTHS[1], NEEDED + " (phase 2)")
        heads.append(C.headline(f"{e}: materialized view / needed tables, {WIDTHS[1]} tables", ratio, "x", "<= 1.5",
                                ratio <= 1.5, f"view {med(e, WIDTHS[1], MAT):.2f} s (EXPLAIN "
                                f"{med(e, WIDTHS[1], MAT, 'explain_s'):.2f} s), needed "
                                f"{med(e, WIDTHS[1], NEEDED + ' (phase 2)'):.2f} s"))
        growth = med(e, WIDTHS[1], MAT) / med(e, WIDTHS[0], VIEW)
        heads.append(C.headline(f"{e}: view growth, {WIDTHS[0]} tables -> {WIDTHS[1]} materialized", growth, "x",
                                "<= 1.2", growth <= 1.2))
        rows.append([e, f"{WIDTHS[1]}, materialized", f"{med(e, WIDTHS[1], MAT):.2f}",
                     f"{med(e, WIDTHS[1], NEEDED + ' (phase 2)'):.2f}",
                     f"{med(e, WIDTHS[1], MAT) / med(e, WIDTHS[1], NEEDED + ' (phase 2)'):.2f}",
                     str(len(plans[f"{e} {WIDTHS[1]} materialized"]["scans"])),
                     f"{med(e, WIDTHS[1], MAT, 'explain_s'):.2f} / "
                     f"{med(e, WIDTHS[1], NEEDED + ' (phase 2)', 'explain_s'):.2f}", "not run"])
    # at most the base and the 2 feature tables: Spark drops the base too (DropContainedDriver)
    pruned = all(len(p["scans"]) <= 3 for k, p in plans.items() if "materialized" not in k and "regrouped" not in k)
    one_table = all(len(p["scans"]) == 1 for k, p in plans.items() if "materialized" in k)
    heads.append(C.headline("materialized view plans scan one table (both engines)", 1.0 if one_table else 0.0,
                            "bool", "1", one_table))
    heads.append(C.headline("view plans scan at most the 3 needed tables (every engine, width)", 1.0 if pruned else 0.0,
                            "bool", "1", pruned))
    heads.append(C.headline("same answer from view and needed tables, both engines", 1.0 if same else 0.0,
                            "bool", "1", same))
    notes = [
        f"{records:,} paragraph records per table, one batch; families of {WIDTHS[0]} and {WIDTHS[1]} physical tables "
        "(base + one table per `wNNN` feature of omni_iceberg.demo.wide). Set-up: "
        + "; ".join(f"`{k}` ingest {v['ingest_s']} s, backfill {v['backfill_s']} s" for k, v in setup.items()) + ".",
        "Warm-up: the first run of every (engine, width, variant) is untimed; then "
        f"{repeats} interleaved repeats (variant order alternating). Spark local[2] (one session), "
        "Trino 476 single node; one PostgreSQL JDBC catalog for both.",
        "`view` is the Iceberg view omni maintains; `needed tables` is `omni sql --dialect <engine>`'s rewrite of the "
        "same query (base + the 2 feature tables at their pinned snapshots): the engine-side optimum for this query.",
        "`EXPLAIN s` times EXPLAIN of the same text alone (resolving every table the text names, analysis, "
        "optimisation): the part of a view query that grows with the family's width even when its scans do not.",
        (f"`regrouped`: after those rounds, `omni regroup` on both families (" + ", ".join(
            f"{table_name(w)} {regroup_s[w]} s" for w in WIDTHS) + ", untimed); `needed tables, regrouped` is "
         "`omni sql --dialect`'s rewrite for the regrouped family, timed interleaved with the view."),
        f"`{table_name(WIDTHS[1])}, materialized`: after the timed rounds above, `omni accelerate --materialize` "
        f"copied RawData and all {WIDTHS[1] - 1} features into one table ({materialize_s} s, untimed); the view then "
        "drives from it. `needed tables` is timed again in that phase (same SQL text as before).",
        "Tables each view plan scans: " + "; ".join(f"{k}: {', '.join(v['scans'])}" for k, v in plans.items()) + ".",
        f"Spark session extensions: `{spark_extensions}`. With omni's (spark_udfs/java), the view's body is cut "
        "to the columns a query names before Spark analyses it (PruneOmniViews: EXPLAIN no longer grows with "
        "the family), and the per-key "
        "aggregate around each feature table the query reads is removed; per-key aggregates left in each Spark "
        "view plan: " + "; ".join(f"{k}: {v['plan'].count('first(')}" for k, v in plans.items()
                                  if k.startswith("spark")) + ".",
        "Spark runs with omni's session settings, dynamic partition pruning and runtime bloom filters off "
        "(spark_udfs.session.VIEW_JOIN_CONF) for both variants. The query's filter keeps only rows with a "
        "w002 value, so omni's rewrite drives from that feature table (its rows are a subset of the base's: "
        "skip_base_table.py) and, since DropContainedDriver, so does Spark on the view: the tables the cut "
        "view reads carry its version's mark, the proof of that containment. Trino's view still joins the base.",
    ]
    payload = {
        "title": "The logical view costs what a query reads: Spark and Trino, 10 vs 100 physical tables",
        "params": {"records": records, "repeats": repeats, "widths": list(WIDTHS), "setup": setup,
                   "materialize_s": materialize_s, "regroup_s": regroup_s, "spark_extensions": spark_extensions,
                   "checks": checks, "queries": {f"{e} {w}": texts[(w, e)] for w, e in cells}},
        "headline": heads,
        "table": {"columns": ["engine", "physical tables", "view s (median)", "needed tables s (median)",
                              "view / needed", "tables the view scans", "EXPLAIN s view / needed",
                              "plain-join body s (median)"], "rows": rows},
        "notes": notes,
        "explain": {k: v["plan"] for k, v in plans.items()},
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plot(args, trials, records)


SHORT = {VIEW: "view", NEEDED: "needed", PLAIN: "old\nplain join", REGROUPED: "view,\nregrouped",
         NEEDED_REGROUPED: "needed,\nregrouped", MAT: "view,\nmaterialized"}


def plot(args: Any, trials: list[dict[str, Any]], records: int) -> None:
    """Wall time per (width, variant), one panel per engine (``--replot`` redraws it from the JSON)."""
    plt, fig, (a1, a2) = C.figure(2, width=13)
    for ax, e in ((a1, "spark"), (a2, "trino")):
        cells: dict[str, list[float]] = {}
        for t in trials:
            if t["engine"] == e and t["variant"] in SHORT:
                cells.setdefault(f"{SHORT[t['variant']]}\n{t['width']} tables", []).append(t["wall_s"])
        C.plot_trials(ax, cells, "wall seconds", f"{e}: filtered aggregate over 2 features")
    C.save_plot(plt, fig, args, f"view_pruning: {records:,} rows, the view vs only the needed tables")


def replot() -> None:
    import argparse
    import json as _json

    doc = _json.loads((C.RESULTS / "view_pruning.json").read_text())
    args = argparse.Namespace(name="view_pruning", quick=doc["quick"])
    plot(args, doc["trials"], doc["params"]["records"])


if __name__ == "__main__":
    import sys

    replot() if sys.argv[1:] == ["--replot"] else main()
