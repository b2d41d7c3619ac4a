"""spark_fusion: ONE fused Spark backfill of 9 cheap features vs 9 Spark backfills (one feature each).

Data: every page of the Python 3.11 and Django 3.2 documentation (1,222 distinct pages,
~80 MiB of HTML, through a WARC built by ``corpora.build_warc``; ``--quick``: 20 MiB,
233 pages), as in ``benchmarks.fusion``. One PostgreSQL catalog server and ONE Spark
session (``local[2]``, started and warmed up once, untimed) serve every trial; each
trial gets its own catalog (a new catalog name in the same database, registered in
the running session), because omni reuses feature values by content across the
tables of one catalog. Per trial, untimed: ingest, ``html_parser`` on the local engine
(so ``ProcessedData.parsed_text`` exists) and the 9 features registered. Then, timed:

- ``fused``: ``run_backfill(omni.context, table, all 9 features, engine="spark")`` on the session - the
  planner puts them in one stage, which Spark runs as ONE ``mapInArrow`` pass over the
  joined inputs (:mod:`spark_udfs.arrow_stage`), then one append per feature;
- ``separate``: 9 such runs, one feature each: 9 reads, 9 passes, 9 logical commits.

The Spark engine on the warm session is what ``omni.backfill(engine="spark")`` runs,
minus its session start-up (``omni.backfill`` starts and stops a session per call).

CPU is reported twice: the Python driver process alone (``RUSAGE_SELF``: planning,
bookkeeping, commits through pyiceberg) and everything Spark runs - the JVM (driver and
executor in local mode) and its Python workers - read from ``/proc`` for every process
below this one (see :func:`tree_cpu_seconds`). The feature values of both variants are
compared (digest of all feature columns sorted by id).

This module also holds the Spark set-up the other ``spark_*`` benchmarks share
(:class:`SparkBench`, :func:`tree_cpu_seconds`, :func:`spark_backfill`).

    python -m benchmarks.spark_fusion [--quick] [--repeats N] [--mib M]
"""

from __future__ import annotations

import collections
import os
import resource
import time
import uuid
from pathlib import Path
from typing import Any, Self

from benchmarks import common as C
from benchmarks.fusion import feature_set, values_digest

#: paper's wall speed-up of fused over separate feature computation
PAPER_SPEEDUP = 2.7


