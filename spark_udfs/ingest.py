"""Ingest on Spark: the Spark engine's ``ingest`` capability (``omni submit --engine spark``).

What runs where:

- **the driver** (this process) does per-FILE work only, with the local engine's own
  steps (:mod:`omni_iceberg.ingest.pipeline`): the batch-name and already-committed
  checks, the stale-branch sweep, the declared-schema check of Parquet footers, the
  ``--map`` check on the first records (it reads only those), and the listing of every
  source into files, under the same rules as the readers (:mod:`.sources.files`: a FIFO
  or a link out of a folder is a reject naming it). It opens the batch's StagedWrite,
  saves the rejects into ``omni_sys.rejects``, refuses a batch the local engine would
  refuse (no records, all rejected, ``--max-reject-ratio``), evolves the RawData struct
  for new fields, and makes the ONE logical commit through the local engine's commit
  (same batch summary, ``submit_id``, race re-check).
- **the executors**, one Spark task per source file (consecutive files share a task once
  there are more than :data:`TASKS_PER_CORE` a core; at least one task per
  :data:`GROUP_BYTES` of input), read, parse, map fields and
  compute ids with the local engine's per-record and per-block functions, and drop the
  duplicates within their file exactly as the local engine does (the first row with some
  content is kept). A task returns its accepted rows as Arrow chunks plus a summary: its
  counts, its rejects (file, line/offset, field, reason) and the field types it learned.
- **Spark** then keeps, for each id, the row of the first file in batch order (what the
  local engine keeps: the first in source order), drops the ids an earlier batch holds
  with an anti-join against the base table's id column read by Spark at the version the
  submit started from, clusters the rows by the family's id bucket, and appends them to
  the write's staging branch in the family's bucket spec
  (:func:`spark_udfs.engine.branch_writer`).

Same rows, ids, rejects and counts as the local engine. New fields take their type from
the first record holding them, in source order; a task does not know what files before it
learned, so the driver replays the files in order and a file whose outcome could depend on
an earlier file's types (it asked about a field an earlier file learned, and learned
another type for it or none) is read again with those types (a second Spark job over
those files only). Two differences remain, both on rare input: a record with two bad
fields, one of them a field an earlier file typed, may name the other field in its
reject (same count); and a new field that only duplicates of other rows hold becomes a
(null) column all the same.

What it costs beyond the local engine's work: the read job's output (the batch's accepted
rows as Arrow chunks) is persisted by Spark - memory, then the executors' local disk - from
the read until the write, because the types and new fields must be known from every file's
summary before a row is decoded into the table's struct; the rows are shuffled twice (by id
for the dedup, by bucket for the write); and each submit runs a few Spark jobs (read, count,
write), a fixed cost of seconds (see benchmarks/spark_ingest.py for this machine's figures).

Faults: a file the driver listed that is gone (or unreadable) when its task opens it is one
reject naming it ("cannot read file: ..."), as in the local engine; the rest of the batch lands.
A task that dies midway (its Python worker or executor killed) is Spark's to run again: a task's
rows and summary are one output that Spark keeps only from an attempt that finished, so a retry
neither duplicates nor loses rows (``test_spark_ingest`` kills one task on the standalone cluster).

Against earlier batches the embedded LMDB id index is not asked: executors cannot open
the driver's index, so Spark reads every id of the base table (one column, pruned by
nothing) - the cost grows with the table, like the local engine's "scan" fallback
(``report.dedup`` says ``scan``). The index learns the new rows at the commit, as for
every Spark write: the store's index hook reads the ids of the files Spark wrote on
the driver (one id column of this batch's files). Rejects come back to the driver and
are saved there, as the local engine does. Not done yet: resume of a killed submit
(a rerun starts over; the killed run's branch is swept), batched gets against a cluster
id index (HBase), and index entries written by the executors.

Example (what ``omni submit web crawl/ --batch cc --engine spark --spark-master
spark://host:7077`` runs)::

    from omni_iceberg.engines import lookup
    with lookup("ingest", "spark")(omni.context, master="spark://host:7077") as engine:
        engine.check()
        report = engine.submit("web", ["crawl/"], "cc")
"""

