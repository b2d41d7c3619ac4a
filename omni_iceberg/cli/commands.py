"""What each ``omni`` command does: call the :class:`~omni_iceberg.api.Omni` verb, print the result.

Every command goes through the Python API, so the CLI and the API offer the same verbs
(``tests/test_cli_parity.py`` checks it). Output is text, or JSON with ``--json``.
"""

from __future__ import annotations

import sys
from typing import Any

from catalog_ext.errors import ConfigError, InvalidIdentifierError
from omni_iceberg.cli import render
from omni_iceberg.ui.formatting import dumps


def emit(args: Any, obj: Any, text) -> None:
    print(dumps(obj, indent=2) if args.json else text())


def progress(args: Any) -> bool | None:
    """Our own bars: off with --no-progress or --json, else only on a terminal."""
    return False if getattr(args, "no_progress", False) or args.json else None


def split_list(text: str | None, what: str) -> list[str] | None:
    if text is None:
        return None
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise InvalidIdentifierError(f"{what}: give at least one comma-separated name (got {text!r})")
    return items


def dispatch(args: Any, command_line: str) -> int:
    if args.command == "config":
        from omni_iceberg.api import Omni

        rows = Omni.settings()
        emit(args, rows, lambda: render.settings_text(rows))
        return 0
    if args.command == "corpus":
        from omni_iceberg.api import Omni

        paths = Omni.fetch_corpora(args.names or None)
        emit(args, paths, lambda: "\n".join(f"{n}: {p}" for n, p in paths.items()))
        return 0
    omni = _omni(args)
    if args.command == "demo":
        return omni.demo(fresh=args.fresh, as_json=args.json)
    handler = _HANDLERS[args.command]
    result = handler(args, omni, command_line)
    return result if isinstance(result, int) else 0


def _omni(args: Any):
    from omni_iceberg.api import Omni

    return Omni(catalog=args.catalog, warehouse=args.warehouse, home=args.home)


# ---- tables ---------------------------------------------------------------------------------
def table(args, omni, command_line: str) -> int:
    if args.table_command == "create":
        state = omni.create_table(args.name, id_mode=args.id_mode, bucket_count=args.buckets,
                                  comment=args.comment, command=command_line)
        out = {"logical_table": state.table.identifier, "logical_version": state.version,
               "physical_tables": [t.identifier for t in state.tables]}
        emit(args, out, lambda: f"created {out['logical_table']} (version {state.version})")
    elif args.table_command == "drop":
        out = omni.drop_table(args.name, purge=args.purge)
        emit(args, out, lambda: render.drop_text(out))
    else:
        tables = omni.list_tables()
        emit(args, tables, lambda: "\n".join(tables) or "(no logical tables)")
    return 0


def tag(args, omni, command_line: str) -> int:
    out = omni.tag(args.name, args.label, args.version, command=command_line)
    moved = f" (moved from version {out['moved_from']})" if out["moved_from"] else ""
    view = f"; Spark SQL / Trino read it as {omni.config.catalog_name}.{out['view']}" if out["view"] else ""
    emit(args, out, lambda: f"{out['logical_table']}: tag {out['tag']!r} -> version {out['version']}{moved}; "
                            f"use --as-of {out['tag']}{view}")
    return 0


def pin(args, omni, command_line: str) -> int:
    if args.list or args.version is None:
        views = omni.pinned_views(args.name)
        emit(args, {"views": views}, lambda: "\n".join(
            f"{v['view']}  version {v['version']}" + (f"  (tag {v['tag']!r})" if v["tag"] else "") for v in views)
            or f"{args.name}: no pinned views; 'omni pin {args.name} VERSION' makes one")
        return 0
    if args.drop:
        out = omni.unpin(args.name, args.version)
        emit(args, out, lambda: "dropped " + ", ".join(out["dropped"]))
        return 0
    out = omni.pin(args.name, args.version)
    emit(args, out, lambda: f"{out['view']} reads {out['of']} version {out['version']}"
                            + (f" (tag {out['tag']!r}; it follows the tag)" if out["tag"] else
                               "; kept from retention until 'omni pin ... --drop'")
                            + f"\n  Spark SQL / Trino: {out['spark']}")
    return 0