# --------------------------------------------------------------------------- shared Spark set-up


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of every process below this one (JVM, Spark's Python workers).

    Read from ``/proc/<pid>/stat`` (utime, stime, cutime, cstime): children that exited
    and were reaped by their parent (Spark's Python daemon reaps its workers) stay
    counted in the parent's ``cutime``/``cstime``. The PostgreSQL server daemonises
    (``pg_ctl``) and is not counted.
    """
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = collections.defaultdict(list)
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # the process ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        children[int(fields[1])].append(int(entry))
        cpu[int(entry)] = sum(int(x) for x in fields[11:15]) / tick
    total, todo = 0.0, list(children[os.getpid()])
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += children[pid]
    return total


def self_cpu_seconds() -> float:
    """User + system CPU seconds of this Python process alone (the Spark driver's Python side)."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime


def measure_spark(fn: Any) -> tuple[Any, float, float, float]:
    """Run ``fn``; (result, wall s, CPU s of this process, CPU s of the JVM and Spark's Python workers)."""
    t0, p0, j0 = time.perf_counter(), self_cpu_seconds(), tree_cpu_seconds()
    result = fn()
    return result, time.perf_counter() - t0, self_cpu_seconds() - p0, tree_cpu_seconds() - j0


class SparkBench:
    """One throwaway PostgreSQL catalog server and ONE Spark session for a whole benchmark.

    ``with SparkBench("spark_fusion") as sb:`` starts PostgreSQL, then Spark on a catalog
    named ``omni`` (``build_spark_session``: the product's settings, ``local[2]``), and
    records the start-up seconds in :attr:`startup`. :meth:`fresh_omni` gives each trial
    its own catalog - a new catalog name in the same database and a new warehouse -
    registered in the running session at run time (Spark loads a catalog the first time
    a query names it), so no trial can reuse another's feature values.
    """

    def __init__(self, tag: str, master: str = "local[2]", overrides: dict[str, Any] | None = None):
        self.tag = tag
        self.master = master
        self.overrides = overrides
        self.startup: dict[str, float] = {}
        self.jvm: dict[str, str] = {}
        self.pg: Any = None
        self.spark: Any = None
        self._homes: list[Path] = []

    def __enter__(self) -> Self:
        from spark_udfs.session import build_spark_session
        from tests.services.postgres import PostgresServer

        t0 = time.perf_counter()
        self.pg = PostgresServer().start()
        t1 = time.perf_counter()
        base = self._config("omni")
        self.spark = build_spark_session(base, master=self.master, app_name=f"omni-bench-{self.tag}",
                                         overrides=self.overrides)
        self.spark.sparkContext.setLogLevel("ERROR")
        t2 = time.perf_counter()
        self.spark.sql("SHOW NAMESPACES").collect()  # first query: catalog classes, JDBC connection
        self.startup = {"postgres_s": t1 - t0, "session_s": t2 - t1, "first_query_s": time.perf_counter() - t2}
        got = self.spark.sparkContext.getConf()
        # the JVM the figures come from: a user's defaults unless OMNI_SPARK_JVM / _MEMORY_MB say otherwise
        flags = [t for t in (got.get("spark.driver.extraJavaOptions") or "").split()
                 if t.startswith("-XX:") and "IgnoreUnrecognized" not in t]  # not Spark's own --add-opens
        self.jvm = {"flags": " ".join(flags) or "the JVM's defaults",
                    "driver_memory": got.get("spark.driver.memory", "1g (Spark's default)"),
                    "broadcast_join_threshold": self.spark.conf.get("spark.sql.autoBroadcastJoinThreshold")}
        C.log(f"Spark JVM: {self.jvm}")
        C.log(f"Spark {self.spark.version} {self.master} up: session {self.startup['session_s']:.1f} s, "
              f"first query {self.startup['first_query_s']:.1f} s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.spark is not None:
                spark, self.spark = self.spark, None
                proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
                try:
                    spark.stop()
                except Exception as e:  # noqa: BLE001 - e.g. a driver out of heap: its JVM would outlive us
                    C.log(f"Spark did not stop ({type(e).__name__}: {e}); killing its JVM")
                    if proc is not None and proc.poll() is None:
                        proc.kill()
        finally:
            if self.pg is not None:
                self.pg.stop()
                self.pg = None
            for home in self._homes:
                C.remove(home)

    def _config(self, catalog_name: str, home: Path | None = None) -> Any:
        from catalog_ext.config import OmniConfig

        home = home or C.scratch_dir(f"homes/{self.tag}")
        self._homes.append(home)
        return OmniConfig.resolve(catalog=self.pg.sqlalchemy_uri, warehouse=(home / "warehouse").as_uri(),
                                  home=str(home), catalog_name=catalog_name)

    def fresh_omni(self) -> Any:
        """An :class:`Omni` on a brand-new catalog (same PostgreSQL database), known to the session."""
        from omni_iceberg.api import Omni
        from spark_udfs.session import catalog_properties

        name = f"b{uuid.uuid4().hex[:10]}"
        config = self._config(name)
        self.spark.conf.set(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
        for key, value in catalog_properties(config).items():
            self.spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)
        return Omni(config=config)

    def drop(self, omni: Any) -> None:
        """Remove a trial's warehouse files (its catalog rows stay in the throwaway database)."""
        C.remove(omni.config.home)


def spark_backfill(spark: Any, omni: Any, table: str, names: list[str]) -> Any:
    """One Spark backfill on the warm session; the report, checked."""
    from omni_iceberg.backfill.choose import run_backfill

    report = run_backfill(omni.context, table, names, engine="spark", engine_options={"spark": spark}, progress=False,
                          has_gpu=False)
    assert report.status == "succeeded" and report.errors == 0, (report.status, report.errors)
    assert report.engine == "spark", report.engine
    return report


def warm_up(sb: SparkBench, names: list[str], source: Path | None = None) -> float:
    """One untimed Spark backfill of ``html_parser`` + ``names`` on ``source`` (default 2,000 paragraphs).

    The first backfill of a session pays for class loading, Python worker start and
    JIT compilation; no timed trial should. Returns its wall seconds.
    """
    from omni_iceberg.features.library import html_parser

    omni = sb.fresh_omni()
    try:
        omni.create_table("warm")
        omni.submit("warm", [str(source or C.paragraphs_jsonl(2000))], batch="b1", progress=False)
        omni.register_features("warm", [html_parser, *feature_set()])
        t0 = time.perf_counter()
        spark_backfill(sb.spark, omni, "warm", names)
        return time.perf_counter() - t0
    finally:
        sb.drop(omni)


# --------------------------------------------------------------------------- the benchmark


def trial(sb: SparkBench, variant: str, source: Path, names: list[str]) -> dict:
    omni = sb.fresh_omni()
    try:
        prep = C.ingest_and_parse(omni, "web", [source])
        omni.register_features("web", feature_set())
        per_feature = []
        if variant == "fused":
            report, wall, py_cpu, spark_cpu = measure_spark(lambda: spark_backfill(sb.spark, omni, "web", names))
            stages = len(report.plan["stages"])
        else:
            def run():
                for n in names:
                    _, w, p, s = measure_spark(lambda n=n: spark_backfill(sb.spark, omni, "web", [n]))
                    per_feature.append({"feature": n, "wall_s": w, "py_cpu_s": p, "spark_cpu_s": s})
                return len(names)

            stages, wall, py_cpu, spark_cpu = measure_spark(run)
        digest = values_digest(omni, "web", names)
    finally:
        sb.drop(omni)
    return {"variant": variant, "wall_s": wall, "py_cpu_s": py_cpu, "spark_cpu_s": spark_cpu,
            "cpu_s": py_cpu + spark_cpu, "stages": stages, "rows": prep["rows"],
            "prep_s": prep["ingest_s"] + prep["html_parser_s"], "digest": digest, "per_feature": per_feature,
            "load": C.load_average()}


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--mib", type=float, default=None,
                       help="MiB of HTML in the WARC (default: one round of both corpora, every page once)")

    args = C.parse_args("spark_fusion", __doc__, options, argv)
    started = time.perf_counter()
    mib = args.mib or (20.0 if args.quick else round(C.docs_one_round_mib(), 1))
    repeats = args.repeats or (1 if args.quick else 3)
    source = C.docs_warc(mib)
    names = [f.definition.name for f in feature_set()]
    C.log(f"{len(names)} features: {', '.join(names)}; input {source.name}")

    trials = []
    order = ["fused", "separate"]
    with SparkBench("spark_fusion") as sb:
        warm_s = warm_up(sb, names)
        C.log(f"warm-up backfill (untimed): {warm_s:.1f} s")
        for r in range(repeats):
            for variant in (order if r % 2 == 0 else order[::-1]):  # alternate: no variant always first
                t = trial(sb, variant, source, names)
                t["repeat"] = r
                trials.append(t)
                C.log(f"{variant:8s}: {t['wall_s']:.2f} s wall, CPU {t['py_cpu_s']:.2f} s driver (Python) + "
                      f"{t['spark_cpu_s']:.2f} s JVM/workers, {t['stages']} stage(s), {t['rows']} rows, "
                      f"digest {t['digest']}")
        startup = sb.startup

    def vals(variant, key):
        return [t[key] for t in trials if t["variant"] == variant]

    fw, sw = C.median(vals("fused", "wall_s")), C.median(vals("separate", "wall_s"))
    fc, sc = C.median(vals("fused", "cpu_s")), C.median(vals("separate", "cpu_s"))
    fp, sp = C.median(vals("fused", "py_cpu_s")), C.median(vals("separate", "py_cpu_s"))
    fj, sj = C.median(vals("fused", "spark_cpu_s")), C.median(vals("separate", "spark_cpu_s"))
    same = len({t["digest"] for t in trials}) == 1
    rows_n = trials[0]["rows"]
    per: dict[str, list[float]] = {}
    for t in trials:
        for p in t["per_feature"]:
            per.setdefault(p["feature"], []).append(p["wall_s"])
    heads = [
        C.headline("Spark wall speed-up: separate / fused", sw / fw, "x", f"paper: {PAPER_SPEEDUP}",
                   sw / fw >= PAPER_SPEEDUP, f"{len(names)} backfills vs 1, same warm local[2] session"),
        C.headline("Spark CPU change (driver + JVM + workers): fused vs separate", (fc - sc) / sc * 100, "%",
                   "paper: -55.9%", None, f"CPU ratio separate/fused = {sc / fc:.2f}x"),
        C.headline("driver (Python) CPU ratio: separate / fused", sp / fp, "x", "", None,
                   "planning, bookkeeping and commits in the driver process"),
        C.headline("outputs identical (fused = separate)", 1.0 if same else 0.0, "bool", "1", same),
    ]
    table_rows = [
        ["fused (1 Spark backfill)", f"{fw:.2f}", f"{fp:.2f}", f"{fj:.2f}", f"{rows_n * len(names) / fw:.0f}", "1"],
        [f"separate ({len(names)} Spark backfills)", f"{sw:.2f}", f"{sp:.2f}", f"{sj:.2f}",
         f"{rows_n * len(names) / sw:.0f}", str(len(names))],
    ]
    notes = [
        f"{rows_n} distinct pages ({source.name}); features: {', '.join(names)}.",
        ("One Spark session (local[2], the product's settings from build_spark_session) for every trial, "
         f"warmed up by an untimed backfill ({warm_s:.1f} s); its start-up ({startup['session_s']:.1f} s session + "
         f"{startup['first_query_s']:.1f} s first query) is not in any figure."),
        ("Times cover only the Spark backfill call(s); ingest, html_parser (local engine) and registration are "
         f"untimed set-up (median {C.median(vals('fused', 'prep_s')):.1f} s per trial). Each trial has its own "
         "catalog (a new catalog name in the same PostgreSQL database), so nothing is reused between trials."),
        "Separate Spark backfills, median wall per feature: "
        + ", ".join(f"{k} {C.median(v):.2f} s" for k, v in per.items()) + ".",
        ("CPU: driver = this Python process (RUSAGE_SELF); JVM/workers = every process below it from /proc "
         "(Spark's JVM is driver and executor in local mode, plus its Python workers)."),
        f"{repeats} repeat(s), variant order alternating; every trial in the JSON.",
    ]
    payload = {
        "title": f"Spark fusion: one fused Spark backfill of {len(names)} features vs {len(names)} separate ones",
        "params": {"input_mib": mib, "repeats": repeats, "features": names, "rows": rows_n, "master": "local[2]",
                   "startup": startup, "warm_up_s": warm_s},
        "headline": heads,
        "table": {"columns": ["variant", "wall s (median)", "driver CPU s", "JVM + workers CPU s",
                              "feature values/s", "backfill calls"], "rows": table_rows},
        "notes": notes,
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2, a3) = C.figure(3, width=14)
    C.plot_trials(a1, {v: vals(v, "wall_s") for v in order}, "wall seconds", "Wall time (dots = trials)")
    C.plot_trials(a2, {f"{v}\ndriver": vals(v, "py_cpu_s") for v in order}
                  | {f"{v}\nJVM+workers": vals(v, "spark_cpu_s") for v in order},
                  "CPU seconds", "CPU time: Python driver vs JVM + Python workers")
    C.plot_ratios(a3, {"wall\nseparate/fused": sw / fw, "CPU (all)\nseparate/fused": sc / fc,
                       "driver CPU\nseparate/fused": sp / fp},
                  {"wall\nseparate/fused": PAPER_SPEEDUP}, "Speed-up of fusion on Spark (higher is better)")
    C.save_plot(plt, fig, args, f"spark_fusion: {len(names)} cheap features on {rows_n} pages, Spark local[2]")


if __name__ == "__main__":
    main()
