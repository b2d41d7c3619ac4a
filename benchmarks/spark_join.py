"""spark_join: a 3-table family scan in Spark with storage-partitioned join on vs off.

Set-up (untimed): one PostgreSQL catalog and one Spark session (``local[2]``, the
product's settings; ``spark_fusion.SparkBench``). N paragraph records of the
documentation (``spark_crossover.records_jsonl``; default 400,000 in 4 batches of
100,000, ``--quick`` 60,000 in 2) are ingested into ``aidata.web``, and ``html_parser``
and ``digit_ratio`` computed on the local engine, so the family has three physical
tables: the base (``RawData.raw_data``), ``html_parser``'s (``parsed_text``) and
``digit_ratio``'s. Every physical table is partitioned ``identity(_ai_append_name_),
bucket(16, _ai_unique_id_)``.

Timed: the family scan the Spark engine does to read a unit's inputs
(``spark_udfs.engine.read_unit``), over every batch: base LEFT JOIN parsed_text LEFT
JOIN digit_ratio on ``(_ai_unique_id_, _ai_append_name_)``, each table at the snapshot
the logical version pins, all 5 columns written to Spark's ``noop`` sink (every row
materialised, no aggregate on top). Variants, set per query on the SAME session, all
with ``spark.sql.autoBroadcastJoinThreshold=-1`` (no broadcast: the plan large tables
get):

- ``SPJ (engine)``: the session's ``STORAGE_PARTITIONED_JOIN_CONF`` with
  partially clustered distribution off - what the engine sets while reading
  (``UNIT_READ_CONF``);
- ``SPJ (session default)``: ``STORAGE_PARTITIONED_JOIN_CONF`` as
  ``build_spark_session`` leaves it (partially clustered distribution on);
- ``no SPJ``: ``spark.sql.sources.v2.bucketing.enabled=false`` and
  ``spark.sql.iceberg.planning.preserve-data-grouping=false``: shuffle joins.

Two more variants keep Spark's default ``autoBroadcastJoinThreshold`` (10 MiB, read from
the session), so Spark broadcasts a feature table small enough to ship:

- ``SPJ (engine), broadcast on``: the engine's settings with broadcast joins allowed;
- ``Spark defaults (broadcast on, no SPJ)``: what a user's plain Spark plans - no
  storage-partitioned join, broadcast joins on - the strongest peer for the scan.

Headlines: wall ratio ``no SPJ`` / ``SPJ (engine)`` (broadcast off in both), the same
against Spark's defaults, and the Exchange (shuffle) nodes counted in each variant's
EXPLAIN. The session runs on a user's JVM defaults (C2 JIT, G1, ``OMNI_SPARK_MEMORY_MB``).

    python -m benchmarks.spark_join [--quick] [--repeats N] [--records N] [--batches B]
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from benchmarks import common as C
from benchmarks.spark_crossover import records_jsonl
from benchmarks.spark_fusion import SparkBench, measure_spark

SPJ_ENGINE = "SPJ (engine)"
SPJ_DEFAULT = "SPJ (session default)"
NO_SPJ = "no SPJ"
SPJ_BCAST = "SPJ (engine), broadcast on"
SPARK_DEFAULTS = "Spark defaults (broadcast on, no SPJ)"
#: Spark's own autoBroadcastJoinThreshold, used when the session does not say
SPARK_BROADCAST_DEFAULT = "10485760b"
COLUMNS = ["RawData.raw_data", "ProcessedData.parsed_text", "digit_ratio"]


def variant_conf(broadcast_default: str = SPARK_BROADCAST_DEFAULT) -> dict[str, dict[str, str]]:
    from spark_udfs.engine import UNIT_READ_CONF
    from spark_udfs.session import STORAGE_PARTITIONED_JOIN_CONF

    no_broadcast = {"spark.sql.autoBroadcastJoinThreshold": "-1"}
    broadcast = {"spark.sql.autoBroadcastJoinThreshold": broadcast_default}
    no_spj = {"spark.sql.sources.v2.bucketing.enabled": "false",
              "spark.sql.iceberg.planning.preserve-data-grouping": "false"}
    return {
        SPJ_ENGINE: {**STORAGE_PARTITIONED_JOIN_CONF, **UNIT_READ_CONF, **no_broadcast},
        SPJ_DEFAULT: {**STORAGE_PARTITIONED_JOIN_CONF, **no_broadcast},
        NO_SPJ: {**STORAGE_PARTITIONED_JOIN_CONF, **no_spj, **no_broadcast},
        SPJ_BCAST: {**STORAGE_PARTITIONED_JOIN_CONF, **UNIT_READ_CONF, **broadcast},
        SPARK_DEFAULTS: {**STORAGE_PARTITIONED_JOIN_CONF, **no_spj, **broadcast},
    }


def family_scan(spark: Any, omni: Any, table: str) -> Any:
    """The logical columns :data:`COLUMNS` of every batch: one DataFrame joining the physical tables."""
    from pyspark.sql import functions as F

    from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
    from omni_iceberg.read.reader import plan_columns
    from spark_udfs.engine import table_name

    state = omni.state(table)
    frames = []
    for key, cols in plan_columns(state, COLUMNS).items():
        meta = state.physical_table(key)
        frame = spark.read.option("snapshot-id", str(meta.snapshot_id)).table(
            table_name(omni.config.catalog_name, meta.identifier))
        frames.append(frame.select(ID_COLUMN, BATCH_COLUMN, *[F.col(p).alias(f"c{COLUMNS.index(lg)}")
                                                              for p, lg in cols]))
    assert len(frames) == 3, f"expected base + 2 feature tables, got {len(frames)}"
    joined = frames[0]
    for frame in frames[1:]:
        joined = joined.join(frame, [ID_COLUMN, BATCH_COLUMN], "left")
    return joined


def explain(df: Any, mode: str = "simple") -> str:
    """What ``EXPLAIN`` prints for ``df`` (the physical plan before execution)."""
    return df._sc._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), mode)


def count_nodes(plan: str) -> dict[str, int]:
    """Shuffle ``Exchange`` and ``BroadcastExchange`` nodes, and the joins, in a plan text."""
    return {"exchange": len(re.findall(r"(?<![A-Za-z])Exchange\s", plan)),
            "broadcast": plan.count("BroadcastExchange"),
            "smj": plan.count("SortMergeJoin"), "bhj": plan.count("BroadcastHashJoin"),
            "sort": len(re.findall(r"(?<![A-Za-z])Sort \[", plan))}


def trial(spark: Any, omni: Any, variant: str, conf: dict[str, str]) -> dict:
    from spark_udfs.engine import session_conf

    with session_conf(spark, conf):
        df = family_scan(spark, omni, "web")
        plan = explain(df)
        _, wall, py_cpu, spark_cpu = measure_spark(lambda: df.write.format("noop").mode("overwrite").save())
        final = df._jdf.queryExecution().executedPlan().toString()
    return {"variant": variant, "wall_s": wall, "py_cpu_s": py_cpu, "spark_cpu_s": spark_cpu,
            "cpu_s": py_cpu + spark_cpu, "explain": count_nodes(plan), "final_plan": count_nodes(final),
            "load": C.load_average()}


def check_rows(spark: Any, omni: Any, conf: dict[str, str]) -> tuple[int, int, int]:
    """(rows, rows with parsed_text, rows with digit_ratio) of the scan under ``conf`` (untimed)."""
    from pyspark.sql import functions as F

    from spark_udfs.engine import session_conf

    with session_conf(spark, conf):
        r = family_scan(spark, omni, "web").agg(F.count(F.lit(1)), F.count("c1"), F.count("c2")).collect()[0]
    return int(r[0]), int(r[1]), int(r[2])


def set_up(sb: SparkBench, records: int, batches: int) -> tuple[Any, dict]:
    """A family of 3 physical tables holding ``records`` records in ``batches`` batches."""
    from omni_iceberg.features.library import digit_ratio, html_parser

    t0 = time.perf_counter()
    omni = sb.fresh_omni()
    lines = records_jsonl(records).read_text(encoding="utf-8").splitlines(keepends=True)
    parts = C.scratch_dir("spark_join")
    omni.create_table("web")
    per = -(-records // batches)
    for b in range(batches):
        part = Path(parts / f"batch{b}.jsonl")
        part.write_text("".join(lines[b * per:(b + 1) * per]), encoding="utf-8")
        omni.submit("web", [str(part)], batch=f"b{b}", progress=False)
    C.remove(parts)
    t1 = time.perf_counter()
    omni.register_features("web", [html_parser, digit_ratio])
    report = omni.backfill("web", ["digit_ratio"], isolation="inline", progress=False, has_gpu=False)
    assert report.status == "succeeded", report.status
    t2 = time.perf_counter()
    state = omni.state("web")
    sizes = {}
    for t in state.tables_for(COLUMNS):
        table = omni.catalog.load_table(t.identifier)
        snap = table.snapshot_by_id(t.snapshot_id)
        files = list(table.scan(snapshot_id=t.snapshot_id).plan_files()) if snap else []
        sizes[t.identifier] = {"files": len(files), "bytes": sum(f.file.file_size_in_bytes for f in files)}
    return omni, {"ingest_s": t1 - t0, "backfill_s": t2 - t1, "tables": sizes}


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--records", type=int, default=None, help="records (default 400000; quick 60000)")
        p.add_argument("--batches", type=int, default=None, help="batches they are ingested in (default 4; quick 2)")

    from spark_udfs.engine import session_conf

    args = C.parse_args("spark_join", __doc__, options, argv)
    started = time.perf_counter()
    records = args.records or (60_000 if args.quick else 400_000)
    batches = args.batches or (2 if args.quick else 4)
    repeats = args.repeats or (2 if args.quick else 5)
    trials = []
    with SparkBench("spark_join") as sb:
        jvm = dict(sb.jvm)
        confs = variant_conf(jvm.get("broadcast_join_threshold") or SPARK_BROADCAST_DEFAULT)
        order = list(confs)
        omni, setup = set_up(sb, records, batches)
        C.log(f"set-up: {records:,} records in {batches} batches, ingest {setup['ingest_s']:.1f} s, "
              f"html_parser + digit_ratio {setup['backfill_s']:.1f} s; tables "
              + ", ".join(f"{k.split('__')[-1]} {v['files']} files {v['bytes'] / C.MIB:.1f} MiB"
                          for k, v in setup["tables"].items()))
        checks = {v: check_rows(sb.spark, omni, confs[v]) for v in order}  # also warms every code path up
        plans = {}
        for v in order:
            with session_conf(sb.spark, confs[v]):
                plans[v] = explain(family_scan(sb.spark, omni, "web"))
        C.log("rows (all, with parsed_text, with digit_ratio) per variant: "
              + "; ".join(f"{v}: {c}" for v, c in checks.items()))
        for r in range(repeats):
            for variant in order[r % len(order):] + order[:r % len(order)]:  # rotate: no variant always first
                t = trial(sb.spark, omni, variant, confs[variant])
                t["repeat"] = r
                trials.append(t)
                C.log(f"{variant:22s}: {t['wall_s']:.2f} s wall, {t['cpu_s']:.2f} s CPU, EXPLAIN {t['explain']}, "
                      f"final {t['final_plan']}")

    def vals(variant, key):
        return [t[key] for t in trials if t["variant"] == variant]

    wall = {v: C.median(vals(v, "wall_s")) for v in order}
    cpu = {v: C.median(vals(v, "cpu_s")) for v in order}
    nodes = {v: trials[order.index(v)]["explain"] for v in order}
    final = {v: trials[order.index(v)]["final_plan"] for v in order}
    same = len(set(checks.values())) == 1 and checks[SPJ_ENGINE][0] == records
    heads = [
        C.headline(f"wall ratio: {NO_SPJ} / {SPJ_ENGINE}", wall[NO_SPJ] / wall[SPJ_ENGINE], "x", "> 1",
                   wall[NO_SPJ] > wall[SPJ_ENGINE], "3-table family scan, broadcast off in both"),
        C.headline(f"wall ratio: {SPJ_DEFAULT} / {SPJ_ENGINE}", wall[SPJ_DEFAULT] / wall[SPJ_ENGINE], "x", "", None,
                   "partially clustered distribution on (build_spark_session's default)"),
        C.headline(f"wall ratio: {SPARK_DEFAULTS} / {SPJ_ENGINE}", wall[SPARK_DEFAULTS] / wall[SPJ_ENGINE], "x",
                   "", None, f"{nodes[SPARK_DEFAULTS]['bhj']} broadcast hash joins, "
                             f"{nodes[SPARK_DEFAULTS]['exchange']} shuffles in EXPLAIN", peer=True),
        C.headline(f"wall ratio: {SPARK_DEFAULTS} / {SPJ_BCAST}", wall[SPARK_DEFAULTS] / wall[SPJ_BCAST], "x", "",
                   None, "broadcast on in both"),
        C.headline(f"CPU ratio: {NO_SPJ} / {SPJ_ENGINE}", cpu[NO_SPJ] / cpu[SPJ_ENGINE], "x", "", None),
        C.headline(f"Exchange nodes in EXPLAIN, {SPJ_ENGINE}", float(nodes[SPJ_ENGINE]["exchange"]), "", "0",
                   nodes[SPJ_ENGINE]["exchange"] == 0),
        C.headline(f"Exchange nodes in EXPLAIN, {SPJ_DEFAULT}", float(nodes[SPJ_DEFAULT]["exchange"]), "", "0",
                   nodes[SPJ_DEFAULT]["exchange"] == 0),
        C.headline(f"Exchange nodes in EXPLAIN, {NO_SPJ}", float(nodes[NO_SPJ]["exchange"]), ""),
        C.headline("same rows in every variant", 1.0 if same else 0.0, "bool", "1", same),
    ]
    table_rows = [[v, f"{wall[v]:.2f}", f"{cpu[v]:.2f}", f"{wall[v] / wall[SPJ_ENGINE]:.2f}",
                   str(nodes[v]["exchange"]), str(nodes[v]["smj"]), str(nodes[v]["bhj"]), str(nodes[v]["sort"]),
                   str(final[v]["exchange"])]
                  for v in order]
    notes = [
        (f"{records:,} paragraph records in {batches} batches; physical tables: "
         + ", ".join(f"`{k}` ({v['files']} files, {v['bytes'] / C.MIB:.1f} MiB)" for k, v in setup["tables"].items())
         + "."),
        ("Timed: `df.write.format('noop')` of base LEFT JOIN parsed_text LEFT JOIN digit_ratio on "
         "(_ai_unique_id_, _ai_append_name_), every batch, tables read at the pinned snapshots; the plan is "
         "built inside the timing-free EXPLAIN first. autoBroadcastJoinThreshold=-1 in the first three variants; "
         f"the broadcast-on ones keep Spark's {confs[SPARK_DEFAULTS]['spark.sql.autoBroadcastJoinThreshold']}."),
        f"Spark JVM: {jvm.get('flags')!r}, driver heap {jvm.get('driver_memory')} (a user's defaults).",
        ("Exchange = shuffle nodes (`Exchange hashpartitioning`), counted in the EXPLAIN text before execution; "
         "`final Exchange` is the same count in the executed (adaptive, final) plan."),
        "Variant settings: " + "; ".join(
            f"{v}: " + ", ".join(f"{k.replace('spark.sql.', '')}={val}" for k, val in confs[v].items()
                                if k not in confs[SPJ_DEFAULT] or confs[SPJ_DEFAULT][k] != val or v == SPJ_DEFAULT)
            for v in order) + ".",
        f"{repeats} repeat(s), variant order rotating; one Spark session (local[2]) throughout; every trial in the JSON.",
    ]
    payload = {
        "title": "Storage-partitioned join: 3-table family scan in Spark, SPJ on vs off, and against Spark's defaults (broadcast on)",
        "params": {"records": records, "batches": batches, "repeats": repeats, "columns": COLUMNS,
                   "confs": confs, "setup": setup, "row_checks": checks, "spark_jvm": jvm},
        "headline": heads,
        "table": {"columns": ["variant", "wall s (median)", "CPU s (median)", "wall / SPJ (engine)",
                              "Exchange in EXPLAIN", "SortMergeJoin", "BroadcastHashJoin", "Sort", "final Exchange"],
                  "rows": table_rows},
        "notes": notes,
        "explain": plans,
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2, a3) = C.figure(3, width=14)
    short = {SPJ_ENGINE: "SPJ\n(engine)", SPJ_DEFAULT: "SPJ\n(session default)", NO_SPJ: "no SPJ",
             SPJ_BCAST: "SPJ (engine)\nbroadcast on", SPARK_DEFAULTS: "Spark\ndefaults"}
    C.plot_trials(a1, {short[v]: vals(v, "wall_s") for v in order}, "wall seconds", "Wall time (dots = trials)")
    C.plot_trials(a2, {short[v]: [float(nodes[v]["exchange"])] for v in order}, "Exchange nodes",
                  "Shuffles (Exchange nodes) in EXPLAIN")
    C.plot_ratios(a3, {f"wall\n{NO_SPJ} / SPJ (engine)": wall[NO_SPJ] / wall[SPJ_ENGINE],
                       "CPU\nno SPJ / SPJ (engine)": cpu[NO_SPJ] / cpu[SPJ_ENGINE],
                       "wall\nSPJ (default) / SPJ (engine)": wall[SPJ_DEFAULT] / wall[SPJ_ENGINE]},
                  {f"wall\n{NO_SPJ} / SPJ (engine)": 1.0}, "Cost of shuffling (higher = SPJ saves more)")
    C.save_plot(plt, fig, args, f"spark_join: base + 2 feature tables, {records:,} records, {batches} batches")


if __name__ == "__main__":
    main()