def submit(args, omni, command_line: str) -> int:
    options = {"field_map": args.map, "kind": args.kind, "max_reject_ratio": args.max_reject_ratio,
               "command": command_line, "follow_links": args.follow_links}
    runner = _submit_engine(args, omni)
    if runner is None:
        report = omni.submit(args.name, args.sources, args.batch, progress=progress(args), **options)
    else:
        with runner:
            report = runner.submit(args.name, args.sources, args.batch, **options)
    for message in report.warnings:
        print(f"omni: warning: {message}", file=sys.stderr)
    for message in report.reject_messages:
        print(f"omni: rejected: {message}", file=sys.stderr)
    if not report.already_committed and report.rejected > len(report.reject_messages):
        print(f"omni: ... {report.rejected - len(report.reject_messages)} more rejected; "
              f"see 'omni rejects {report.logical_table} --batch {report.batch}'", file=sys.stderr)
    out = {k: getattr(report, k) for k in ("batch", "read", "written", "duplicates", "rejected", "logical_version")}
    out["already_committed"] = report.already_committed
    emit(args, out, lambda: render.submit_text(report))
    return 0


def _submit_engine(args, omni) -> Any:
    """The Spark ``ingest`` engine ``--engine`` asks for (master checked), or None for this process.

    ``auto``: local where Spark cannot run (the embedded catalog, no pyspark), else Spark when
    the source files weigh OMNI_SPARK_THRESHOLD_BYTES or more. Said on stderr when not local.
    """
    runner, note = omni.ingest_engine(getattr(args, "engine", "local"), args.sources,
                                      spark_master=getattr(args, "spark_master", None), kind=args.kind,
                                      follow_links=args.follow_links)
    if note:
        print(f"omni: {note}", file=sys.stderr)
    return runner


# ---- look -----------------------------------------------------------------------------------
def status(args, omni, command_line: str) -> int:
    st = omni.status(args.name, args.as_of)
    emit(args, st, lambda: render.status_text(st))
    return 0


def log(args, omni, command_line: str) -> int:
    versions = [v.__dict__ for v in omni.log(args.name)]
    tags = omni.tags(args.name)
    emit(args, versions, lambda: render.log_text(versions, tags))
    return 0


def rejects(args, omni, command_line: str) -> int:
    rows = omni.rejects(args.name, args.batch).to_pylist()
    emit(args, rows, lambda: "\n".join(
        f"{r['batch']}  {r['source_file']}:{r['line'] or r['offset'] or ''}  {r['field'] or ''}  {r['reason']}"
        for r in rows) or "(no rejected records)")
    return 0


def sql(args, omni, command_line: str) -> int:
    if args.explain:
        if args.json:
            emit(args, omni.explain_dict(args.query, as_of=args.as_of), str)
        else:
            print(omni.explain(args.query, as_of=args.as_of))
        return 0
    if args.dialect:
        text = omni.translate(args.query, args.dialect, as_of=args.as_of)
        emit(args, {"dialect": args.dialect, "sql": text}, lambda: text)
        return 0
    # rows are printed as the engine yields them: a large answer is never held whole
    reader = omni.query(args.query, as_of=args.as_of, engine=args.engine, stream=True, spark_master=args.spark_master)
    render.sql_rows(reader, "json" if args.json else args.format, sys.stdout)
    return 0


def export(args, omni, command_line: str) -> int:
    if args.from_manifest:
        result = omni.export_from_manifest(args.from_manifest, args.out, progress=progress(args), engine=args.engine,
                                           spark_master=args.spark_master)
    else:
        if not args.name:
            raise InvalidIdentifierError("omni export needs a logical table NAME (or --from-manifest MANIFEST)")
        result = omni.export(args.name, args.out, columns=split_list(args.columns, "--columns"), where=args.where,
                             fmt=args.format, as_of=args.as_of, progress=progress(args), engine=args.engine,
                             spark_master=args.spark_master)
    m = result.manifest
    emit(args, m, lambda: f"exported {m['rows']} rows of {m['logical_table']} v{m['logical_version']} "
         f"into {len(m['files'])} files in {result.out_dir} (manifest: {result.out_dir}/_omni_export_manifest.json)")
    return 0


