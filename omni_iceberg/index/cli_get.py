"""Bodies of ``omni get`` and ``omni index verify|rebuild``, for the CLI package to hook in.

Wiring (in ``omni_iceberg/cli.py``)::

    from omni_iceberg.index import cli_get
    cli_get.add_parsers(sub)                       # in _parser(), after the other commands
    if args.command in cli_get.COMMANDS:           # in _dispatch(), with omni = _omni(args)
        return cli_get.dispatch(omni, args)

``omni get NAME ID [ID...] [--columns a,b] [--as-of N] [--json] [--explain]`` prints the
rows (an aligned table, or JSON lines with ``--json``); ids that are not in the table
are rows with ``_found`` false. Exit code 2 for a malformed id, 5 if the index backend
cannot be reached.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

COMMANDS = ("get", "index")


def add_parsers(sub: Any) -> None:
    """Add ``get`` and ``index`` to an argparse subparsers object (whose add_parser adds --json)."""
    g = sub.add_parser("get", help="logical rows by _ai_unique_id_, through the id index")
    g.add_argument("name")
    g.add_argument("ids", nargs="+", metavar="ID")
    g.add_argument("--columns", help="comma-separated logical columns (nested: RawData.url); default all")
    g.add_argument("--as-of", type=int, help="logical version (default latest)")
    g.add_argument("--explain", action="store_true", help="say per physical table: index or scan, and why")
    g.add_argument("--index", help="index backend: lmdb, lmdb:///FOLDER or hbase://HOST:PORT (env OMNI_INDEX)")
    ix = sub.add_parser("index", help="verify or rebuild the id index of a logical table")
    ix.add_argument("action", choices=["verify", "rebuild"])
    ix.add_argument("name")
    ix.add_argument("--as-of", type=int, help="verify at this logical version (default latest)")
    ix.add_argument("--fresh", action="store_true", help="rebuild: drop the index first")
    ix.add_argument("--index", help="index backend (env OMNI_INDEX)")
    ix.add_argument("--no-progress", action="store_true")


def dispatch(omni: Any, args: Any, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if args.command == "get":
        columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
        return get_command(omni, args.name, args.ids, columns=columns, as_of=args.as_of,
                           as_json=getattr(args, "json", False), explain=args.explain, index=args.index, out=out)
    return index_command(omni, args.action, args.name, as_of=args.as_of, fresh=args.fresh, index=args.index,
                         as_json=getattr(args, "json", False), progress=False if args.no_progress else None, out=out)


def get_command(omni: Any, name: str, ids: list[str], *, columns: list[str] | None = None, as_of: int | None = None,
                as_json: bool = False, explain: bool = False, index: str | None = None,
                out: TextIO | None = None) -> int:
    """``omni get``: print the rows; returns the exit code (0, also when some ids are not found)."""
    from omni_iceberg.index.lookup import get_rows
    from omni_iceberg.ui.formatting import format_arrow

    out = out or sys.stdout
    lookup = get_rows(omni, name, ids, columns=columns, as_of=as_of, explain=True, index=index)
    if as_json:
        for row in lookup.rows.to_pylist():
            print(json.dumps(row, default=str, ensure_ascii=False), file=out)
        if explain:
            print(json.dumps({"explain": lookup.explain()}, default=str), file=out)
    else:
        print(format_arrow(lookup.rows, "table"), file=out)
        if explain:
            print(lookup.explain_text(), file=out)
    return 0


def index_command(omni: Any, action: str, name: str, *, as_of: int | None = None, fresh: bool = False,
                  index: str | None = None, as_json: bool = False, progress: bool | None = None,
                  out: TextIO | None = None) -> int:
    """``omni index verify|rebuild``; verify exits 1 when it finds problems."""
    from omni_iceberg.index.maintenance import rebuild, verify
    from omni_iceberg.index.select import open_index

    out = out or sys.stdout
    state = omni.state(name, as_of)
    idx = open_index(omni.config, state.table.identifier, index)
    if action == "rebuild":
        report = rebuild(omni.catalog, state, idx, fresh=fresh, progress=progress)
        d = report.to_dict()
        print(json.dumps(d) if as_json else
              f"rebuilt the index of {d['logical_table']} at version {d['version']}: {d['runs_indexed']} run(s), "
              f"{d['files']} file(s), {d['rows']} row(s) indexed; {d['runs_skipped']} run(s) already indexed",
              file=out)
        return 0
    vreport = verify(omni.catalog, state, idx, progress=progress)
    print(json.dumps(vreport.to_dict()) if as_json else vreport.text(), file=out)
    return 0 if vreport.ok else 1
