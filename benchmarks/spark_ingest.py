"""spark_ingest: ``omni submit`` on the local engine vs Spark (warm ``local[2]``), at two input sizes.

Data: paragraph records (``spark_crossover.records_jsonl``: distinct contents) cut into
:data:`FILES` JSONL files, the last one followed by a copy of the first 5% of the records
(duplicates across files). Each trial builds a fresh table on its own catalog
(``spark_fusion.SparkBench``: one PostgreSQL server, ONE warm ``local[2]`` session for the
run, warmed by one untimed Spark submit) and submits, untimed, an earlier batch holding
the first 10% of the records; then it times the batch of all the files - 15% of its
records are duplicates, within the batch or of the earlier one - with

- ``local``: ``Omni.submit`` (one process; its reading and writing threads), or
- ``spark``: ``SparkIngest(ctx, spark=<the warm session>).submit`` (one task per file,
  Spark's first-file dedup and id anti-join, Spark's writer on the staging branch; the
  session's start-up is not in the figure, it is reported apart).

Trials alternate local, spark, local, spark per size. Checked every trial: the batch's
counts (read, written, duplicates, rejected) and the digest of its sorted ids are the same
on both engines. Also recorded: the Spark read job's tasks at each size.

Targets (fixed before measuring): the same counts and ids on both engines (yes). Spark /
local throughput is reported (#38 asks for it on this machine; no target: two cores shared
by the driver, the executors and the JVM).

    python -m benchmarks.spark_ingest [--quick] [--repeats N] [--sizes 100000,400000]
"""

from __future__ import annotations

import hashlib
import time

from benchmarks import common as C
from benchmarks.spark_crossover import records_jsonl
from benchmarks.spark_fusion import SparkBench

DEFAULT_SIZES = (100_000, 400_000)
QUICK_SIZES = (2_000, 10_000)
FILES = 8

TITLE = "omni submit on the local engine vs Spark (warm local[2]) on the same JSONL files, two sizes"


def inputs(size: int) -> tuple[list[str], str]:
    """(the timed batch's files, the earlier batch's file) for ``size`` records."""
    lines = records_jsonl(size).read_text().splitlines(keepends=True)
    folder = C.scratch_dir("spark_ingest")
    per = -(-len(lines) // FILES)
    files = []
    for k in range(FILES):
        part = folder / f"{size}-{k}.jsonl"
        extra = lines[: len(lines) // 20] if k == FILES - 1 else []  # 5%: duplicates of the first file
        part.write_text("".join(lines[k * per:(k + 1) * per] + extra))
        files.append(str(part))
    earlier = folder / f"{size}-earlier.jsonl"
    earlier.write_text("".join(lines[: len(lines) // 10]))
    return files, str(earlier)


def trial(sb: SparkBench, engine: str, size: int) -> dict:
    from spark_udfs.ingest import SparkIngest

    files, earlier = inputs(size)
    omni = sb.fresh_omni()
    try:
        omni.create_table("web")
        omni.submit("web", [earlier], "b0", progress=False)
        t0 = time.perf_counter()
        if engine == "local":
            report, tasks = omni.submit("web", files, "b1", progress=False), None
        else:
            runner = SparkIngest(omni.context, spark=sb.spark)
            report, tasks = runner.submit("web", files, "b1"), runner.tasks
        elapsed = time.perf_counter() - t0
        ids = sorted(omni.read("web", columns=["_ai_unique_id_"], batches=["b1"]).column(0).to_pylist())
        return {"seconds": elapsed, "tasks": tasks,
                "counts": [report.read, report.written, report.duplicates, report.rejected],
                "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()}
    finally:
        sb.drop(omni)


def table(results: dict[str, dict]) -> dict:
    rows = []
    for v in results.values():
        for engine in ("local", "spark"):
            rows.append([f"{v['records']:,}", engine, round(v["median_s"][engine], 2),
                         ", ".join(f"{t:.2f}" for t in v["seconds"][engine]),
                         f"{v['records'] / v['median_s'][engine]:,.0f}",
                         str(v["spark_tasks"]) if engine == "spark" else "",
                         "yes" if v["same"] else "NO"])
    return {"columns": ["records", "engine", "median s", "trials s", "records/s", "Spark read tasks",
                        "same counts and ids"], "rows": rows}


def main(argv: list[str] | None = None) -> int:
    args = C.parse_args("spark_ingest", __doc__, lambda p: p.add_argument(
        "--sizes", help="two comma-separated record counts (default 100000,400000)"), argv)
    started = time.perf_counter()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    repeats = args.repeats or 2
    results: dict[str, dict] = {}
    with SparkBench("spark_ingest") as sb:
        t0 = time.perf_counter()
        trial(sb, "spark", min(sizes))  # untimed: class loading, Python workers, JIT
        warm_up_s = time.perf_counter() - t0
        C.log(f"warm-up Spark submit: {warm_up_s:.1f} s")
        for size in sizes:
            runs: dict[str, list[dict]] = {"local": [], "spark": []}
            for _ in range(repeats):
                for engine in ("local", "spark"):
                    runs[engine].append(trial(sb, engine, size))
                    C.log(f"{size:,} records, {engine}: {runs[engine][-1]['seconds']:.2f} s "
                          f"{runs[engine][-1]['counts']}")
            outcomes = {(r["ids_sha256"], tuple(r["counts"])) for rs in runs.values() for r in rs}
            results[str(size)] = {
                "records": size, "seconds": {e: [r["seconds"] for r in rs] for e, rs in runs.items()},
                "median_s": {e: C.median(r["seconds"] for r in rs) for e, rs in runs.items()},
                "counts": runs["local"][0]["counts"], "same": len(outcomes) == 1,
                "spark_tasks": runs["spark"][0]["tasks"]}
    same = all(v["same"] for v in results.values())
    largest = str(max(sizes))
    med = results[largest]["median_s"]
    ratio = med["local"] / med["spark"]
    headlines = [
        C.headline("Spark submit: the local engine's counts and ids (read, written, duplicates, rejected)",
                   float(same), "bool", "yes", same),
        C.headline(f"submit at {int(largest):,} records: Spark (warm local[2]) / local throughput", ratio, "x",
                   "reported", None,
                   note=f"local {med['local']:.2f} s, Spark {med['spark']:.2f} s; Spark read tasks "
                        f"{results[largest]['spark_tasks']}; Spark start-up {sum(sb.startup.values()):.1f} s and "
                        f"the first submit ({warm_up_s:.1f} s) not included"),
    ]
    C.write_result(args, {"title": TITLE, "headline": headlines, "table": table(results), "sizes": results,
                          "spark_startup_s": sb.startup, "spark_first_submit_s": warm_up_s, "spark_jvm": sb.jvm,
                          "repeats": repeats}, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