def errors(args, omni, command_line: str) -> int:
    rows = omni.errors(args.name, args.run, all_attempts=args.all_attempts).to_pylist()
    emit(args, rows, lambda: "\n".join(
        f"{r['run_id']} attempt {r['attempt']}  {r['feature']}@{r['version']}  {r['batch']}  {r['_ai_unique_id_']}  "
        f"{r['exception_class']}: {r['message'][:80]}" for r in rows) or "(no failed records)")
    return 0


def lineage(args, omni, command_line: str) -> int:
    from catalog_ext.contract import STAGES

    parts = args.column.split(".")
    # NAME.COLUMN, NS.NAME.COLUMN, with COLUMN possibly Stage.field
    if len(parts) >= 2 and parts[-2] in STAGES:
        table_parts, column = parts[:-2], ".".join(parts[-2:])
    else:
        table_parts, column = parts[:-1], parts[-1]
    if not table_parts or not all(table_parts):
        raise InvalidIdentifierError(f"use NAME.COLUMN, e.g. web.math_recall (got {args.column!r})")
    name = ".".join(table_parts)
    tree = omni.lineage(name, column)
    if args.picture:
        from omni_iceberg.ui.graphs import write_picture

        nodes, edges = tree.graph()
        write_picture(args.picture, nodes, edges, f"lineage of {name}.{column}")
    if args.openlineage:
        from omni_iceberg.backfill.lineage import emit as emit_events, openlineage_events

        n = emit_events(openlineage_events(omni.context, name), args.openlineage)
        print(f"emitted {n} OpenLineage events to {args.openlineage}", file=sys.stderr)
    emit(args, tree.to_dict(), tree.render)
    return 0


# ---- govern ---------------------------------------------------------------------------------
def compact(args, omni, command_line: str) -> int:
    if args.dry_run:
        plan = omni.plan_compaction(args.name, args.min_files)
        out = {**plan.to_dict(), "dry_run": True, "empty": plan.empty}
        emit(args, out, plan.describe)
        return 0
    report = omni.compact(args.name, args.min_files, engine=args.engine, spark_master=args.spark_master,
                          progress=progress(args))
    emit(args, {**report, "dry_run": False, "empty": not report["plan"]["tables"]},
         lambda: render.compact_text(report, args.min_files))
    return 0


def regroup(args, omni, command_line: str) -> int:
    if args.split and args.co_read:
        raise ConfigError("--split names the columns to move and --co-read takes them from the query log: "
                         "give one of them")
    if (args.split or args.co_read) and (args.engine != "local" or args.spark_master):
        raise ConfigError("--engine and --spark-master choose who merges feature tables into column groups; "
                          "--split and --co-read run in this process")
    if args.co_read:
        report = omni.coread_regroup(args.name, dry_run=args.dry_run, command=command_line)
        emit(args, {**report, "dry_run": args.dry_run}, lambda: report["describe"] + (
            f"\nmoved -> version {report['logical_version']}" if "split" in report else ""))
        return 0
    if args.split:
        columns = [c for c in args.split.split(",") if c]
        report = omni.split_columns(args.name, columns, dry_run=args.dry_run, command=command_line)
        emit(args, {**report, "dry_run": args.dry_run}, lambda: report["describe"] + (
            "" if args.dry_run else f"\nsplit -> version {report['logical_version']}"))
        return 0
    tables = [t for t in (args.tables or "").split(",") if t] or None
    report = omni.regroup(args.name, tables=tables, dry_run=args.dry_run, command=command_line,
                          engine=args.engine, spark_master=args.spark_master)
    if args.dry_run or not report["plan"]["moves"]:
        emit(args, {**report, "dry_run": args.dry_run}, lambda: report["describe"])
        return 0
    emit(args, report, lambda: f"{report['describe']}\nregrouped -> version {report['logical_version']} "
                               f"(engine {report['engine']}: {report['engine_reason']})")
    return 0


