"""sql_streaming: ``omni sql`` over streamed scans vs DuckDB reading the needed Parquet files itself.

Set-up (untimed), per size (``--records``, default 1,000,000 and 10,000,000; ``--quick``
50,000 and 200,000): synthetic JSONL records of ~180 bytes (one in eight holds the words
"alpha beta"), ingested with ``omni submit``'s API into a fresh embedded catalog; two
cheap batch features over ``RawData.raw_data`` (``b_len``: characters, ``b_words``:
spaces) registered and backfilled in-process, so the table has a base table and two
feature tables.

Queries:

- ``filtered_aggregate``: ``SELECT count(*), avg(length(RawData.raw_data)) FROM m WHERE
  RawData.raw_data LIKE '%alpha beta%'`` (the base table);
- ``feature_join``: ``SELECT b_words, count(*), avg(b_len) FROM m WHERE b_len > 0 GROUP BY
  b_words`` (the planner skips the base table: the two feature tables, joined on the keys);
- ``one_column_limit``: ``SELECT RawData.url FROM m LIMIT 10``.

Variants, each trial in a fresh child process (peak RSS = the child's ``VmHWM``), run
interleaved:

- ``omni``: ``Omni.query`` on the user's defaults (``OMNI_MEMORY_LIMIT_MB`` 1024, spill
  under the home): planning, catalog loads, the scans (big ones read by DuckDB itself from
  the planned files through omni's read-only file system, others as Arrow streams; see
  ``explore.planner._connect``), DuckDB, the query-log spool;
- ``duckdb``: DuckDB on its defaults reading the same pinned data files with
  ``read_parquet`` (the equivalent SQL written by hand; listing the files is catalog work
  done once by the parent, untimed: the peer already knows which files to read).

Neither starts a CLI: the child imports its library, opens it (``Omni(...)`` /
``duckdb.connect()``), runs the query once (a process's first query also pays lazy imports,
the catalog connection and caches: reported, not the headline), then times it again. Answers are checked equal (the LIMIT query:
its row count). Headlines, targets fixed before measuring: at the largest size DuckDB's
time / omni's time >= 0.8 and omni's peak RSS / DuckDB's <= 1.5 per query; omni's peak
RSS at the largest size / at the smallest <= 1.2 per query.

    python -m benchmarks.sql_streaming [--quick] [--repeats N] [--records 1000000,10000000]
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks import common as C
from omni_iceberg.features import feature

CHILD_FLAG = "--child"

QUERIES = {
    "filtered_aggregate": (
        "SELECT count(*) AS n, avg(length(RawData.raw_data)) AS a FROM m WHERE RawData.raw_data LIKE '%alpha beta%'",
        "SELECT count(*) AS n, avg(length(RawData.raw_data)) AS a FROM read_parquet({base}) "
        "WHERE RawData.raw_data LIKE '%alpha beta%'"),
    "feature_join": (
        "SELECT b_words, count(*) AS n, avg(b_len) AS a FROM m WHERE b_len > 0 GROUP BY b_words ORDER BY b_words",
        "SELECT w.b_words, count(*) AS n, avg(l.b_len) AS a FROM read_parquet({b_len}) AS l "
        "LEFT JOIN read_parquet({b_words}) AS w "
        "ON w._ai_unique_id_ = l._ai_unique_id_ AND w._ai_append_name_ = l._ai_append_name_ "
        "WHERE l.b_len > 0 GROUP BY w.b_words ORDER BY w.b_words"),
    "one_column_limit": (
        "SELECT RawData.url AS url FROM m LIMIT 10",
        "SELECT RawData.url AS url FROM read_parquet({base}) LIMIT 10"),
}


@feature(outputs={"b_len": "long"}, inputs=["RawData.raw_data"], name="b_len", form="batch")
def b_len(raw_data):
    return pc.utf8_length(raw_data).cast(pa.int64())


@feature(outputs={"b_words": "long"}, inputs=["RawData.raw_data"], name="b_words", form="batch")
def b_words(raw_data):
    return pc.count_substring(raw_data, " ").cast(pa.int64())


def short_jsonl(records: int) -> Path:
    """``records`` JSONL records of ~180 bytes, one in eight with "alpha beta" (cached: deterministic)."""
    path = C.OUT / f"sql-short-{records}.jsonl"
    if not path.exists():
        C.OUT.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            for i in range(records):
                words = "alpha beta" if i % 8 == 0 else "gamma delta"
                f.write(json.dumps({"raw_data": f"<p>short record {i}: a line of forum text about {words}, "
                                                f"id {i * 7919 % 1000003} and some words to reach a size</p>",
                                    "url": f"https://forum.example.org/t/{i}"}) + "\n")
        tmp.rename(path)
    return path


# --------------------------------------------------------------------------- children


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _child(variant: str, query: str, home: str, files: str) -> dict:
    """Runs in a fresh interpreter: open the library, time one query; prints one JSON line."""
    if variant == "omni":
        from catalog_ext.config import OmniConfig
        from omni_iceberg.api import Omni

        omni = Omni(OmniConfig.resolve(catalog=f"sqlite:///{Path(home) / 'catalog.db'}",
                                       warehouse=str(Path(home) / "warehouse"), home=home))
        run = lambda: omni.query(QUERIES[query][0])  # noqa: E731
    else:
        import duckdb

        con = duckdb.connect()
        sql = QUERIES[query][1].format(**{k: repr(v) for k, v in json.loads(files).items()})
        run = lambda: con.sql(sql).to_arrow_table()  # noqa: E731
    before = _rss_mib()
    t0 = time.perf_counter()
    run()  # the first query of a process also pays its lazy imports, catalog connection and caches
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "first_seconds": first, "peak_rss_mib": C.peak_rss_mib(), "rss_before_mib": before,
            "rows": result.num_rows, "result": result.to_pylist() if query != "one_column_limit" else None}


def _run_child(variant: str, query: str, home: Path, files: dict) -> dict:
    # a user's defaults: no OMNI_* setting reaches the child but the cache folder
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_CACHE"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.sql_streaming", CHILD_FLAG, variant, query, str(home),
                           json.dumps(files)], cwd=C.ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} {query} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- parent


def _setup(records: int) -> tuple[Path, dict[str, list[str]], dict]:
    """A fresh home with ``records`` rows and both features; the data files of each physical table."""
    from catalog_ext.iceberg_io import reachable_data_files

    omni = C.fresh_omni("sql_streaming")
    source = short_jsonl(records)
    omni.create_table("m")
    _, ingest_s, _ = C.measure(lambda: omni.submit("m", [str(source)], batch="b1"))
    omni.register_features("m", [b_len, b_words])
    _, backfill_s, _ = C.measure(lambda: omni.backfill("m", ["b_len", "b_words"], isolation="inline", progress=False))
    state = omni.context.state("m")
    files: dict[str, list[str]] = {}
    for table in state.tables:
        key = "base" if table.key == state.base_table.key else next(
            (n for n in ("b_len", "b_words") if n in table.identifier), table.key)
        loaded = omni.context.catalog.load_table(table.identifier)
        files[key] = sorted(p.removeprefix("file://") for p in reachable_data_files(loaded, [table.snapshot_id]))
    plans = {q: omni.explain_dict(sql)["tables"][0]["scans"] for q, (sql, _) in QUERIES.items()}
    facts = {"records": records, "jsonl_mib": round(source.stat().st_size / C.MIB, 1), "ingest_s": round(ingest_s, 1),
             "backfill_s": round(backfill_s, 1), "files": {k: len(v) for k, v in files.items()},
             "scans": {q: [s["table"].split(".")[-1] for s in scans] for q, scans in plans.items()}}
    return Path(omni.config.home), files, facts


def _same(a: list[dict] | None, b: list[dict] | None) -> bool:
    if a is None or b is None:
        return a is b
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        for u, v in zip(x.values(), y.values()):
            if isinstance(u, float) or isinstance(v, float):
                if not math.isclose(float(u), float(v), rel_tol=1e-9):
                    return False
            elif u != v:
                return False
    return True


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD_FLAG:
        print(json.dumps(_child(*sys.argv[2:6])))
        return
    started = time.perf_counter()

    def add(p):
        p.add_argument("--records", default=None, help="comma-separated table sizes (default 1000000,10000000)")

    args = C.parse_args("sql_streaming", __doc__, add)
    sizes = [int(x) for x in (args.records or ("50000,200000" if args.quick else "1000000,10000000")).split(",")]
    repeats = args.repeats or (1 if args.quick else 3)
    setups = {}
    for n in sizes:
        C.log(f"set-up: {n:,} records")
        setups[n] = _setup(n)
        C.log(f"  {setups[n][2]}")
    trials: dict[tuple[int, str, str], list[dict]] = {}
    for r in range(repeats):
        for n in sizes:
            home, files, _ = setups[n]
            for q in QUERIES:
                for variant in (("omni", "duckdb") if r % 2 == 0 else ("duckdb", "omni")):
                    t = _run_child(variant, q, home, files)
                    trials.setdefault((n, q, variant), []).append(t)
                    C.log(f"  repeat {r + 1} {n:,} {q} {variant}: {t['seconds']:.2f} s, "
                          f"peak {t['peak_rss_mib']:.0f} MiB")
                omni_t, duck_t = trials[(n, q, "omni")][-1], trials[(n, q, "duckdb")][-1]
                if not (omni_t["rows"] == duck_t["rows"] and _same(omni_t["result"], duck_t["result"])):
                    raise AssertionError(f"answers differ at {n} {q}: {omni_t['result']} vs {duck_t['result']}")
    med = {k: {m: C.median(t[m] for t in v) for m in ("seconds", "first_seconds", "peak_rss_mib", "rss_before_mib")}
           for k, v in trials.items()}
    big, small = max(sizes), min(sizes)
    headlines = []
    for q in QUERIES:
        o, d = med[(big, q, "omni")], med[(big, q, "duckdb")]
        speed = d["seconds"] / o["seconds"]
        mem = o["peak_rss_mib"] / d["peak_rss_mib"]
        growth = o["peak_rss_mib"] / med[(small, q, "omni")]["peak_rss_mib"]
        headlines += [
            C.headline(f"omni sql speed / DuckDB on the files, {q}, {big:,} records", speed, "x", ">= 0.8",
                       speed >= 0.8, f"omni {o['seconds']:.2f} s, DuckDB {d['seconds']:.2f} s (the second query of "
                       f"a process, median of {repeats}); a process's first query: omni {o['first_seconds']:.2f} s, "
                       f"DuckDB {d['first_seconds']:.2f} s", peer=True),
            C.headline(f"omni sql peak RSS / DuckDB's, {q}, {big:,} records", mem, "x", "<= 1.5", mem <= 1.5,
                       f"omni {o['peak_rss_mib']:.0f} MiB, DuckDB {d['peak_rss_mib']:.0f} MiB (whole child process; "
                       f"above the RSS before the queries: omni {o['peak_rss_mib'] - o['rss_before_mib']:.0f}, "
                       f"DuckDB {d['peak_rss_mib'] - d['rss_before_mib']:.0f} MiB)"),
            C.headline(f"omni sql peak RSS at {big:,} / at {small:,} records, {q}", growth, "x", "<= 1.2",
                       growth <= 1.2, f"{o['peak_rss_mib']:.0f} MiB / {med[(small, q, 'omni')]['peak_rss_mib']:.0f} MiB"),
        ]
    table = {"columns": ["records", "query", "variant", "seconds (median)", "first query s", "peak RSS MiB",
                         "RSS before queries MiB", "trials (s)"],
             "rows": [[f"{n:,}", q, v, f"{med[(n, q, v)]['seconds']:.2f}", f"{med[(n, q, v)]['first_seconds']:.2f}",
                       f"{med[(n, q, v)]['peak_rss_mib']:.0f}",
                       f"{med[(n, q, v)]['rss_before_mib']:.0f}",
                       ", ".join(f"{t['seconds']:.2f}" for t in trials[(n, q, v)])]
                      for n in sizes for q in QUERIES for v in ("omni", "duckdb")]}
    notes = [
        f"{repeats} repeat(s) per variant, interleaved; each trial a fresh child process; medians.",
        "Peak RSS is the whole child (VmHWM), imports included: omni's child imports omni (pyiceberg, "
        "sqlglot, the catalog) before the query, DuckDB's only duckdb; rss_before_mib is each child's RSS just "
        "before its query.",
        "omni runs on a user's defaults: OMNI_MEMORY_LIMIT_MB 1024 (DuckDB spills beyond it under the home); "
        "DuckDB on its own defaults (memory limit 80% of RAM).",
        "Load on this shared 2-core machine at the time: see machine.load_average; other engineers' test "
        "suites ran alongside.",
    ]
    C.write_result(args, {"setups": {n: s[2] for n, s in setups.items()}, "headline": headlines, "table": table,
                          "notes": notes}, started)
    for h in headlines:
        print(f"{h['metric']}: {h['value']:.2f}{h['unit']} (target {h['target']}: "
              f"{'met' if h['meets_target'] else 'NOT met'}) - {h['note']}")


if __name__ == "__main__":
    main()
