"""``omni export``: stream a filtered projection of a logical table to Parquet or JSONL,
with a manifest that re-creates the same bytes later.

Rows are read a few (batch, id-bucket) partitions at a time (about ``PART_ROWS`` rows,
or one slice of ``OMNI_MEMORY_LIMIT_MB`` if less: no flood of tiny files); within a part
rows are sorted by ``_ai_unique_id_``. A part larger than a slice (one big bucket) is
read id range by id range and spilled in id order, so memory follows the setting, not
the table (:func:`_export_spilled`). Writing Parquet with zstd is most of an export's time and pyarrow
writes one file on one core, so a part larger than ``PIECE_MIN_BYTES`` is cut into up to
one piece per core, each its own file, written (and hashed) in parallel while the next
part is read. The manifest
records the logical version (so every physical snapshot is pinned), the feature
versions, batches, filter, row counts and a SHA-256 per file. ``--from-manifest``
replays the same version and filter and checks every checksum.

Two engines run the same work (``--engine local|spark|auto``). The driver plans (which
files each part reads, :func:`_partitions`), lists and collects file entries and writes
the manifest; the per-part work - read, filter and project with the plan's DuckDB SQL,
sort by id, cut, write, hash - is ONE function, :func:`export_part`, that the local
engine calls in this process and the Spark engine (``spark_udfs.export``) calls in one
Spark task per part. A part's files therefore hold the same bytes on either engine.
Files are written to a temporary folder and moved into place, so a task Spark retries
(or one still running after its retry won) never leaves a torn file; their names are
fixed by the plan, so a retry writes the same names. The destination is a folder or an
``s3://`` prefix (written through the catalog's FileIO: its credentials and endpoint).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, split_qualified
from catalog_ext.errors import ConfigError
from omni_iceberg.explore.planner import QueryPlan, _to_iceberg, engine_message, load_physical, plan_query
from omni_iceberg.read.guard import QueryError, parse_column_name, parse_condition
from omni_iceberg.read import reader as read_layer  # its limit read at call time (tests lower it)
from omni_iceberg.read.reader import check_records_fit, ranges_for, read_ranges, slice_bytes
from omni_iceberg.ui.formatting import jsonable
from omni_iceberg.ui.progress import progress_bar

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

MANIFEST = "_omni_export_manifest.json"
PART_ROWS = 100_000
#: a part is cut into several files only when each piece holds at least this much Arrow
#: data: smaller files would cost their readers more than the parallel write saves
PIECE_MIN_BYTES = 8 * 1024 * 1024
#: the engines ``omni export --engine`` takes
ENGINES = ("local", "spark", "auto")
#: a writer's temporary folder inside a local destination (moved out of when a file is whole)
TMP_PREFIX = ".omni-tmp-"


class ExportError(QueryError):
    """The export cannot run: unknown format, non-empty folder, manifest missing or not matching."""

    exit_code = 2


@dataclass
class ExportResult:
    out_dir: str
    manifest: dict[str, Any]

    @property
    def rows(self) -> int:
        return self.manifest["rows"]


def export_query(ns: str, table: str, columns: list[str] | None, where: str | None) -> exp.Select:
    """The export's query as a tree: ``--columns`` must be plain names, ``--where`` one checked condition.

    Built from parsed parts (never pasted text), then planned and checked like any
    ``omni sql`` query, so a manifest's replayed columns and filter pass the same gate.

    >>> export_query("aidata", "web", ["t_len", "RawData.url"], "t_len > 10").sql()
    'SELECT t_len, RawData.url FROM aidata.web WHERE t_len > 10'
    """
    if columns is not None and not isinstance(columns, list):
        raise ExportError(f"export columns must be a list of names, got {type(columns).__name__}")
    cols = [parse_column_name(c, "the export columns") for c in columns] if columns else [exp.Star()]
    select = exp.select(*cols).from_(exp.Table(this=exp.to_identifier(table), db=exp.to_identifier(ns)))
    if where:
        select = select.where(parse_condition(where, "the export filter (--where)"))
    return select


@dataclass
class Destination:
    """Where an export's files go - a local folder or an ``s3://`` prefix - and how to write there.

    Picklable (a FileIO pickles as its properties), so a Spark task writes where the
    driver would: an object store through the catalog's FileIO, with the catalog's
    credentials and endpoint. A local folder on a cluster must be one the executors share.
    """

    uri: str
    io: Any = None  # the catalog's FileIO for an object store; None: the local filesystem

    @classmethod
    def of(cls, ctx: OmniContext, out_dir: str) -> Destination:
        from catalog_ext.object_store import is_object_store

        if is_object_store(out_dir):
            from catalog_ext import iceberg_io

            return cls(out_dir.rstrip("/"), iceberg_io.file_io(ctx.catalog, out_dir))
        return cls(str(Path(out_dir).absolute()))

    @property
    def local(self) -> bool:
        return self.io is None

    def _fs(self) -> tuple[Any, str]:
        from pyarrow import fs as pafs

        if self.io is None:
            return pafs.LocalFileSystem(), self.uri
        scheme, netloc, path = self.io.parse_location(self.uri)
        return self.io.fs_by_scheme(scheme, netloc), path.rstrip("/")  # the path starts with the bucket

    def names(self) -> list[str]:
        """The names directly under the destination ([] when it does not exist)."""
        from pyarrow import fs as pafs

        fs, base = self._fs()
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        return sorted(i.base_name for i in infos)

    def exists(self) -> bool:
        from pyarrow import fs as pafs

        fs, base = self._fs()
        return fs.get_file_info(base).type != pafs.FileType.NotFound

    def write_text(self, name: str, text: str) -> None:
        fs, base = self._fs()
        if self.io is None:
            Path(base).mkdir(parents=True, exist_ok=True)
        with fs.open_output_stream(f"{base}/{name}") as f:
            f.write(text.encode())

    def read_text(self, name: str | None = None) -> str:
        fs, base = self._fs()
        with fs.open_input_stream(base if name is None else f"{base}/{name}") as f:
            return f.read().decode()

    def tmp_dir(self, spill_root: str | None) -> Path:
        """A fresh folder to write files in before they are moved into place.

        Inside a local destination (a move within one filesystem is a rename: atomic);
        under ``spill_root`` (or the system's temp folder) for an object store, whose
        upload makes an object appear whole or not at all.
        """
        if self.io is None:
            path = Path(self.uri) / f"{TMP_PREFIX}{uuid.uuid4().hex}"
            path.mkdir(parents=True)
            return path
        if spill_root is not None:
            Path(spill_root).mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="omni-export-", dir=spill_root))

    def commit(self, written: Path, name: str) -> None:
        """Move the whole file ``written`` to ``name`` (replacing what a failed attempt left)."""
        if self.io is None:
            os.replace(written, Path(self.uri) / name)
            return
        fs, base = self._fs()
        with open(written, "rb") as src, fs.open_output_stream(f"{base}/{name}") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
        written.unlink()

    def remove(self, names: list[str]) -> None:
        fs, base = self._fs()
        for name in names:
            path = f"{base}/{name}"
            if self.io is None and Path(path).is_dir():
                shutil.rmtree(path, ignore_errors=True)
                continue
            try:
                fs.delete_file(path)
            except (FileNotFoundError, OSError):
                pass

    def rmdir(self) -> None:
        if self.io is None:
            try:
                Path(self.uri).rmdir()
            except OSError:  # something else was put there meanwhile: leave it
                pass

    def __str__(self) -> str:
        return self.uri


@dataclass
class ExportJob:
    """What every part of one export shares; an engine ships it once (Spark: a broadcast)."""

    sql: str  # the plan's query, DuckDB dialect, on the scans' local names
    fmt: str
    dest: Destination
    workers: int  # pieces a part is cut into at most: the driver's, so both engines cut alike
    budget: int  # bytes of one read slice (the driver's OMNI_MEMORY_LIMIT_MB share)
    limit: int  # bytes one record may hold (OMNI_MEMORY_LIMIT_MB)
    scans: dict[str, Any]  # scan's local name -> pyiceberg scan (no catalog: it would not pickle)
    spill_root: str | None = None


@dataclass
class PartSpec:
    """One part of an export: its files, by scan; a replay's rows per file."""

    index: int
    batch: str
    bucket: int
    reads: list[tuple[str, bool, list]] = field(default_factory=list)  # (local name, batch filter?, tasks)
    sizes: list[int] | None = None

    def prefix(self, fmt: str) -> tuple[str, str]:
        """The part's file names start with the first and are, or start with, the second."""
        stem = f"part-{self.batch}-{self.bucket:04d}"
        return f"{stem}.{fmt}", f"{stem}-"


def _resolve_engine(ctx: OmniContext, engine: str, plan_bytes: Any) -> tuple[str, str]:
    """(engine, reason) for ``--engine``; ``plan_bytes()`` sizes the export for ``auto``."""
    if engine != "auto":
        return engine, f"requested --engine {engine}"
    # auto stays local on the embedded catalog: the Spark session is opened on omni's catalog
    # (checked before any work), and Spark's JDBC connection to an SQLite catalog would lock
    # it against this process's own commits - the Spark engine says it cannot run there.
    from catalog_ext import settings
    from omni_iceberg.engines import unavailable

    blocker = unavailable("export", "spark", ctx.config)
    if blocker:
        return "local", f"auto: Spark cannot run here: {blocker}"
    threshold, size = int(settings.value("OMNI_SPARK_THRESHOLD_BYTES")), plan_bytes()
    if size < threshold:
        return "local", f"auto: the export reads {size} B, below the Spark threshold of {threshold} B"
    return "spark", f"auto: the export reads {size} B, at or above the Spark threshold of {threshold} B"


def export(ctx: OmniContext, name: str, columns: list[str] | None, where: str | None, fmt: str, out_dir: str,
           as_of: int | None = None, progress: bool | None = None, expected: dict[str, Any] | None = None,
           engine: str = "local", spark_master: str | None = None,
           engine_options: dict[str, Any] | None = None) -> ExportResult:
    """Export ``name``'s rows (``columns``, ``where``) to ``out_dir`` (a folder or ``s3://`` prefix).

    ``engine``: ``local`` (this process), ``spark`` (one Spark task per part, on
    ``spark_master`` or ``local[2]``) or ``auto``. Either writes the same files.
    """
    if fmt not in ("parquet", "jsonl"):
        raise ExportError(f"unknown export format {fmt!r}: use parquet or jsonl")
    if engine not in ENGINES:
        raise ExportError(f"unknown export engine {engine!r}: use one of {', '.join(ENGINES)}")
    if spark_master and engine == "local":
        raise ConfigError(f"a Spark master ({spark_master}) was given for engine 'local': use --engine spark")
    dest = Destination.of(ctx, out_dir)
    if dest.names():
        raise ExportError(f"export directory {out_dir} is not empty; choose a new or empty directory")
    runner = None
    if engine == "spark":  # an unreachable master is the error to name first, before any work
        runner = _spark_runner(ctx, spark_master, engine_options)

    ns, table = split_qualified(name)
    started = time.perf_counter()
    plan = plan_query(ctx, export_query(ns, table, columns, where), as_of)
    if len(plan.ctx.tables) != 1:
        raise ExportError("export reads exactly one logical table")
    alias, bound = next(iter(plan.ctx.tables.items()))
    state = bound.state
    batches = plan.ctx.batches.get(alias) or [b.name for b in state.batches]
    sql = plan.sql("duckdb")
    _check_binds(ctx, plan, sql)  # an error in --where is reported before the folder exists
    scans, parts = _plan_parts(ctx, plan, batches, expected)
    engine, reason = _resolve_engine(ctx, engine, lambda: _planned_bytes(parts))
    if engine == "spark" and runner is None:
        runner = _spark_runner(ctx, spark_master, engine_options)
    home = getattr(getattr(ctx, "config", None), "home", None)
    job = ExportJob(sql=sql, fmt=fmt, dest=dest, workers=_writers(), budget=slice_bytes(),
                    limit=read_layer.memory_limit_bytes(),
                    scans=scans, spill_root=str(Path(home) / "spill") if home is not None and engine == "local"
                    else None)
    created = dest.local and not dest.exists()
    written = False
    files: list[dict[str, Any]] = []
    try:
        if runner is not None:
            # the session starts before anything is written: a cluster without executors fails clean
            per_part = runner.run_parts(job, parts)
            files = [entry for entries in per_part for entry in entries]
        else:
            files = _run_local(job, parts, progress, f"export {state.table.identifier}")
        if runner is not None and dest.local:
            # a task that died after its retry won may have left its temporary folder there
            dest.remove([n for n in dest.names() if n.startswith(TMP_PREFIX)])
        written = True
    finally:
        if not written:  # a failed export leaves nothing behind: the folder was empty or new
            _remove_parts(dest, parts, fmt, created)
        if runner is not None:
            runner.close()
    total = sum(int(f["rows"]) for f in files)
    manifest = {
        "format_version": 1, "logical_table": state.table.identifier, "logical_version": state.version,
        "pinned_snapshots": {t.identifier: t.snapshot_id for t in state.tables},
        "read_tables": sorted({s.table.identifier for s in plan.scans}),
        "feature_versions": {f.name: f.version for f in state.features if f.current},
        "columns": columns, "where": where, "batches": batches, "format": fmt, "rows": total, "files": files,
        "created_at": datetime.now(timezone.utc).isoformat(), "pyarrow": pa.__version__,
        "engine_reads": _engine_reads(ctx, state, columns, where, batches),
        "engine": {"name": engine, "reason": reason},  # either engine writes the same files
    }
    if expected is not None:
        _verify(expected, manifest)
    dest.write_text(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
    # retention keeps (or refuses to expire) the version a manifest pins while the manifest exists
    if dest.local:  # a pin names a local manifest (catalog_ext.pins reads it from this machine)
        from catalog_ext.pins import record_pin

        view = ctx.store.views.load_view(state.table.namespace, state.table.name)
        record_pin(ctx.catalog, view.metadata["location"], state.table.identifier, state.version,
                   Path(dest.uri) / MANIFEST)
    from omni_iceberg.explore.query_log import log_query

    log_query(ctx, plan, kind="export", engine=engine, rows=total,
              latency_ms=int((time.perf_counter() - started) * 1000))
    return ExportResult(str(dest), manifest)


def _spark_runner(ctx: OmniContext, spark_master: str | None, engine_options: dict[str, Any] | None) -> Any:
    """The Spark engine's ``export`` capability (registered by the Spark plugin), master checked."""
    from omni_iceberg.engines import lookup

    runner = lookup("export", "spark")(ctx, master=spark_master, **(engine_options or {}))
    runner.check()
    return runner


def _planned_bytes(parts: list[PartSpec]) -> int:
    return sum(int(t.file.file_size_in_bytes) for p in parts for _, _, tasks in p.reads for t in tasks)


def _plan_parts(ctx: OmniContext, plan: QueryPlan, batches: list[str], expected: dict[str, Any] | None
                ) -> tuple[dict[str, Any], list[PartSpec]]:
    """The export's scans (by local name) and its parts, in the order their files are listed.

    Per-file work only: which files each part reads, never a row.
    """
    replayed = _replayed_pieces(expected)
    scans: dict[str, Any] = {}
    parts: list[PartSpec] = []
    starts = None if expected is None else {(f["batch"], int(f["bucket"])) for f in expected.get("files", [])}
    for batch, bucket, tables in _partitions(ctx, plan, batches, starts):
        spec = PartSpec(len(parts), batch, bucket, sizes=replayed.get((batch, bucket)))
        for scan in plan.scans:
            ice_scan, tasks = tables.get(scan.local_name, (None, []))
            if ice_scan is None:
                raise ExportError(f"no scan planned for {scan.table.identifier}")
            # a scan holds its catalog (which does not pickle); the files are read through its FileIO
            scans.setdefault(scan.local_name, ice_scan.update(catalog=None, table_identifier=None))
            spans = _spans_batches(ice_scan.table_metadata, tasks)  # a compacted file: this part's batch only
            spec.reads.append((scan.local_name, spans, list(tasks)))
        parts.append(spec)
    return scans, parts


def _run_local(job: ExportJob, parts: list[PartSpec], progress: bool | None, label: str) -> list[dict[str, Any]]:
    """Every part in this process: the next part is read while the last one's pieces are written."""
    files: list[dict[str, Any]] = []
    bar = progress_bar(progress, label, "part", total=len(parts))
    pool = ThreadPoolExecutor(max_workers=job.workers, thread_name_prefix="omni-export")
    previous: list[Future] = []
    tmp = None

    def drain() -> None:
        nonlocal previous
        for f in previous:
            f.result()
        previous = []

    try:
        tmp = job.dest.tmp_dir(job.spill_root)
        for spec in parts:
            entries, current = export_part(job, spec, pool, tmp, before_spill=drain)
            files.extend(entries)
            if bar is not None:
                bar.update(1)
            # at most two parts in memory: this one being cut, the last one being written
            drain()
            previous = current
        drain()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if bar is not None:
            bar.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return files


def part_reads(job: ExportJob, spec: PartSpec) -> list[tuple[str, tuple]]:
    """(scan's local name, (pyiceberg scan, file tasks)) of every scan of the plan, for one part."""
    from pyiceberg.expressions import EqualTo

    out = []
    for name, spans, tasks in spec.reads:
        scan = job.scans[name]
        if spans:
            scan = scan.filter(EqualTo(BATCH_COLUMN, spec.batch))
        out.append((name, (scan, tasks)))
    return out


def export_part(job: ExportJob, spec: PartSpec, pool: ThreadPoolExecutor, tmp: Path,
                before_spill: Any = None) -> tuple[list[dict[str, Any]], list[Future]]:
    """One part's files: read, filter and project, sort by id, cut, write and hash - on either engine.

    Returns the part's manifest entries (in file order) and the futures of its pieces
    still being written into ``tmp`` and moved into place (each fills its entry's
    ``sha256``); a part larger than a slice is spilled and written before this returns.
    ``before_spill``: called before a spilled part starts (the local engine waits for
    the last part's writes there, so memory holds one of them at a time).
    """
    from catalog_ext import iceberg_io

    reads = part_reads(job, spec)
    if ranges_for([r for _, r in reads], job.budget)[0] > 1:  # larger than a slice: id range by id range
        if before_spill is not None:
            before_spill()
        return _export_spilled(job, spec, reads, pool, tmp), []
    data = _run_duckdb(job.sql, {name: iceberg_io.read_tasks(scan, tasks) for name, (scan, tasks) in reads})
    check_records_fit(data, f"the export of batch {spec.batch}", job.limit)
    if data.num_rows == 0:
        return [], []
    # the order is fixed here (cheap: indices only); the pieces take their rows in the writers
    order = pc.sort_indices(data, [(ID_COLUMN, "ascending")]) if ID_COLUMN in data.column_names else None
    sizes = spec.sizes
    if sizes is None or sum(sizes) != data.num_rows:  # a replay whose rows changed: verification names them
        sizes = _piece_rows(data.num_rows, data.nbytes, job.workers)
    entries, futures = [], []
    for start, n, entry in _pieces(spec.batch, spec.bucket, sizes, job.fmt):
        entries.append(entry)
        futures.append(pool.submit(_write_piece, data, order, start, n, job, tmp, entry))
    return entries, futures


def export_from_manifest(ctx: OmniContext, manifest_path: str, out_dir: str, progress: bool | None = None,
                         engine: str = "local", spark_master: str | None = None,
                         engine_options: dict[str, Any] | None = None) -> ExportResult:
    """Re-create an export exactly: same version, filter and columns; checksums verified.

    ``manifest_path``: the manifest, or the export's folder / ``s3://`` prefix holding it.
    """
    from catalog_ext.object_store import is_object_store

    path = manifest_path.rstrip("/")
    if is_object_store(path):
        source = Destination.of(ctx, path)
        if not path.endswith(MANIFEST) and MANIFEST in source.names():
            path = f"{path}/{MANIFEST}"
    elif Path(path).is_dir():
        path = str(Path(path) / MANIFEST)
    try:
        text = Destination.of(ctx, path).read_text()
    except (FileNotFoundError, IsADirectoryError, OSError) as e:
        raise ExportError(f"manifest not found: {manifest_path}") from e
    try:
        m = json.loads(text)
        table, columns, where, fmt, version = (m["logical_table"], m["columns"], m["where"], m["format"],
                                               m["logical_version"])
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{path} is not an omni export manifest: {e}") from e
    # a manifest is a file anyone may have edited: its columns and filter pass the same
    # checks as a command line's (export_query), and the version must be a number
    if not isinstance(version, int) or not isinstance(table, str) or not isinstance(where, (str, type(None))):
        raise ExportError(f"{path}: logical_version must be a number, logical_table and where text")
    return export(ctx, table, columns, where, fmt, out_dir, as_of=version, progress=progress, expected=m,
                  engine=engine, spark_master=spark_master, engine_options=engine_options)


def _engine_reads(ctx: OmniContext, state: Any, columns: list[str] | None, where: str | None,
                  batches: list[str] | None) -> dict[str, str]:
    """The same rows from Spark SQL and Trino: a SELECT on the version's pinned view.

    When no pinned view of this version exists yet, ``make_view`` is the command that
    makes it (``omni pin``); it then also keeps the version from retention.
    """
    from catalog_ext.pinned_views import engine_reads, pinned_views

    ns, table = state.table.namespace, state.table.name
    reads = engine_reads(ctx.config.catalog_name, ns, table, state.version, pinned_views(ctx.store, ns, table))
    select = ", ".join(columns) if columns else "*"
    filters = [f"({where})"] if where else []
    if batches and set(batches) != {b.name for b in state.batches}:
        filters.append("_ai_append_name_ IN (" + ", ".join("'" + b.replace("'", "''") + "'" for b in batches) + ")")
    suffix = (" WHERE " + " AND ".join(filters)) if filters else ""
    return {k: (v.replace("SELECT *", f"SELECT {select}", 1) + suffix if k in ("spark", "trino") else v)
            for k, v in reads.items()}


def _verify(expected: dict[str, Any], got: dict[str, Any]) -> None:
    want = {f["file"]: f["sha256"] for f in expected["files"]}
    have = {f["file"]: f["sha256"] for f in got["files"]}
    if want != have:
        diff = sorted(set(want.items()) ^ set(have.items()))[:5]
        raise ExportError(f"re-created export differs from the manifest ({len(diff)}+ files differ, e.g. {diff[0]}): "
                          f"the pinned snapshots may have been expired, or the pyarrow version changed "
                          f"({expected.get('pyarrow')} -> {pa.__version__})")


def _partitions(ctx: OmniContext, plan: QueryPlan, batches: list[str], starts: set[tuple[str, int]] | None = None):
    """(batch, first bucket, {scan local name: (scan, tasks)}) for every part holding rows.

    ``starts``: the (batch, first bucket) of a replayed manifest's files, where its parts
    started; a replay cuts its parts there (a part that wrote no file merges into the one
    before it: it adds no row).

    Each physical table is planned ONCE for all exported batches (its manifests read
    once, not once per batch: an export of a table with 1,000 batches would otherwise
    read every manifest 1,000 times); its file tasks are then sorted into (batch,
    bucket) by the partition value and the file's exact batch bounds. A compacted file
    that holds several batches goes to each of them, and its part is read with that
    batch's filter (see :func:`_run_part`).
    """
    from catalog_ext import iceberg_io
    from catalog_ext.group_values import batches_in
    from pyiceberg.expressions import AlwaysTrue, And, In

    all_batches = {b.name for b in plan.ctx.tables[plan.scans[0].alias].state.batches}
    wanted = sorted(set(batches))
    # (batch, bucket) -> local name -> (scan, tasks)
    grouped: dict[tuple[str, int], dict[str, tuple[Any, list]]] = {}
    for scan in plan.scans:
        state = plan.ctx.tables[scan.alias].state
        row_filter = AlwaysTrue() if set(wanted) >= all_batches else In(BATCH_COLUMN, set(wanted))
        for f in scan.filters:
            expr = _to_iceberg(f, plan.ctx, state, scan.table.key)
            if expr is not None:
                row_filter = And(row_filter, expr)
        table = load_physical(ctx, plan, scan.table)
        ice_scan, by_bucket = iceberg_io.scan_tasks_by_bucket(table, scan.table.snapshot_id, tuple(scan.columns),
                                                              row_filter)
        for bucket, tasks in by_bucket.items():
            for task in tasks:
                for batch in batches_in(table.metadata, task.file, wanted):
                    grouped.setdefault((batch, bucket), {}).setdefault(scan.local_name, (ice_scan, []))[1].append(task)
        for key in grouped:
            grouped[key].setdefault(scan.local_name, (ice_scan, []))
    base = plan.scans[0].local_name
    budget = slice_bytes()
    for batch in batches:
        # consecutive buckets are merged into parts of about PART_ROWS rows, or of a slice of
        # memory if that comes first: one file per bucket would mean many tiny files for small
        # batches, and a part larger than a slice is read range by range, each range reading
        # all of its files. A replay cuts parts where its manifest's parts start.
        part: dict[str, tuple[Any, list]] = {}
        first, rows, size = None, 0, 0
        for bucket in sorted(b for (name, b) in grouped if name == batch):
            tables = grouped[(batch, bucket)]
            base_tasks = tables.get(base, (None, []))[1]
            if not base_tasks:
                continue
            more = 0 if starts is not None else sum(
                iceberg_io.estimate_arrow_bytes(ice_scan, tasks) for ice_scan, tasks in tables.values()
                if ice_scan is not None)
            if part and ((batch, bucket) in starts if starts is not None else size + more > budget):
                yield batch, first, part
                part, first, rows, size = {}, None, 0, 0
            first = bucket if first is None else first
            for local, (ice_scan, tasks) in tables.items():
                part.setdefault(local, (ice_scan, []))[1].extend(tasks)
            if starts is not None:
                continue
            rows += sum(t.file.record_count for t in base_tasks)
            size += more
            if rows >= PART_ROWS:
                yield batch, first, part
                part, first, rows, size = {}, None, 0, 0
        if part:
            yield batch, first, part


def _spans_batches(meta: Any, tasks: list[Any]) -> bool:
    from catalog_ext.physical import file_batch_bounds

    return any(len(set(file_batch_bounds(meta, t.file))) != 1 for t in tasks)


def _export_spilled(job: ExportJob, spec: PartSpec, reads: list[tuple[str, tuple]], pool: ThreadPoolExecutor,
                    tmp: Path) -> list[dict[str, Any]]:
    """Export one part larger than a slice (``job.budget``) in bounded memory; its manifest entries.

    The part is read id range by id range (:func:`~omni_iceberg.read.reader.read_ranges`),
    each range's query result sorted by id and spilled to an Arrow file under the home:
    ranges in id order, so the spill holds the part in the order a whole read sorts it.
    Its files are then cut where a whole read would cut them, except that no file holds
    more than a slice (a replay cuts where its manifest did), and each file is read back
    from the spill alone. A file written whole from a single-chunk table is what
    :func:`_write_piece` writes: the same bytes for the same rows.
    """
    names = [name for name, _ in reads]
    root = job.spill_root
    if root is not None:
        Path(root).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="omni-export-", dir=root) as spill_dir:
        spill = Path(spill_dir) / "part.arrow"
        writer, schema, rows, nbytes = None, None, 0, 0
        try:
            for datas in read_ranges([r for _, r in reads], job.budget):
                data = _run_duckdb(job.sql, dict(zip(names, datas)))
                check_records_fit(data, f"the export of batch {spec.batch}", job.limit)
                if data.num_rows == 0:
                    continue
                if ID_COLUMN in data.column_names:
                    data = data.take(pc.sort_indices(data, [(ID_COLUMN, "ascending")]))
                if writer is None:
                    schema = data.schema
                    writer = pa.ipc.new_file(str(spill), schema)
                writer.write_table(data.cast(schema) if data.schema != schema else data)
                rows += data.num_rows
                nbytes += data.nbytes
        finally:
            if writer is not None:
                writer.close()
        if rows == 0:
            return []
        sizes = spec.sizes
        if sizes is None or sum(sizes) != rows:
            sizes = _bounded_pieces(_piece_rows(rows, nbytes, job.workers), nbytes, job.budget)
        entries, futures = [], []
        for start, n, entry in _pieces(spec.batch, spec.bucket, sizes, job.fmt):
            entries.append(entry)
            futures.append(pool.submit(_write_spilled_piece, spill, start, n, job, tmp, entry))
            while len([f for f in futures if not f.done()]) >= job.workers:  # at most one piece a writer in memory
                next(f for f in futures if not f.done()).result()
        for f in futures:
            f.result()
    return entries


def _bounded_pieces(sizes: list[int], nbytes: int, budget: int) -> list[int]:
    """``sizes`` cut further, evenly, until no piece holds more than about ``budget`` bytes."""
    rows = sum(sizes)
    pieces = max(len(sizes), -(-nbytes // max(1, budget)))
    pieces = max(1, min(pieces, rows))
    if pieces == len(sizes):
        return sizes
    base, extra = divmod(rows, pieces)
    return [base + (1 if k < extra else 0) for k in range(pieces)]


def _write_spilled_piece(spill: Path, start: int, rows: int, job: ExportJob, tmp: Path,
                         entry: dict[str, Any]) -> None:
    """Rows ``start .. start + rows`` of the spilled part, written as ``entry``'s file (see :func:`_export_spilled`)."""
    with pa.OSFile(str(spill)) as f:  # read, not mapped: mapped pages would count as this process's memory
        reader = pa.ipc.open_file(f)
        chunks, at = [], 0
        for i in range(reader.num_record_batches):
            if at >= start + rows:
                break
            b = reader.get_batch(i)
            lo, hi = max(start, at), min(start + rows, at + b.num_rows)
            if lo < hi:
                chunks.append(b.slice(lo - at, hi - lo))
            at += b.num_rows
        piece = pa.Table.from_batches(chunks, schema=reader.schema).combine_chunks()
    _put(piece, job, tmp, entry)


def _run_duckdb(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    """The export's query on the locked DuckDB; an engine error is the user's query (exit 2, as in omni sql)."""
    import duckdb

    from omni_iceberg.read.sandbox import locked_duckdb

    con = locked_duckdb(tables)
    try:
        return con.sql(sql).to_arrow_table()
    except duckdb.Error as e:
        raise ExportError(f"the export's query failed: {engine_message(e)}") from e
    finally:
        con.close()


def _check_binds(ctx: OmniContext, plan: QueryPlan, sql: str) -> None:
    """Run the export's query on empty scans of its tables: DuckDB binds it as it will for the data.

    An aggregate in ``--where`` or a comparison of text with a number fails here, before
    anything is created.
    """
    from catalog_ext import iceberg_io

    empty = {}
    for scan in plan.scans:
        table = load_physical(ctx, plan, scan.table)
        ice = table.scan(snapshot_id=scan.table.snapshot_id, selected_fields=tuple(scan.columns))
        empty[scan.local_name] = iceberg_io.read_tasks(ice, [])
    _run_duckdb(sql, empty)


def _remove_parts(dest: Destination, parts: list[PartSpec], fmt: str, created: bool) -> None:
    """Remove every file the parts of a failed export wrote (found by their planned names), and
    the writers' temporary folders; the folder itself when the export created it.

    The destination's names are listed, not the written files collected: on Spark a task that
    failed, or finished before another failed, reported nothing back.
    """
    whole, starts = set(), []
    for spec in parts:
        name, prefix = spec.prefix(fmt)
        whole.add(name)
        starts.append(prefix)
    names = [n for n in dest.names() if n in whole or n.startswith(TMP_PREFIX)
             or (n.endswith(f".{fmt}") and n.startswith(tuple(starts)))]
    dest.remove(names)
    if created:
        dest.rmdir()


def _writers() -> int:
    """Files written at once: one per core (``OMNI_EXPORT_WRITERS`` overrides), at most 8."""
    from catalog_ext import settings

    return settings.value("OMNI_EXPORT_WRITERS") or max(1, min(8, os.cpu_count() or 1))


def _pieces(batch: str, bucket: int, sizes: list[int], fmt: str):
    """(first row, rows, manifest entry) of each output file of one (batch, bucket) part."""
    start = 0
    for k, n in enumerate(sizes):
        fname = f"part-{batch}-{bucket:04d}.{fmt}" if len(sizes) == 1 else f"part-{batch}-{bucket:04d}-{k:03d}.{fmt}"
        yield start, n, {"file": fname, "batch": batch, "bucket": bucket, "rows": n}
        start += n


def _piece_rows(rows: int, nbytes: int, workers: int) -> list[int]:
    """Rows per file of one part: one piece per writer, none under ``PIECE_MIN_BYTES``."""
    pieces = max(1, min(workers, rows, nbytes // PIECE_MIN_BYTES))
    base, extra = divmod(rows, pieces)
    return [base + (1 if k < extra else 0) for k in range(pieces)]


def _replayed_pieces(expected: dict[str, Any] | None) -> dict[tuple[str, int], list[int]]:
    """(batch, bucket) -> rows per file, as the manifest being replayed cut its parts.

    A replay must write the same files whatever machine it runs on, so it cuts each part
    where the original export did, not by this machine's core count.
    """
    out: dict[tuple[str, int], list[int]] = {}
    for f in (expected or {}).get("files", []):
        out.setdefault((f["batch"], int(f["bucket"])), []).append((f["file"], int(f["rows"])))
    return {k: [n for _, n in sorted(v)] for k, v in out.items()}


def _write_piece(data: pa.Table, order: Any, start: int, rows: int, job: ExportJob, tmp: Path,
                 entry: dict[str, Any]) -> None:
    """Rows ``start .. start + rows`` of ``data`` in id order, written as ``entry``'s file (SHA-256 into ``entry``)."""
    piece = data.take(order[start:start + rows]) if order is not None else data.slice(start, rows)
    _put(piece, job, tmp, entry)


def _put(piece: pa.Table, job: ExportJob, tmp: Path, entry: dict[str, Any]) -> None:
    """Write ``piece`` whole under ``tmp``, hash it, then move it into place as ``entry["file"]``."""
    path = tmp / entry["file"]
    _write(piece, path, job.fmt)
    entry["sha256"] = _sha256(path)
    job.dest.commit(path, entry["file"])


def _write(data: pa.Table, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(data, path, compression="zstd")
        return
    with open(path, "w", encoding="utf-8") as f:
        for row in data.to_pylist():
            f.write(json.dumps(row, ensure_ascii=False, default=jsonable) + "\n")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