def rebucket(args, omni, command_line: str) -> int:
    report = omni.rebucket(args.name, args.buckets, dry_run=args.dry_run, progress=progress(args),
                           command=command_line, engine=args.engine, spark_master=args.spark_master)
    done = not args.dry_run and not report["plan"]["empty"]
    emit(args, {**report, "dry_run": args.dry_run}, lambda: report["describe"] + (
        f"\nre-bucketed -> version {report['logical_version']} (engine {report['engine']}: "
        f"{report['engine_reason']})" if done else ""))
    return 0


def accelerate(args, omni, command_line: str) -> int:
    if args.hot is not None or args.drop_hot or args.sync:
        if args.engine != "local" or args.spark_master:
            raise ConfigError("--engine and --spark-master choose who writes a --materialize or --refresh copy; "
                              "hot columns load in this process")
        return _hot(args, omni, command_line)
    engine = {"engine": args.engine, "spark_master": args.spark_master}
    if args.refresh:
        reports = omni.refresh_materializations(args.name, dry_run=args.dry_run, progress=progress(args), **engine)
        emit(args, {"refreshed": reports}, lambda: "\n".join(
            f"{r['plan']['action']} {r['plan']['identifier']}: {r['rows_written']:,} rows -> version "
            f"{r['logical_version']}" for r in reports) or f"{args.name}: every materialization is fresh")
        return 0
    columns = [c for c in args.materialize.split(",") if c.strip()]
    if args.dry_run:
        plan = omni.plan_materialization(args.name, columns)
        emit(args, {**plan.to_dict(), "dry_run": True}, plan.describe)
        return 0
    report = omni.materialize(args.name, columns, progress=progress(args), command=command_line, **engine)
    plan = report["plan"]
    emit(args, report, lambda: f"{plan['action']} {plan['identifier']}: {report['rows_written']:,} rows -> version "
                               f"{report['logical_version']}; readers of {', '.join(plan['columns'])} use it while "
                               f"fresh (engine {report['engine']}: {report['engine_reason']})")
    return 0


def _hot(args, omni, command_line: str) -> int:
    if args.sync or args.dry_run:
        if args.hot is not None or args.drop_hot:
            raise ConfigError("--dry-run shows a sync plan: use it with --sync, not with --hot or --drop-hot")
        report = omni.sync_hot(args.name, dry_run=args.dry_run, progress=progress(args))
    else:
        columns = None if args.drop_hot else split_list(args.hot, "--hot")
        report = omni.set_hot_columns(args.name, columns, sync_on_commit=args.sync_on_commit,
                                      progress=progress(args), command=command_line)
    plan = report["plan"]

    def text() -> str:
        from omni_iceberg.hot.sync import HotSyncPlan

        described = HotSyncPlan(**plan).describe()
        if report["dry_run"]:
            return described
        return f"{described}\nloaded {report['rows_loaded']:,} rows in {report['seconds']} s"

    emit(args, report, text)
    return 0


def runs(args, omni, command_line: str) -> int:
    from omni_iceberg.backfill.run_stats import describe_stats

    name = omni.state(args.name).table.identifier
    if args.stats:
        stats = omni.runs(args.name, stats=True)
        emit(args, stats, lambda: describe_stats(name, stats))
        return 0
    rows = omni.runs(args.name)

    def text() -> str:
        if not rows:
            return f"{name}: no backfill run yet"
        return "\n".join(f"{r['started_at']:%Y-%m-%d %H:%M:%S} {r['run_id']} attempt {r['attempt']} {r['status']:9s} "
                         f"{r['features']} "
                         f"rows={r['rows']} errors={r['errors']}" + (f" - {r['message'][:120]}" if r["message"] else "")
                         for r in rows)

    emit(args, [{k: (str(v) if k.endswith("_at") else v) for k, v in r.items() if k != "plan"} for r in rows], text)
    return 0


def advise(args, omni, command_line: str) -> int:
    advice = omni.advise(args.name, apply=args.apply, progress=progress(args))
    emit(args, advice.to_dict(), lambda: advice.describe() + (
        f"\napplied {len(advice.applied)} proposal(s)" if args.apply else ""))
    return 0


