"""s3_warehouse: what an S3-API warehouse costs vs a local one, same machine.

The bucket is served by s3proxy (a real S3 server from Maven Central, filesystem
backend) on 127.0.0.1, so the ratio shows the cost of the S3 path itself - SigV4 requests,
multipart uploads, one HTTP round trip per metadata file and per Parquet range read - not
network latency to a remote store. Both sides use the embedded SQLite catalog; only
``--warehouse`` differs (``file://`` folder vs ``s3://bench/<trial>``).

- ``ingest``: ``omni submit`` of real HTML (the Python and Django documentation, every
  body distinct: :func:`benchmarks.common.distinct_docs_warc`, default 50 MiB; ``--quick``
  5 MiB) into a fresh logical table; throughput in MiB of HTML per second. Local and S3
  trials alternate, each on a fresh catalog.
- ``query``: a 15-column ``omni sql`` projection (keys, parsed text and 12 feature
  columns of ``html_parser``, ``text_length``, ``detected_lang`` and 9 cheap text
  built-ins, backfilled untimed) with a filter, on the table of the last ingest trial of
  each side; local and S3 runs alternate.

Headlines: S3 / local ingest throughput and S3 / local query wall time.

    python -m benchmarks.s3_warehouse [--quick] [--repeats N] [--mib 50]
"""

from __future__ import annotations

import os
import time

from benchmarks import common as C

FEATURES = ["html_parser", "text_length", "detected_lang", "punctuation_ratio", "digit_ratio", "uppercase_ratio",
            "avg_word_length", "code_ratio", "repetition_ratio", "stopword_ratio", "safety_keyword_hits",
            "domain_tag"]
QUERY_COLUMNS = ["_ai_unique_id_", "_ai_append_name_", "ProcessedData.parsed_text", "text_length", "detected_lang",
                 "lang_confidence", "punctuation_ratio", "digit_ratio", "uppercase_ratio", "avg_word_length",
                 "code_ratio", "repetition_ratio", "stopword_ratio", "safety_keyword_hits", "domain_tag"]
QUERY = f"SELECT {', '.join(QUERY_COLUMNS)} FROM web WHERE punctuation_ratio > 0.01 AND text_length > 200"


def _omni(home, warehouse: str):
    from catalog_ext.config import OmniConfig
    from omni_iceberg.api import Omni

    return Omni(OmniConfig.resolve(catalog=f"sqlite:///{home / 'catalog.db'}", warehouse=warehouse, home=str(home)))


