"""table_centric: add one feature to a table that already has 50 feature columns.

Set-up (untimed), on a throwaway PostgreSQL catalog shared by pyiceberg and Spark:
every page of the Python and Django documentation ingested into logical table
``aidata.web``, ``html_parser`` computed, and 50 feature columns (``char_freq``: the
frequency of 50 characters, one multi-output feature) computed. The same rows -
id, raw HTML, parsed text and the 50 features - are copied into ONE wide Iceberg
table ``bench.wide`` (unpartitioned, zstd, copy-on-write for MERGE and UPDATE), the
obvious way to keep features next to the data in plain Iceberg.

Timed, per repeat, a new feature each time:

- ``omni``: ``register_features`` + ``backfill`` of one built-in feature (digit_ratio,
  uppercase_ratio, ...): it writes one narrow physical table (id, batch, value);
- ``spark merge``: ``ALTER TABLE bench.wide ADD COLUMN`` + ``MERGE INTO`` from a view
  of the same feature's values (computed beforehand, untimed - so Spark is not
  charged for computing them, omni is);
- ``spark update``: ``ALTER TABLE ADD COLUMN`` + ``UPDATE ... SET col = length(parsed_text)``,
  the cheapest possible in-engine fill.

Bytes written = the sum of ``added-files-size`` of the snapshots each operation
created, over every table of the catalog (omni: the feature table plus the system
tables it appends to). Headline: Spark bytes / omni bytes (target >= 5x).

    python -m benchmarks.table_centric [--quick] [--repeats N] [--mib M]
"""

from __future__ import annotations

import time

import pyarrow as pa

from benchmarks import common as C
from omni_iceberg.features.library.text import PARSED_TEXT
from omni_iceberg.features.udf import feature