def flush_log(args, omni, command_line: str) -> int:
    n = omni.flush_query_log()
    emit(args, {"flushed_rows": n}, lambda: f"flushed {n} query-log row(s) into omni_sys.query_log")
    return 0


def drop_batch(args, omni, command_line: str) -> int:
    if args.dry_run:
        plan = omni.plan_drop_batch(args.name, args.batch)
        emit(args, {**plan.to_dict(), "dry_run": True}, plan.describe)
        return 0
    report = omni.drop_batch(args.name, args.batch, progress=progress(args), command=command_line)
    removed = sum(report["rows_removed"].values())
    emit(args, report, lambda: f"dropped batch {args.batch!r} ({report['plan']['rows']:,} rows; {removed:,} physical "
                               f"rows in {len(report['rows_removed'])} table(s)) -> version "
                               f"{report['logical_version']}")
    return 0


def trino_config(args, omni, command_line: str) -> int:
    path = omni.trino_config(args.out)
    emit(args, {"path": path}, lambda: f"wrote {path}")
    return 0


def spark_config(args, omni, command_line: str) -> int:
    from omni_iceberg import engine_config

    if args.out:
        path = omni.spark_config(args.out)
        emit(args, {"path": path}, lambda: f"wrote {path}")
        return 0
    conf = engine_config.spark_properties(omni.config)
    masked = {k: ("***" if engine_config.is_secret_name(k.rsplit(".", 1)[-1]) else engine_config.redact(v))
              for k, v in conf.items()}
    emit(args, masked, lambda: omni.spark_config().rstrip("\n"))
    return 0


# ---- add columns ----------------------------------------------------------------------------
def feature(args, omni, command_line: str) -> int:
    if args.feature_command == "udfs":
        udfs = omni.udfs()
        emit(args, udfs, lambda: render.udfs_text(udfs))
        return 0
    if args.feature_command == "list":
        feats = omni.features(args.name)
        emit(args, feats, lambda: render.features_text(feats))
        return 0
    return _register(args, omni, command_line)


def _register(args, omni, command_line: str) -> int:
    from omni_iceberg.features.loading import load_definition, load_definitions_file
    from omni_iceberg.features.spec import FeatureDefinitionError

    if not args.paths and not args.builtin:
        raise FeatureDefinitionError("omni feature register needs definition files or --builtin NAME ...")
    if args.builtin and not args.table:
        raise FeatureDefinitionError("--builtin needs --table NAME: built-ins belong to no table of their own")
    defs = [d for p in args.paths for d in load_definitions_file(p)]
    defs += [load_definition({"udf": b}, f"--builtin {b}") for b in args.builtin]
    by_table: dict[str, list] = {}
    for d in defs:
        table_name = args.table or d.table
        if not table_name:
            raise FeatureDefinitionError(f"feature {d.name!r} names no table: add 'table:' or pass --table")
        by_table.setdefault(table_name, []).append(d)
    out = []
    for table_name, items in by_table.items():
        for r in omni.register_features(table_name, items, command=command_line):
            out.append({"table": table_name, "feature": r.definition.key, "registered": r.changed,
                        "logical_version": r.logical_version})
    emit(args, out, lambda: "\n".join(
        f"{o['table']}: {o['feature']} {'registered' if o['registered'] else 'unchanged'} (version {o['logical_version']})"
        for o in out))
    return 0