from __future__ import annotations

import os
import pickle
import re
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa

from catalog_ext.contract import (BATCH_COLUMN, ID_COLUMN, RAW_CONTENT_FIELD, RAW_STAGE, check_batch_name,
                                  split_qualified)
from catalog_ext.errors import OmniError, SchemaConflictError, SourceError
from catalog_ext.physical import arrow_type
from catalog_ext.staging import sweep_stale_branches
from omni_iceberg.ingest import fields as F
from omni_iceberg.ingest import pipeline as P
from omni_iceberg.ingest.dedup import BatchIds
from omni_iceberg.ingest.recheck import WinnerCheck
from omni_iceberg.ingest.sources import READERS, iter_sources, reader_for
from omni_iceberg.ingest.sources.files import ReadPolicy, SourceFile, source_files
from omni_iceberg.ingest.sources.records import RecordProblem, SourceBlock
from spark_udfs.engine import SparkSessionOwner, check_master_reachable, session_conf, ship_python_path

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

#: the snapshot property labelling the branch snapshot Spark's append made (StagedWrite.attach reads it)
LABEL = "omni.ingest-part"
#: a read job has one task per file up to this many tasks per core Spark has, then groups of files
TASKS_PER_CORE = 4
#: ... and at least one task per this many bytes of input
GROUP_BYTES = 128 << 20
#: the columns of the first job's rows: (file index, "rows" or "summary", payload)
_READ_SCHEMA = "file INT, kind STRING, payload BINARY"
_FILE_COLUMN = "_omni_file"
#: the decoding job takes one chunk (up to CHUNK_ROWS rows, CHUNK_BYTES of text) per Arrow batch, not 10,000
_DECODE_CONF = {"spark.sql.execution.arrow.maxRecordsPerBatch": "1"}
_READERS = {r.kind: r for r in READERS}
#: an error of the core a task raised, as a Python worker's traceback prints it
_CORE_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?(SourceError|SchemaConflictError): (.*)$", re.MULTILINE)


class SparkIngestError(OmniError):
    """A Spark ingest job failed for a reason other than the input (which ends as rejects)."""

    exit_code = 5


@dataclass(frozen=True)
class FileTask:
    """One source file of the batch: its place in the batch's file order, its reader, the file,
    and its size on disk when listed (what groups small files into one task)."""

    index: int
    kind: str
    file: SourceFile
    size: int = 0


@dataclass(frozen=True)
class IngestJob:
    """What every task of one submit shares (broadcast once)."""

    logical_table: str
    batch: str
    submit_id: str
    field_map: dict[str, str]
    table_types: dict[str, str]
    dedup: bool
    policy: ReadPolicy
    chunk_rows: int
    chunk_bytes: int
    block_rows: int
    #: TEST HOOK, None outside the fault tests: a marker file; see :func:`_test_kill_once`
    test_kill_marker: str | None = None