def main(argv: list[str] | None = None) -> None:
    args = C.parse_args("s3_warehouse", __doc__, lambda p: p.add_argument(
        "--mib", type=float, default=None, help="MiB of HTML to ingest (default 50; --quick 5)"), argv)
    started = time.perf_counter()
    mib = args.mib or (5 if args.quick else 50)
    repeats = args.repeats or (1 if args.quick else 3)
    assert len(QUERY_COLUMNS) == 15
    from tests.services.s3proxy import S3ProxyServer

    source = C.distinct_docs_warc(mib)
    records, html_bytes = C.html_bytes_of_warc(source)
    C.log(f"input: {records} records, {html_bytes / C.MIB:.1f} MiB of HTML ({source.name})")
    scratch = C.scratch_dir("s3_warehouse")
    trials: list[dict] = []
    with S3ProxyServer() as s3:
        s3.create_bucket("bench")
        for key, value in s3.environment().items():  # credentials the usual way: the AWS environment
            os.environ[key] = value
        last: dict[str, object] = {}
        for r in range(repeats):
            for side in (("local", "s3") if r % 2 == 0 else ("s3", "local")):
                home = scratch / f"{side}-{r}"
                warehouse = (home / "warehouse").as_uri() if side == "local" else f"s3://bench/trial-{r}"
                omni = _omni(home, warehouse)
                omni.create_table("web")
                wall0, cpu0 = time.perf_counter(), C.cpu_seconds()
                omni.submit("web", [str(source)], batch="docs", progress=False)
                wall, cpu = time.perf_counter() - wall0, C.cpu_seconds() - cpu0
                rows = omni.state("web").batches[0].rows
                trials.append({"phase": "ingest", "side": side, "repeat": r, "wall_s": wall, "cpu_s": cpu,
                               "rows": rows, "mib_per_s": html_bytes / C.MIB / wall})
                C.log(f"ingest {side} #{r + 1}: {wall:.1f} s, {html_bytes / C.MIB / wall:.2f} MiB/s, {rows} rows")
                last[side] = (home, warehouse)
        from omni_iceberg.features.library import BUILTINS

        for side, (home, warehouse) in last.items():
            omni = _omni(home, warehouse)
            omni.register_features("web", [b for b in BUILTINS if b.definition.name in FEATURES])
            t0 = time.perf_counter()
            report = omni.backfill("web", FEATURES, progress=False)
            C.log(f"backfill {side} (untimed set-up): {time.perf_counter() - t0:.1f} s, {report.errors} errors")
        n_query = max(3, 2 * repeats + 1)
        for q in range(n_query):
            for side in (("local", "s3") if q % 2 == 0 else ("s3", "local")):
                omni = _omni(*last[side])  # a fresh Omni: no cached metadata between runs
                wall0, cpu0 = time.perf_counter(), C.cpu_seconds()
                result = omni.query(QUERY)
                wall, cpu = time.perf_counter() - wall0, C.cpu_seconds() - cpu0
                trials.append({"phase": "query", "side": side, "repeat": q, "wall_s": wall, "cpu_s": cpu,
                               "rows": result.num_rows, "columns": result.num_columns})
                C.log(f"query {side} #{q + 1}: {wall:.2f} s, {result.num_rows} rows x {result.num_columns} columns")
    C.remove(scratch)

    def med(phase: str, side: str, key: str) -> float:
        return C.median(t[key] for t in trials if t["phase"] == phase and t["side"] == side)

    ingest_ratio = med("ingest", "s3", "mib_per_s") / med("ingest", "local", "mib_per_s")
    query_ratio = med("query", "s3", "wall_s") / med("query", "local", "wall_s")
    heads = [
        C.headline("S3 / local ingest throughput", ingest_ratio, "x",
                   note=f"{med('ingest', 's3', 'mib_per_s'):.2f} vs {med('ingest', 'local', 'mib_per_s'):.2f} MiB/s"),
        C.headline("S3 / local 15-column omni sql wall time", query_ratio, "x",
                   note=f"{med('query', 's3', 'wall_s'):.2f} s vs {med('query', 'local', 'wall_s'):.2f} s"),
    ]
    rows = [[phase, side, f"{med(phase, side, 'wall_s'):.2f}", f"{med(phase, side, 'cpu_s'):.2f}",
             (f"{med(phase, side, 'mib_per_s'):.2f}" if phase == "ingest" else "")]
            for phase in ("ingest", "query") for side in ("local", "s3")]
    notes = [
        f"Input: {records} distinct real HTML pages, {html_bytes / C.MIB:.1f} MiB ({source.name}).",
        ("The S3 side is s3proxy on this machine (filesystem backend): the ratio is the cost of the S3 protocol path "
         "(pyarrow's AWS SDK client, multipart uploads, one request per metadata file and range read), not of a "
         "remote network; a real object store adds its latency per request on top."),
        f"Ingest: {repeats} trial(s) per side, alternating, fresh catalog each; median reported.",
        (f"Query: `{QUERY}` on the last ingest trial's table, {n_query} run(s) per side alternating, each with a "
         "fresh Omni (metadata read again); the 13 features were backfilled untimed."),
        "Both sides use the embedded SQLite catalog; only the warehouse differs.",
    ]
    payload = {
        "title": "S3-API warehouse vs local warehouse: ingest throughput and a 15-column query",
        "params": {"mib": mib, "records": records, "repeats": repeats, "query": QUERY},
        "headline": heads,
        "table": {"columns": ["phase", "warehouse", "wall s (median)", "CPU s (median)", "MiB/s"], "rows": rows},
        "notes": notes,
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2) = C.figure(2, width=11)
    C.plot_trials(a1, {"local": [t["mib_per_s"] for t in trials if t["phase"] == "ingest" and t["side"] == "local"],
                       "S3": [t["mib_per_s"] for t in trials if t["phase"] == "ingest" and t["side"] == "s3"]},
                  "MiB of HTML per second", "omni submit throughput (dots = trials)")
    C.plot_trials(a2, {"local": [t["wall_s"] for t in trials if t["phase"] == "query" and t["side"] == "local"],
                       "S3": [t["wall_s"] for t in trials if t["phase"] == "query" and t["side"] == "s3"]},
                  "wall seconds", "15-column omni sql (dots = runs)")
    C.save_plot(plt, fig, args, f"s3_warehouse: {html_bytes / C.MIB:.0f} MiB of HTML")


if __name__ == "__main__":
    main()