def backfill(args, omni, command_line: str) -> int:
    features = split_list(args.features, "--features")
    batches = split_list(args.batches, "--batches")
    if args.retry_failed:
        report = omni.retry_failed(args.name, features, args.error_class, engine=args.engine,
                                   spark_master=args.spark_master, isolation=args.isolation,
                                   progress=progress(args), command=command_line)
        emit(args, report.to_dict(), lambda: render.retry_text(report, features))
        return 0
    plan = omni.plan(args.name, features, batches)
    if args.dag:
        from omni_iceberg.backfill.plan_picture import plan_graph
        from omni_iceberg.ui.graphs import write_picture

        nodes, edges = plan_graph(plan)
        write_picture(args.dag, nodes, edges, f"backfill {plan.logical_table}: {', '.join(features)}")
    if args.dry_run:
        emit(args, plan.to_dict(), plan.describe)
        if args.dag and not args.json:
            print(f"DAG picture: {args.dag}")
        return 0
    if not args.json and not plan.empty:  # an empty plan's "nothing to do" is the report's to say
        print(plan.describe(), file=sys.stderr)
    # the plan shown is the one that runs (placed for a Spark cluster's GPUs there; nothing is planned again)
    report = omni.backfill(args.name, features, batches, engine=args.engine, spark_master=args.spark_master,
                           isolation=args.isolation, max_error_ratio=args.max_error_ratio,
                           progress=progress(args), command=command_line, plan=plan)
    emit(args, report.to_dict(), lambda: render.backfill_text(report, batches))
    return 0


# ---- retention and maintenance ---------------------------------------------------------------
def maintain(args, omni, command_line: str) -> int:
    report = omni.maintain(args.name, args.keep_last, min_age_s=args.min_age,
                           compact_min_files=args.compact_min_files, dry_run=args.dry_run,
                           progress=progress(args), command=command_line, engine=args.engine,
                           spark_master=args.spark_master)
    emit(args, report.to_dict(), report.describe)
    return 0


def expire(args, omni, command_line: str) -> int:
    report = omni.expire(args.name, args.keep_last, min_age_s=args.min_age, dry_run=args.dry_run,
                         progress=progress(args), command=command_line)
    emit(args, report.to_dict(), report.describe)
    return 0


# ---- point lookups ---------------------------------------------------------------------------
def get(args, omni, command_line: str) -> int:
    from omni_iceberg.index.render import print_lookup

    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    lookup = omni.get(args.name, args.ids, columns=columns, as_of=args.as_of, explain=True, index=args.index)
    print_lookup(lookup, as_json=args.json, explain=args.explain)
    return 0


def index(args, omni, command_line: str) -> int:
    progress = False if args.no_progress or args.json else None
    if args.index_command == "rebuild":
        d = omni.rebuild_index(args.name, fresh=args.fresh, index=args.index, progress=progress).to_dict()
        emit(args, d, lambda: (
            f"rebuilt the index of {d['logical_table']} at version {d['version']}: {d['runs_indexed']} run(s), "
            f"{d['files']} file(s), {d['rows']} row(s) indexed; {d['runs_skipped']} run(s) already indexed"
            + (f"; swept {d['entries_swept']} dangling entries ({d['runs_swept']} dead run(s))"
               if d['entries_swept'] or d['runs_swept'] else "")))
        return 0
    if args.index_command == "seal":
        d = omni.seal_index(args.name, index=args.index, progress=progress, dry_run=args.dry_run)
        if d is None:
            emit(args, {"sealed": None}, lambda: "this index backend keeps its entries sorted itself: nothing to seal")
            return 0
        rep = d.get("report")
        emit(args, d, lambda: (
            f"{d['unsealed']} unsealed entries next to {d['sealed']} sealed" + (" (dry run: nothing changed)"
                                                                                 if args.dry_run else "")
            if rep is None else
            f"sealed {rep['added']} entries into segment {rep['generation']} ({rep['entries']} entries) in "
            f"{rep['seconds']:.1f} s; {rep['delta_left']} written meanwhile stay unsealed"))
        return 0
    report = omni.verify_index(args.name, as_of=args.as_of, index=args.index, progress=progress)
    emit(args, report.to_dict(), report.text)
    return 0 if report.ok else 1


_HANDLERS = {
    "table": table, "tag": tag, "pin": pin, "submit": submit, "status": status, "log": log, "rejects": rejects, "sql": sql,
    "export": export, "errors": errors, "lineage": lineage, "compact": compact, "regroup": regroup, "rebucket": rebucket, "drop-batch": drop_batch, "accelerate": accelerate, "advise": advise, "flush-log": flush_log, "runs": runs, "trino-config": trino_config,
    "spark-config": spark_config,
    "feature": feature, "backfill": backfill, "get": get, "index": index,
    "maintain": maintain, "expire": expire,
}