@dataclass
class FileResult:
    """A task's summary of one file (the rows travel apart, as Arrow chunks)."""

    index: int
    read: int = 0
    duplicates: int = 0
    rejected: int = 0
    rows: int = 0
    rejects: list[dict[str, Any]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    #: types beyond the table's the task was given (what earlier files learned), and those it learned
    given: dict[str, str] = field(default_factory=dict)
    learned: dict[str, str] = field(default_factory=dict)
    #: every field whose type the pipeline asked about
    asked: set[str] = field(default_factory=set)
    #: fields of the rows it returned, first seen first
    fields: list[str] = field(default_factory=list)


class _Types(dict):
    """The field types a task runs with, noting each field the pipeline asks about: where a
    file asked about a field an earlier file typed, its outcome may depend on that type."""

    def __init__(self, types: dict[str, str]):
        super().__init__(types)
        self.asked: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.asked.add(key)  # type: ignore[arg-type]
        return super().__contains__(key)


# ---- in a Spark task ---------------------------------------------------------------------------
def read_file(job: IngestJob, task: FileTask, given: dict[str, str]) -> Iterator[tuple[str, bytes]]:
    """("rows", Arrow IPC chunk)... then ("summary", pickled FileResult) for one file: the local
    engine's loop over a source stream (``pipeline.submit``), without the writes and without
    the check against earlier batches."""
    types = _Types({**job.table_types, **given})
    result = FileResult(task.index, given=dict(given))
    report = P.SubmitReport(logical_table=job.logical_table, batch=job.batch, submit_id=job.submit_id)
    state = SimpleNamespace(table=SimpleNamespace(identifier=job.logical_table))  # all reject() reads of it
    rejects: list[dict[str, Any]] = []
    seen = BatchIds() if job.dedup else None  # this file's ids; other files are Spark's to compare
    chunk, pending = P.Chunk(), P.Pending()
    out_fields: dict[str, None] = {}

    def take(item: Any) -> None:
        record, problem = P.map_record(item, job.field_map, types)
        if problem is not None:
            P.reject(report, rejects, problem, job.batch, state)
            return
        pending.add(record, record[RAW_CONTENT_FIELD])

    def emit(done: Any) -> bytes | None:
        if not len(done):
            return None
        names = [f for f in done.fields() if dict.get(types, f)]
        out_fields.update(dict.fromkeys(names))
        ids = pa.chunked_array([pa.array(done.ids, pa.string()), *(b for b, _ in done.blocks)], pa.string())
        columns = [pa.chunked_array(done.parts(f, arrow_type(dict.get(types, f)))) for f in names]
        table = pa.Table.from_arrays([ids, *columns], names=[ID_COLUMN, *names])
        result.rows += table.num_rows
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
        return sink.getvalue().to_pybytes()

    reader = _READERS[task.kind]
    if job.block_rows and hasattr(reader, "read_blocks"):
        items = reader.read_blocks(task.file, job.block_rows, job.policy)
    else:
        items = reader.read(task.file, job.policy)
    try:
        for item in items:
            report.read += len(item) if isinstance(item, SourceBlock) else 1
            if isinstance(item, RecordProblem):
                P.reject(report, rejects, item, job.batch, state)
                continue
            if isinstance(item, SourceBlock):
                P.settle(pending, chunk, job.dedup, seen, report)
                if len(chunk) and len(chunk) + len(item) > job.chunk_rows:
                    payload, chunk = emit(chunk), P.Chunk()
                    if payload is not None:
                        yield "rows", payload
                mapped = P.map_block(item, job.field_map, types)
                if mapped is None:  # a per-record decision is needed: the same lines, one by one
                    for one in item.records():
                        if isinstance(one, RecordProblem):
                            P.reject(report, rejects, one, job.batch, state)
                        else:
                            take(one)
                else:
                    P.take_block(item, mapped, job.field_map, job.dedup, seen, chunk, report, rejects, job.batch,
                                 state)
            else:
                take(item)
            if len(chunk) + len(pending) >= job.chunk_rows or chunk.bytes + pending.bytes >= job.chunk_bytes:
                P.settle(pending, chunk, job.dedup, seen, report)
                if len(chunk) >= job.chunk_rows or chunk.bytes >= job.chunk_bytes:
                    payload, chunk = emit(chunk), P.Chunk()
                    if payload is not None:
                        yield "rows", payload
        P.settle(pending, chunk, job.dedup, seen, report)
        payload = emit(chunk)
        if payload is not None:
            yield "rows", payload
    finally:
        if seen is not None:
            seen.close()
    result.read, result.duplicates, result.rejected = report.read, report.duplicates, report.rejected
    result.rejects, result.messages = rejects, report.reject_messages
    result.learned = {k: v for k, v in types.items() if k not in job.table_types and k not in given}
    result.asked, result.fields = set(types.asked), list(out_fields)
    yield "summary", pickle.dumps(result)


def _test_kill_once(marker: str | None) -> None:
    """TEST HOOK of the fault tests (``IngestJob.test_kill_marker``, None otherwise: nothing runs).
    The first task to claim the marker file - by removing it, which only one remover can - ends
    its Python worker at once, midway through its output, as a killed executor loses a task.
    Spark then runs the task again; the marker is gone, so the retry goes through."""
    if marker is None:
        return
    try:
        os.remove(marker)
    except FileNotFoundError:
        return
    os._exit(17)


def _read_partition(shared: Any, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the first job: each input row names one file (and the types it is given)."""
    job = shared.value
    schema = pa.schema([("file", pa.int32()), ("kind", pa.string()), ("payload", pa.binary())])
    for rb in batches:
        for group in rb.column(0).to_pylist():
            for task, given in pickle.loads(group):  # the files of one task, in batch order
                for kind, payload in read_file(job, task, given):
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([task.index], pa.int32()), pa.array([kind]), pa.array([payload], pa.binary())],
                        schema=schema)
                    if kind == "rows":
                        _test_kill_once(job.test_kill_marker)


def _decode_partition(columns: list[tuple[str, str]], batch: str,
                      batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of the second job: Arrow chunks of rows -> (id, batch, RawData struct, file index),
    the struct in the table's field order (a field a chunk lacks is null)."""
    struct = pa.struct([pa.field(n, arrow_type(t)) for n, t in columns])
    for rb in batches:
        files, payloads = rb.column(0).to_pylist(), rb.column(1)
        for k, file_index in enumerate(files):
            table = pa.ipc.open_stream(payloads[k].as_buffer()).read_all()
            n = table.num_rows
            parts = [table.column(name).cast(typ.type).combine_chunks() if name in table.column_names
                     else pa.nulls(n, typ.type) for name, typ in zip(struct.names, struct)]
            raw = pa.StructArray.from_arrays(parts, fields=list(struct)) if parts else pa.nulls(n, struct)
            yield pa.RecordBatch.from_arrays(
                [table.column(ID_COLUMN).combine_chunks(), pa.array([batch] * n, pa.string()), raw,
                 pa.array([file_index] * n, pa.int32())],
                names=[ID_COLUMN, BATCH_COLUMN, RAW_STAGE, _FILE_COLUMN])


# ---- on the driver ---------------------------------------------------------------------------------
def plan_files(sources: list[str], kind: str | None, policy: ReadPolicy) -> list[FileTask | RecordProblem]:
    """Every file the readers would read, in the order they would read them, and each entry the
    listing rules refuse (a reject), in place. Per file: nothing is opened."""
    out: list[FileTask | RecordProblem] = []
    for path in sources:
        reader = reader_for(path, kind)
        for found in source_files(path, reader.suffixes, policy):  # type: ignore[attr-defined]
            out.append(found if isinstance(found, RecordProblem) else
                       FileTask(len(out), reader.kind, found, _size(found)))
    return out


def _size(file: SourceFile) -> int:
    try:
        return os.stat(file.target).st_size
    except OSError:
        return 0  # the reader makes it a reject


def group_files(todo: list[Any], slots: int, group_bytes: int | None = None) -> list[list[Any]]:
    """``todo`` ((FileTask, given) pairs in batch order) cut into consecutive groups, one Spark task
    each: one file a task up to ``slots`` files, then about equal bytes a task, with as many tasks
    as ``slots`` or as ``group_bytes`` (:data:`GROUP_BYTES`) of input need, whichever is more.
    A folder of many small pages is then a few tasks, not one per page."""
    if len(todo) <= slots:
        return [[one] for one in todo]
    wanted = min(len(todo), max(slots, -(-sum(t.size for t, _ in todo) // (group_bytes or GROUP_BYTES))))
    # a file weighs its bytes plus one (opening a file costs something too, and empty files
    # must still spread). A group closes once it holds its share of what is left, so a big
    # file does not leave the small ones after it bunched in a few tasks
    weights = [t.size + 1 for t, _ in todo]
    groups: list[list[Any]] = []
    current: list[Any] = []
    held, left = 0, sum(weights)
    for one, weight in zip(todo, weights):
        open_groups = wanted - len(groups)
        if current and open_groups > 1 and held + weight / 2 > (held + left) / open_groups:
            groups.append(current)
            current, held = [], 0
        current.append(one)
        held += weight
        left -= weight
    return groups + [current]


def refuse_url_sources(sources: list[str]) -> None:
    """A SourceError naming the first ``s3://`` (or other URL) source: the readers open local paths
    only, and alone would say "source not found: s3:/lake/..." (a path that was never given)."""
    for path in sources:
        if "://" in path:
            raise SourceError(
                f"source {path}: omni submit reads local or shared-folder paths only, on either engine; "
                "s3:// and other URL sources are not supported yet - mount the bucket on every machine "
                "(the driver and the executors) and submit the mounted folder")


def source_bytes(sources: list[str], kind: str | None = None, follow_links: bool = False) -> int:
    """What the files of ``sources`` weigh on disk (``--engine auto``'s measure)."""
    refuse_url_sources(sources)
    return sum(e.size for e in plan_files(sources, kind, ReadPolicy(follow_links=follow_links))
               if isinstance(e, FileTask))


def check_map_on_first_records(sources: list[str], kind: str | None, field_map: dict[str, str],
                               policy: ReadPolicy, block_rows: int) -> None:
    """The local engine's ``--map`` check (:class:`~omni_iceberg.ingest.fields.MapCheck`), reading
    only the batch's first records: a misspelt source field stops the batch before any task."""
    check = F.MapCheck(field_map)
    if not check.unseen:
        return
    items = iter_sources(sources, kind, block_rows=block_rows, policy=policy)
    try:
        for item in items:
            if isinstance(item, RecordProblem):
                continue
            check.see(P.field_names(item), len(item) if isinstance(item, SourceBlock) else 1)
            if not check.unseen:
                return
    finally:
        items.close()
    check.check()


def _valid(result: FileResult, prefix: dict[str, str], table_types: dict[str, str]) -> bool:
    """Whether a file's outcome is the one the local engine has, where the files before it
    typed the fields of ``prefix``: it was given exactly those it asked about, and any it
    asked about without being given was either untyped before it or learned as the same type."""
    for name in result.asked:
        if name in table_types:
            continue
        if name in result.given:
            if prefix.get(name) != result.given[name]:
                return False
        elif name in prefix and result.learned.get(name) != prefix[name]:
            return False
    return True


class _BranchIds:
    """The batch's ids for the race re-check (:class:`~omni_iceberg.ingest.recheck.WinnerCheck`),
    read from the files Spark staged only if a concurrent submit won the commit race."""

    def __init__(self, writer: Any, rows: int):
        self.writer, self.rows = writer, rows
        self._ids: BatchIds | None = None

    def __len__(self) -> int:
        return self.rows if self._ids is None else len(self._ids)

    def _load(self) -> BatchIds:
        if self._ids is None:
            from catalog_ext.iceberg_io import read_data_files

            self._ids = BatchIds()
            table = self.writer.catalog.load_table(self.writer.identifier)
            for data_file in self.writer.data_files:
                self._ids.add(read_data_files(table, [data_file], (ID_COLUMN,)).column(0))
        return self._ids

    def contains(self, ids: Any) -> Any:
        return self._load().contains(ids)

    def discard(self, ids: Any) -> None:
        self._load().discard(ids)

    def close(self) -> None:
        if self._ids is not None:
            self._ids.close()


class SparkIngest(SparkSessionOwner):
    """Runs ``omni submit`` on the session :class:`~spark_udfs.engine.SparkSessionOwner` holds."""

    name = "spark"

    def __init__(self, ctx: OmniContext, *, spark: Any = None, master: str | None = None, **options: Any):
        options.pop("app_name", None)
        super().__init__(ctx.config, spark=spark, master=master, **options)
        self.ctx = ctx
        #: Spark tasks and files of each read job (a second job reads some files again)
        self.tasks: list[int] = []
        self.files: list[int] = []
        #: TEST HOOK, None outside the fault tests (see :func:`_test_kill_once`)
        self.test_kill_marker: str | None = None

    def check(self) -> None:
        """Fail before any work when the master does not answer (a ConfigError, exit 2)."""
        check_master_reachable(self.master)

    def source_bytes(self, sources: list[str], kind: str | None = None, follow_links: bool = False) -> int:
        return source_bytes(sources, kind, follow_links)

    def submit(self, name: str, sources: list[str], batch: str, *, field_map: dict[str, str] | list[str] | None = None,
               kind: str | None = None, max_reject_ratio: float | None = None, command: str = "",
               follow_links: bool = False, chunk_rows: int = P.CHUNK_ROWS,
               chunk_bytes: int = P.CHUNK_BYTES) -> P.SubmitReport:
        """Ingest ``sources`` as batch ``batch`` of ``name``: the local engine's outcome (see module doc)."""
        started = time.perf_counter()
        store = self.ctx.store
        namespace, table_name_ = split_qualified(name)
        sources = [str(s) for s in sources]
        command = command or f"submit {namespace}.{table_name_} --batch {batch}"
        check_batch_name(batch)
        policy = ReadPolicy(follow_links=follow_links)
        field_map = F.parse_field_map(field_map)
        state, report = P.open_report(store, namespace, table_name_, batch)
        if report.already_committed:
            return report
        refuse_url_sources(sources)
        for path in sources:  # fail before any work when a source is missing or unknown
            reader_for(path, kind)
        sweep_stale_branches(store.catalog, state, table_keys=[state.base_table.key])
        types = P.raw_field_types(state)
        P.check_declared_schemas(sources, field_map, types, state, policy)
        block_rows = min(P.BLOCK_ROWS, chunk_rows)
        check_map_on_first_records(sources, kind, field_map, policy, block_rows)
        entries = plan_files(sources, kind, policy)
        tasks = [e for e in entries if isinstance(e, FileTask)]
        known_fields = {c.leaf for c in state.stage_fields(RAW_STAGE) if state.physical_columns_of(c.path)}
        dedup = state.table.id_mode == "md5"
        base = state.base_table
        job = IngestJob(state.table.identifier, batch, report.submit_id, field_map, dict(types), dedup, policy,
                        chunk_rows, chunk_bytes, block_rows, self.test_kill_marker)
        spark = self.spark  # a cluster without executors fails here, before the write is opened
        ship_python_path(spark)
        writer = store.staged_write(state, base.identifier, base.snapshot_id, report.submit_id,
                                    {"omni.operation": "ingest", "omni.batch": batch,
                                     "omni.submit-id": report.submit_id})
        cached: list[Any] = []
        rejects: list[dict[str, Any]] = []
        check = None
        try:
            results, frames = self._read(spark, job, tasks, cached)
            final_types = self._merge(report, rejects, entries, results, job, types)
            P.save_rejects(store, rejects)
            P.check_outcome(report, sources, batch, state, max_reject_ratio)
            new = [f for f in dict.fromkeys(f for t in tasks for f in results[t.index].fields)
                   if f not in known_fields and final_types.get(f)]
            if new:
                P.add_raw_fields(writer, new, final_types)
                report.new_fields += new
            emitted = sum(results[t.index].rows for t in tasks)
            rows = self._rows(spark, frames, writer, state, batch, dedup) if emitted else None
            if rows is not None:
                rows = rows.persist()
                cached.append(rows)
                with session_conf(spark, _DECODE_CONF):
                    report.written = rows.count()
            report.duplicates += emitted - report.written
            if dedup and state.batches:
                report.dedup = "scan"
            if not report.written:  # every record is already in the table or earlier in this batch
                P.abandon(writer)
                report.seconds = round(time.perf_counter() - started, 3)
                return report
            with session_conf(spark, _DECODE_CONF):
                self._stage(spark, rows, writer, state)
            # the ids the race re-check needs are read back only if the commit is lost
            ids = _BranchIds(writer, report.written)
            check = WinnerCheck(ids, base.snapshot_id) if dedup else None  # type: ignore[arg-type]
            new_state = P.commit_batch(store, namespace, table_name_, writer, report, batch, sources, final_types,
                                       command, check)
        except BaseException as e:
            P.abandon(writer)
            translated = _translate(e)
            if translated is e:
                raise
            raise translated from e
        finally:
            for df in cached:
                df.unpersist()
            if check is not None:
                check.staged_ids.close()
        report.logical_version = new_state.version
        report.seconds = round(time.perf_counter() - started, 3)
        return report

    # ---- steps -------------------------------------------------------------------------------------
    def _read(self, spark: Any, job: IngestJob, tasks: list[FileTask], cached: list[Any]
              ) -> tuple[dict[int, FileResult], list[tuple[Any, list[int]]]]:
        """Every file's summary, and (frame of row chunks, files whose rows to take from it).

        The first job reads every file knowing only the table's types; then, walking the files
        in order, a file whose outcome would differ under the types the files before it learned
        (:func:`_valid`) is read again, given them. Each round settles at least the first such
        file, so this ends; input whose files agree on new fields' types needs one round."""
        results: dict[int, FileResult] = {}
        frames: list[tuple[Any, list[int]]] = []
        todo = [(t, {}) for t in tasks]
        while todo:
            frame = self._read_job(spark, job, todo)
            cached.append(frame)
            for (file_index, payload) in frame.where("kind = 'summary'").select("file", "payload").collect():
                results[file_index] = pickle.loads(payload)
            frames.append((frame, [t.index for t, _ in todo]))
            prefix: dict[str, str] = {}
            todo = []
            for t in tasks:
                r = results[t.index]
                if not _valid(r, prefix, job.table_types):
                    todo.append((t, dict(prefix)))
                for k, v in {**r.given, **r.learned}.items():
                    prefix.setdefault(k, v)
        # the last frame a file was read in holds its rows
        last: dict[int, int] = {}
        for k, (_, indices) in enumerate(frames):
            last.update(dict.fromkeys(indices, k))
        return results, [(frame, [i for i, k2 in last.items() if k2 == k]) for k, (frame, _) in enumerate(frames)]

    def _read_job(self, spark: Any, job: IngestJob, todo: list[tuple[FileTask, dict[str, str]]]) -> Any:
        """One Spark task per file of ``todo``: its rows and summary, persisted (read once)."""
        from pyspark import StorageLevel

        sc = spark.sparkContext
        shared = sc.broadcast(job)
        groups = group_files(todo, TASKS_PER_CORE * max(1, sc.defaultParallelism))
        self.tasks.append(len(groups))
        self.files.append(len(todo))
        specs = [(pickle.dumps(group),) for group in groups]
        files = spark.createDataFrame(sc.parallelize(specs, len(specs)), "task BINARY")  # one group a task
        return files.mapInArrow(lambda batches: _read_partition(shared, batches), _READ_SCHEMA).persist(
            StorageLevel.MEMORY_AND_DISK)

    def _merge(self, report: P.SubmitReport, rejects: list[dict[str, Any]], entries: list[Any],
               results: dict[int, FileResult], job: IngestJob, types: dict[str, str]) -> dict[str, str]:
        """Counts, rejects and messages in source order (listing refusals in place); the batch's types."""
        final = dict(types)
        state = SimpleNamespace(table=SimpleNamespace(identifier=job.logical_table))
        for entry in entries:
            if isinstance(entry, RecordProblem):  # the local reader yields it where the walk finds it
                report.read += 1
                P.reject(report, rejects, entry, job.batch, state)
                continue
            r = results[entry.index]
            report.read += r.read
            report.duplicates += r.duplicates
            report.rejected += r.rejected
            rejects += r.rejects
            room = P.MAX_REJECT_MESSAGES - len(report.reject_messages)
            report.reject_messages += r.messages[:max(0, room)]
            for k, v in {**r.given, **r.learned}.items():
                final.setdefault(k, v)
        return final

    def _rows(self, spark: Any, frames: list[tuple[Any, list[int]]], writer: Any, state: Any, batch: str,
              dedup: bool) -> Any:
        """The batch's rows as the table stores them, without duplicates (first file kept) and
        without the ids the table already holds."""
        from pyspark.sql import Window
        from pyspark.sql import functions as Fn
        from pyspark.sql import types as T

        from spark_udfs.engine import table_name

        catalog = self.ctx.config.catalog_name
        iceberg = writer.catalog.load_table(writer.identifier)
        columns = [(f.name, str(f.field_type)) for f in iceberg.schema().find_field(RAW_STAGE).field_type.fields]
        target = spark.read.table(table_name(catalog, writer.identifier)).schema
        out = T.StructType([T.StructField(ID_COLUMN, T.StringType(), False),
                            T.StructField(BATCH_COLUMN, T.StringType(), False),
                            T.StructField(RAW_STAGE, target[RAW_STAGE].dataType, True),
                            T.StructField(_FILE_COLUMN, T.IntegerType(), False)])
        chunks = None
        for frame, indices in frames:
            if indices:
                part = frame.where((Fn.col("kind") == "rows") & Fn.col("file").isin(indices)).select("file", "payload")
                chunks = part if chunks is None else chunks.unionByName(part)
        rows = chunks.mapInArrow(lambda batches: _decode_partition(columns, batch, batches), out)
        if dedup:
            first = Window.partitionBy(ID_COLUMN).orderBy(_FILE_COLUMN)
            rows = rows.withColumn("_omni_rank", Fn.row_number().over(first)).where("_omni_rank = 1")
            if state.batches:
                base = state.base_table
                held = (spark.read.option("snapshot-id", str(base.snapshot_id))
                        .table(table_name(catalog, base.identifier)).select(ID_COLUMN))
                rows = rows.join(held, ID_COLUMN, "left_anti")
        present = {ID_COLUMN: Fn.col(ID_COLUMN), BATCH_COLUMN: Fn.col(BATCH_COLUMN), RAW_STAGE: Fn.col(RAW_STAGE)}
        return rows.select(*[present[f.name] if f.name in present else Fn.lit(None).cast(f.dataType).alias(f.name)
                             for f in target.fields])

    def _stage(self, spark: Any, rows: Any, writer: Any, state: Any) -> None:
        """Append ``rows`` to the write's staging branch, clustered by id bucket; learn its files."""
        from pyspark.sql import functions as Fn

        from spark_udfs.engine import branch_writer

        catalog = self.ctx.config.catalog_name
        buckets = int(writer.bucket_count or state.table.bucket_count)
        bucket = Fn.expr(f"`{catalog}`.system.bucket({buckets}, `{ID_COLUMN}`)")
        clustered = rows.repartition(min(buckets, 200), bucket).sortWithinPartitions(bucket, ID_COLUMN)
        writer.ensure_branch()
        branch_writer(clustered, catalog, writer, {LABEL: "spark"}).append()
        labels = writer.attach(LABEL)  # the branch's files and head, checked to start at the write's base
        if len(labels) != 1 or writer.staged_snapshot_id is None:
            raise SparkIngestError(
                f"the Spark append to {writer.identifier} did not land alone on branch {writer.branch} "
                f"({len(labels)} labelled snapshots); another writer is using the branch - nothing was committed, "
                "run the submit again")


def _translate(error: BaseException) -> BaseException:
    """A core error a task raised, as that error; another Spark failure as a SparkIngestError."""
    if not type(error).__module__.startswith(("py4j", "pyspark")):
        return error
    text = str(error)
    found = _CORE_ERROR.findall(text)
    if found:
        kind, message = found[-1]
        return (SourceError if kind == "SourceError" else SchemaConflictError)(message.strip())
    first = next((line for line in text.splitlines() if "Error" in line or "Exception" in line), text[:500])
    return SparkIngestError(f"the Spark ingest job failed: {first.strip()[:500]}; nothing was committed")


def spark_ingest(ctx: OmniContext, *, master: str | None = None, spark: Any = None, **options: Any) -> SparkIngest:
    """The ``ingest`` capability: a :class:`SparkIngest` on ``master`` (or the session ``spark``)."""
    return SparkIngest(ctx, spark=spark, master=master, **options)