#: 50 characters whose frequency (share of all characters) makes one feature column each
CHARS = ("abcdefghijklmnopqrstuvwxyz0123456789" + ".,:;()[]'\"-_=/")
CHAR_NAMES = ([f"freq_{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
              + [f"freq_{n}" for n in ("dot", "comma", "colon", "semicolon", "lparen", "rparen", "lbracket",
                                       "rbracket", "quote", "dquote", "dash", "underscore", "equals", "slash")])
assert len(CHARS) == len(CHAR_NAMES) == 50


@feature({name: "double" for name in CHAR_NAMES}, name="char_freq", inputs=[PARSED_TEXT], form="batch",
         batch_size=1024)
def char_freq(parsed_text):
    """Frequency of each of 50 characters (letters, digits, punctuation) in the lower-cased text."""
    texts = parsed_text.to_pylist()
    out = {name: [] for name in CHAR_NAMES}
    for t in texts:
        low = (t or "").lower()
        n = max(1, len(low))
        for c, name in zip(CHARS, CHAR_NAMES):
            out[name].append(None if t is None else low.count(c) / n)
    return {name: pa.array(vals, type=pa.float64()) for name, vals in out.items()}


def snapshot_ids(catalog) -> dict[str, set[int]]:
    """Every table of the catalog -> the ids of its snapshots now."""
    out = {}
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            name = ".".join(ident)
            out[name] = {s.snapshot_id for s in catalog.load_table(name).metadata.snapshots}
    return out


def added_since(catalog, before: dict[str, set[int]]) -> dict[str, tuple[int, int]]:
    """Table -> (added data-file bytes, files) of the snapshots created since ``before``."""
    out = {}
    for name in snapshot_ids(catalog):
        size, files = C.snapshot_added_bytes(catalog.load_table(name), before.get(name, set()))
        if size or files:
            out[name] = (size, files)
    return out


def new_features():
    from omni_iceberg.features import library as L

    return [L.digit_ratio, L.uppercase_ratio, L.punctuation_ratio, L.avg_word_length, L.code_ratio,
            L.repetition_ratio, L.stopword_ratio]


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--mib", type=float, default=None,
                       help="MiB of HTML (default: one round of both corpora; quick: 20)")

    args = C.parse_args("table_centric", __doc__, options, argv)
    started = time.perf_counter()
    mib = args.mib or (20.0 if args.quick else round(C.docs_one_round_mib(), 1))
    repeats = min(args.repeats or (1 if args.quick else 3), len(new_features()))

    from omni_iceberg.api import Omni
    from catalog_ext.config import OmniConfig
    from spark_udfs.session import build_spark_session
    from tests.services.postgres import PostgresServer

    home = C.scratch_dir("table_centric")
    trials: list[dict] = []
    with PostgresServer() as pg:
        omni = Omni(OmniConfig.resolve(catalog=pg.sqlalchemy_uri, warehouse=str(home / "warehouse"), home=str(home)))
        prep = C.ingest_and_parse(omni, "web", [C.docs_warc(mib)])
        omni.register_features("web", [char_freq])
        omni.backfill("web", ["char_freq"], isolation="inline", progress=False, has_gpu=False)
        data = omni.read("web", columns=["_ai_unique_id_", "RawData.raw_data", "ProcessedData.parsed_text",
                                         *CHAR_NAMES])
        wide = pa.Table.from_arrays([data.column(c) for c in data.column_names],
                                    names=["id", "raw_data", "parsed_text", *CHAR_NAMES])
        catalog = omni.catalog
        catalog.create_namespace("bench")
        table = catalog.create_table("bench.wide", schema=wide.schema, properties={
            "format-version": "2", "write.parquet.compression-codec": "zstd",
            "write.update.mode": "copy-on-write", "write.merge.mode": "copy-on-write",
            "write.delete.mode": "copy-on-write"})
        table.append(wide)
        wide_bytes = C.snapshot_added_bytes(catalog.load_table("bench.wide"), set())[0]
        feature_bytes = sum(v[0] for k, v in added_since(catalog, {}).items() if "char_freq" in k)
        C.log(f"set-up: {wide.num_rows} rows; wide table {wide.num_columns} columns, {wide_bytes / 1e6:.1f} MB; "
              f"omni char_freq table {feature_bytes / 1e6:.2f} MB")
        spark = build_spark_session(omni.config, app_name="omni-bench-table-centric")
        spark.sql("SELECT count(*) FROM bench.wide").collect()  # warm up: first query pays JVM start-up
        try:
            for r, feat in enumerate(new_features()[:repeats]):
                name = feat.definition.name
                # the same values, computed untimed for Spark's MERGE source
                values = feat(data.column("ProcessedData.parsed_text").combine_chunks()).to_pylist()
                src = spark.createDataFrame(list(zip(data.column("_ai_unique_id_").to_pylist(), values)),
                                            f"id string, {name} double")
                src.createOrReplaceTempView("new_values")
                src.cache().count()

                def run_omni(feat=feat, name=name):
                    omni.register_features("web", [feat])
                    return omni.backfill("web", [name], isolation="process", progress=False)

                def run_merge(name=name):
                    spark.sql(f"ALTER TABLE bench.wide ADD COLUMN {name} double")
                    spark.sql(f"MERGE INTO bench.wide t USING new_values s ON t.id = s.id "
                              f"WHEN MATCHED THEN UPDATE SET t.{name} = s.{name}")

                def run_update(r=r):
                    col = f"len_{r}"
                    spark.sql(f"ALTER TABLE bench.wide ADD COLUMN {col} bigint")
                    spark.sql(f"UPDATE bench.wide SET {col} = length(parsed_text)")

                order = [("omni", run_omni), ("spark merge", run_merge), ("spark update", run_update)]
                for variant, fn in (order if r % 2 == 0 else order[::-1]):
                    before = snapshot_ids(catalog)
                    _, wall, cpu = C.measure(fn)
                    added = added_since(catalog, before)
                    size = sum(v[0] for v in added.values())
                    files = sum(v[1] for v in added.values())
                    trials.append({"variant": variant, "repeat": r, "feature": name, "wall_s": wall,
                                   "cpu_s_python": cpu, "bytes": size, "files": files,
                                   "per_table": {k: v[0] for k, v in added.items()}, "load": C.load_average()})
                    C.log(f"{variant:12s} {name:18s}: {wall:.2f} s wall, {size / 1e6:.3f} MB in {files} files "
                          f"({', '.join(f'{k}={v[0]}' for k, v in added.items())})")
                src.unpersist()
        finally:
            spark.stop()
    C.remove(home)

    def vals(variant, key):
        return [t[key] for t in trials if t["variant"] == variant]

    med = {v: (C.median(vals(v, "wall_s")), C.median(vals(v, "bytes")), C.median(vals(v, "files")))
           for v in ("omni", "spark merge", "spark update")}
    omni_feature_only = C.median([sum(b for k, b in t["per_table"].items() if not k.startswith("omni_sys."))
                                  for t in trials if t["variant"] == "omni"])
    r_merge = med["spark merge"][1] / med["omni"][1]
    r_update = med["spark update"][1] / med["omni"][1]
    heads = [
        C.headline("bytes written: Spark MERGE / omni", r_merge, "x", ">= 5", r_merge >= 5),
        C.headline("bytes written: Spark UPDATE / omni", r_update, "x", ">= 5", r_update >= 5),
        C.headline("wall time: Spark MERGE / omni", med["spark merge"][0] / med["omni"][0], "x", "",
                   None, "omni's time includes computing the feature; MERGE's source values were precomputed"),
        C.headline("wall time: Spark UPDATE / omni", med["spark update"][0] / med["omni"][0], "x"),
    ]
    rows = [[v, f"{med[v][0]:.2f}", f"{med[v][1] / 1e6:.3f}", f"{med[v][2]:.0f}"] for v in med]
    notes = [
        (f"{prep['rows']} pages; the wide Iceberg table holds {wide.num_columns} columns (id, raw_data, parsed_text, "
        f"50 features), {wide_bytes / 1e6:.1f} MB of data files before the first change."),
        (f"omni bytes include the system tables it appends to (lineage, runs, features); the feature table alone: "
        f"{omni_feature_only / 1e3:.1f} KB (median)."),
        ("Spark: local[2], Iceberg 1.10.2 runtime, copy-on-write MERGE/UPDATE; the session was started and warmed up "
        "before timing. CPU time of the JVM is not counted (wall time only for Spark)."),
        (f"{repeats} repeat(s), each adds a new feature/column; the wide table grows one or two columns per repeat. "
        "Order of the three variants alternates between repeats."),
    ]
    payload = {
        "title": "Table-centric: add one feature to a 50-feature table (omni narrow table vs Iceberg wide table)",
        "params": {"input_mib": mib, "repeats": repeats, "rows": prep["rows"], "wide_table_bytes": wide_bytes},
        "headline": heads,
        "table": {"columns": ["variant", "wall s (median)", "MB written (median)", "data files written"],
                  "rows": rows},
        "notes": notes,
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2, a3) = C.figure(3, width=15)
    C.plot_trials(a1, {v: [b / 1e6 for b in vals(v, "bytes")] for v in med}, "MB of data files written",
                  "Bytes written per added feature")
    a1.set_yscale("log")
    C.plot_trials(a2, {v: vals(v, "wall_s") for v in med}, "wall seconds", "Wall time per added feature")
    C.plot_ratios(a3, {"bytes\nMERGE/omni": r_merge, "bytes\nUPDATE/omni": r_update,
                       "wall\nMERGE/omni": med["spark merge"][0] / med["omni"][0]},
                  {"bytes\nMERGE/omni": 5.0, "bytes\nUPDATE/omni": 5.0}, "Ratios (log scale)")
    a3.set_xscale("log")
    a3.set_xlim(0.1, max(r_merge, r_update) * 5)
    C.save_plot(plt, fig, args, f"table-centric: +1 feature on {prep['rows']} rows x 50 features")


if __name__ == "__main__":
    main()
