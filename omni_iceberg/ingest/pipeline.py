"""``omni submit``: stream sources into a logical table as one atomic batch.

read -> map fields -> id -> dedup -> write data files (chunk by chunk) -> stage on a
private branch -> ONE logical commit. Until that commit nothing of the batch is
visible through the logical view; a failure at any point leaves the table as it was.
Records that cannot be ingested are counted and kept in ``omni_sys.rejects``.

What is a reject and what stops the batch:

- one record that cannot be stored as it is (bad JSON or UTF-8, a lone surrogate,
  an integer past 64 bits, two fields landing in one column, a type clash) is a
  reject naming file, line/offset and field; the rest of the batch lands;
- a file that breaks while being read (truncated Parquet, gzip or WARC) is one
  reject at the place it broke, and the other files of the batch still land;
- a file of a folder that is not a regular file (a FIFO would block the submit), a
  link leading out of the folder (without ``follow_links``), a document over
  ``OMNI_MAX_DOCUMENT_BYTES`` or a line or response over ``OMNI_MAX_RECORD_BYTES``
  is one reject naming it, and is never opened or never held whole (see
  :mod:`.sources.files`);
- input with no records at all, or whose every record is rejected, commits
  nothing and leaves the batch name free (exit 2 and 4), so the corrected
  resubmit is not answered with "already committed";
- input whose every record is a duplicate commits nothing either (no empty
  batch, no version): the report says so and the command succeeds;
- a ``--map`` of a field that none of the first records has stops the batch
  with one error naming the closest field there is (exit 2, nothing committed,
  no rejects stored).

Every reject row carries the ``submit_id`` of its attempt; the committed batch
records its own in the version summary (``omni.submit-id``), so rejects of a failed
attempt are never counted as the batch's (see :mod:`.rejects`).

Ids of md5 tables stay unique across concurrent submits: a submit that loses the
commit race re-checks its ids against what the winners added (see :mod:`.recheck`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext import system_tables
from catalog_ext.contract import RAW_CONTENT_FIELD, RAW_CONTENT_TYPE_FIELD, RAW_STAGE, check_batch_name
from catalog_ext.family import Batch, FamilyState, LogicalColumn, PhysicalColumn
from catalog_ext.physical import StagedWrite, arrow_type, iceberg_type, key_arrow_fields, write_buffer_bytes
from catalog_ext.staging import sweep_stale_branches
from catalog_ext.store import FamilyStore
from catalog_ext.updates import AddBatch, AddLogicalColumns, AddPhysicalColumns, PinSnapshot
from catalog_ext.errors import RejectLimitExceededError, SchemaConflictError, SourceError
from omni_iceberg.ingest import fields as F
from omni_iceberg.ingest.dedup import BatchIds, ExistingIds
from omni_iceberg.ingest.identity import content_ids, random_id
from omni_iceberg.ingest.overlap import BackgroundWrites, ReadAhead
from omni_iceberg.ingest.recheck import WinnerCheck
from omni_iceberg.ingest.sources import iter_sources, reader_for
from omni_iceberg.ingest.sources.files import ReadPolicy, open_file, source_files
from omni_iceberg.ingest.sources.records import RecordProblem, SourceBlock, SourceRecord
from omni_iceberg.ingest.sources.tabular import PARQUET_SUFFIXES
from omni_iceberg.ui.progress import progress_bar

CHUNK_ROWS = 20_000
#: JSONL lines parsed together by Arrow (the fast path, see sources.jsonl); 0 = line by line
BLOCK_ROWS = 10_000
CHUNK_BYTES = 32 * 1024 * 1024
#: what the reading thread may hold ahead of the pipeline (two JSONL blocks at their largest)
READ_AHEAD_BYTES = 16 * 1024 * 1024
#: rows (in the write's weighing) waiting for the writing thread; None: half the write's own buffer
WRITE_QUEUE_BYTES: int | None = None
MAX_REJECT_MESSAGES = 20


@dataclass
class SubmitReport:
    """What ``omni submit --json`` prints."""

    logical_table: str
    batch: str
    read: int = 0
    written: int = 0
    duplicates: int = 0
    rejected: int = 0
    logical_version: int | None = None
    already_committed: bool = False
    submit_id: str = ""
    seconds: float = 0.0
    new_fields: list[str] = field(default_factory=list)
    reject_messages: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: how earlier batches were checked for duplicates: "index", "scan" or "none" (see ingest.dedup)
    dedup: str = "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Chunk:
    """Rows accepted for one chunk: per-record values, and whole Arrow blocks (kept as they were
    read: the chunk's table is made of them, not of copies)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.values: dict[str, list[Any]] = {}
        self.bytes = 0
        #: (ids, columns named by target field) of blocks taken whole (the JSONL fast path)
        self.blocks: list[tuple[pa.Array, pa.Table]] = []

    def add(self, rid: str, record: dict[str, Any], size: int) -> None:
        n = len(self.ids)
        for name, value in record.items():
            col = self.values.get(name)
            if col is None:
                col = self.values[name] = [None] * n
            col.append(value)
        self.ids.append(rid)
        for col in self.values.values():
            if len(col) <= n:
                col.append(None)
        self.bytes += size

    def add_block(self, ids: pa.Array, columns: pa.Table, size: int) -> None:
        self.blocks.append((ids, columns))
        self.bytes += size

    def fields(self) -> list[str]:
        """Names of the fields any row of the chunk has, in first-seen order."""
        return list(dict.fromkeys([*self.values, *(n for _, cols in self.blocks for n in cols.column_names)]))

    def all_ids(self) -> list[str]:
        return self.ids + [rid for ids, _ in self.blocks for rid in ids.to_pylist()]

    def drop(self, ids: set[str]) -> int:
        """Remove the rows whose id is in ``ids``; return how many went."""
        keep = [i for i, rid in enumerate(self.ids) if rid not in ids]
        removed = len(self.ids) - len(keep)
        if removed:
            self.ids = [self.ids[i] for i in keep]
            self.values = {name: [col[i] for i in keep] for name, col in self.values.items()}
        blocks = []
        dropped = pa.array(list(ids), pa.string())
        for block_ids, columns in self.blocks:
            kept = np.flatnonzero(~pc.is_in(block_ids, value_set=dropped).to_numpy(zero_copy_only=False))
            removed += len(block_ids) - len(kept)
            if len(kept) < len(block_ids):
                taken = pa.array(kept, pa.int64())
                block_ids, columns = block_ids.take(taken), columns.take(taken)
            blocks.append((block_ids, columns))
        self.blocks = blocks
        return removed

    def parts(self, name: str, typ: pa.DataType) -> list[pa.Array]:
        """One field's values: the per-record rows' array, then one array per block (nulls where
        the block lacks the field)."""
        parts = [pa.array(self.values.get(name, [None] * len(self.ids)), type=typ)]
        for block_ids, columns in self.blocks:
            parts.append(_one_chunk(columns.column(name)).cast(typ) if name in columns.column_names
                         else pa.nulls(len(block_ids), typ))
        return parts

    def __len__(self) -> int:
        return len(self.ids) + sum(len(ids) for ids, _ in self.blocks)


class _Pending:
    """Per-record rows whose ids are still to be made, in arrival order: ids are computed and
    checked against the batch many rows at a time (:func:`_settle`)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.raws: list[str] = []
        self.bytes = 0

    def clear(self) -> None:
        self.records, self.raws, self.bytes = [], [], 0

    def add(self, record: dict[str, Any], raw: str) -> None:
        self.records.append(record)
        self.raws.append(raw)
        self.bytes += len(raw)

    def __len__(self) -> int:
        return len(self.records)


def submit(
    store: FamilyStore,
    namespace: str,
    name: str,
    sources: list[str],
    batch: str,
    *,
    field_map: dict[str, str] | None = None,
    kind: str | None = None,
    max_reject_ratio: float | None = None,
    command: str = "",
    progress: bool | None = None,
    chunk_rows: int = CHUNK_ROWS,
    chunk_bytes: int = CHUNK_BYTES,
    follow_links: bool = False,
    spill_dir: str | None = None,
) -> SubmitReport:
    """Ingest ``sources`` as batch ``batch`` of ``namespace.name``; see module docstring.

    ``follow_links`` reads symbolic links in a submitted folder that lead out of it
    (refused by default, see :mod:`.sources.files`). ``spill_dir``: where dedup's ids go
    beyond ``OMNI_MEMORY_LIMIT_MB`` (the home's ``spill/``; default: the system's temp folder).
    """
    started = time.perf_counter()
    check_batch_name(batch)
    policy = ReadPolicy(follow_links=follow_links)  # a malformed limit in the environment stops here
    field_map = F.parse_field_map(field_map)
    state, report = open_report(store, namespace, name, batch)
    if report.already_committed:
        return report
    for path in sources:  # fail before any write when a source is missing or unknown
        reader_for(path, kind)
    # leftovers of killed submits to this table (metadata only when there are none)
    sweep_stale_branches(store.catalog, state, table_keys=[state.base_table.key])

    types = _raw_field_types(state)
    _check_declared_schemas(sources, field_map, types, state, policy)
    # fields the base table's RawData struct holds; a field only declared (a feature reading
    # RawData.content_type before any batch had it) still needs its physical column
    known_fields = {c.leaf for c in state.stage_fields(RAW_STAGE) if state.physical_columns_of(c.path)}
    dedup = state.table.id_mode == "md5"
    existing = ExistingIds(store, state, spill_dir) if dedup else None
    if existing is not None:
        report.dedup = existing.method
        if existing.method == "scan" and store.open_index(state) is not None:
            report.warnings.append(f"dedup read every id of the table ({existing.reason}); "
                                   f"`omni index rebuild {state.table.identifier}` makes it an index lookup")
    staged_ids = BatchIds(spill_dir=spill_dir)  # ids of this batch: in-batch dedup, and the race re-check needs only these
    map_check = F.MapCheck(field_map)
    base = state.base_table
    writer = store.staged_write(state, base.identifier, base.snapshot_id, report.submit_id,
                                {"omni.operation": "ingest", "omni.batch": batch, "omni.submit-id": report.submit_id})
    # rows wait for the writing thread while it writes files (see .overlap)
    writes = BackgroundWrites(writer, WRITE_QUEUE_BYTES if WRITE_QUEUE_BYTES is not None else write_buffer_bytes() // 2)
    rejects: list[dict[str, Any]] = []
    chunk = _Chunk()
    pending = _Pending()
    bar = progress_bar(progress, f"ingest {name}/{batch}", "doc")

    def take(item: SourceRecord) -> None:
        record, problem = _map_record(item, field_map, types)
        if problem is not None:
            _reject(report, rejects, problem, batch, state)
            return
        pending.add(record, record[RAW_CONTENT_FIELD])

    def read() -> Iterator[tuple[Any, pa.Array | None]]:
        # in the reading thread: each block's content ids are computed there too (see _ids_ahead)
        for one in iter_sources(sources, kind, block_rows=min(BLOCK_ROWS, chunk_rows), policy=policy):
            yield one, (_ids_ahead(one, field_map) if dedup and isinstance(one, SourceBlock) else None)

    reading = ReadAhead(read, READ_AHEAD_BYTES, lambda pair: _item_bytes(pair[0]),
                        lambda pair: isinstance(pair[0], SourceBlock))
    try:
        for item, ids_ahead in reading:
            count = len(item) if isinstance(item, SourceBlock) else 1
            report.read += count
            if bar is not None:
                bar.update(count)
            if isinstance(item, RecordProblem):
                _reject(report, rejects, item, batch, state)
                continue
            if map_check.unseen:
                map_check.see(_field_names(item), count)
            if isinstance(item, SourceBlock):
                _settle(pending, chunk, dedup, staged_ids, report)  # rows keep their order; the size is exact
                if len(chunk) and len(chunk) + len(item) > chunk_rows:  # chunks stay within chunk_rows
                    _flush(writes, _without_existing(chunk, existing, staged_ids, report), batch, types,
                           known_fields, report)
                    chunk = _Chunk()
                mapped = _map_block(item, field_map, types)
                if mapped is None:  # a per-record decision is needed: the same lines, one by one
                    for one in item.records():
                        if isinstance(one, RecordProblem):
                            _reject(report, rejects, one, batch, state)
                        else:
                            take(one)
                else:
                    _take_block(item, mapped, field_map, dedup, staged_ids, chunk, report, rejects, batch, state,
                                ids_ahead)
            else:
                take(item)
            # duplicates among the pending rows only make the chunk smaller: it can be full
            # only once the rows it would have with all of them are enough
            if len(chunk) + len(pending) >= chunk_rows or chunk.bytes + pending.bytes >= chunk_bytes:
                _settle(pending, chunk, dedup, staged_ids, report)
                if len(chunk) >= chunk_rows or chunk.bytes >= chunk_bytes:
                    _flush(writes, _without_existing(chunk, existing, staged_ids, report), batch, types,
                           known_fields, report)
                    chunk = _Chunk()
        _settle(pending, chunk, dedup, staged_ids, report)
        map_check.check()  # input shorter than the records checked: its end decides
        _flush(writes, _without_existing(chunk, existing, staged_ids, report), batch, types, known_fields, report)
        reading.close()
        writes.wait()  # every row is with the writer: the commit (or abandoning it) may touch it now
        if bar is not None:
            bar.close()
        if existing is not None:
            existing.release()  # a scan's id set can be large; not needed past this point
        _save_rejects(store, rejects)
        _check_outcome(report, sources, batch, state, max_reject_ratio)
        if not report.written:  # every record is already in the table or earlier in this batch
            # an empty batch would still be a version, and a batch every plan and lineage lists
            _abandon(writer)
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        check = WinnerCheck(staged_ids, base.snapshot_id) if dedup else None
        new_state = _commit(store, namespace, name, writer, report, batch, sources, types, command, check)
    except BaseException:
        if bar is not None:
            bar.close()
        reading.close()
        writes.close()
        _abandon(writer)
        raise
    finally:
        reading.close()
        writes.close()
        staged_ids.close()  # spilled ids, if any: the race re-check ran inside the commit
        if existing is not None:
            existing.release()
    report.logical_version = new_state.version
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def open_report(store: FamilyStore, namespace: str, name: str, batch: str) -> tuple[FamilyState, SubmitReport]:
    """The table's state and the report of this submit attempt (a fresh ``submit_id``).

    A batch of that name already committed makes the resubmit a no-op on every engine: the
    report then says ``already_committed`` and carries the committed batch's counts.
    """
    state = store.load(namespace, name)
    report = SubmitReport(logical_table=state.table.identifier, batch=batch, submit_id=uuid.uuid4().hex[:16])
    committed = state.batch(batch)
    if committed is not None:
        report.already_committed = True
        report.logical_version = committed.version
        report.read, report.written = committed.read, committed.rows
        report.duplicates, report.rejected = committed.duplicates, committed.rejected
    return state, report


def _check_outcome(report: SubmitReport, sources: list[str], batch: str, state: FamilyState,
                   max_reject_ratio: float | None) -> None:
    """Refuse to commit a batch that would hold nothing but would use up its name."""
    where = ", ".join(str(s) for s in sources[:3]) + (f" (+{len(sources) - 3} more)" if len(sources) > 3 else "")
    if report.read == 0:
        raise SourceError(
            f"no records in {where}: nothing committed, and batch {batch!r} is still free; "
            "check the path and the source kind (--kind)"
        )
    see = f"See: omni rejects {state.table.identifier} --batch {batch}"
    if report.rejected == report.read:
        raise RejectLimitExceededError(
            f"batch {batch!r}: all {report.read} records rejected; nothing committed, and the batch name "
            f"is still free. {see}"
        )
    if max_reject_ratio is not None and report.rejected / report.read > max_reject_ratio:
        raise RejectLimitExceededError(
            f"batch {batch!r}: {report.rejected} of {report.read} records rejected "
            f"({report.rejected / report.read:.2%} > {max_reject_ratio:.2%}); nothing committed. {see}"
        )


# ---- steps ------------------------------------------------------------------------------

def _raw_field_types(state: FamilyState) -> dict[str, str]:
    return {c.leaf: c.type for c in state.stage_fields(RAW_STAGE)}


def _declared_columns(path: str, policy: ReadPolicy) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """(file, [(column, type or None)]) of each typed source file (Parquet); other formats declare none.

    The files are the ones the reader will read, found and opened under the same rules
    (no FIFO, no link out of the folder). A file refused by those rules, or whose footer
    cannot be read, is passed over here: the reader rejects it, naming the file, and the
    batch's other files still land.
    """
    import pyarrow.parquet as pq

    for f in source_files(path, PARQUET_SUFFIXES, policy):
        if isinstance(f, RecordProblem) or f.path.suffix != ".parquet":
            continue
        opened = open_file(f)
        if isinstance(opened, RecordProblem):
            continue
        try:
            with opened:
                schema = pq.read_schema(opened)
        except (pa.ArrowException, OSError):
            continue
        out = []
        for fld in schema:
            t = fld.type
            kind = ("string" if pa.types.is_string(t) or pa.types.is_large_string(t) else
                    "long" if pa.types.is_integer(t) else "double" if pa.types.is_floating(t) else
                    "boolean" if pa.types.is_boolean(t) else None)
            out.append((fld.name, kind))
        yield str(f), out


def _check_declared_schemas(sources: list[str], field_map: dict[str, str], types: dict[str, str],
                            state: FamilyState, policy: ReadPolicy) -> None:
    """A typed source whose columns contradict the table, or collide, is refused before anything is written."""
    for path in sources:
        for where, columns in _declared_columns(path, policy):
            clash = F.collision([c for c, _ in columns], field_map)
            if clash is not None:
                raise SchemaConflictError(f"{where}: " + F.collision_reason(*clash, field_map))
            for name, declared in columns:
                target = F.target_name(name, field_map)
                expected = types.get(target)
                if declared is None or expected is None or expected == declared or (
                        expected == "double" and declared == "long"):
                    continue
                raise SchemaConflictError(
                    f"{where}: column '{name}' is {declared}, but RawData.{target} of {state.table.identifier} is "
                    f"{expected}; rename it with --map {name}=NEW_NAME or convert the source"
                )


def _without_existing(chunk: _Chunk, existing: ExistingIds | None, staged_ids: BatchIds,
                      report: SubmitReport) -> _Chunk:
    """Drop the chunk's rows whose id an earlier batch holds (one bulk lookup per chunk)."""
    if existing is None or existing.method == "none" or not len(chunk):
        return chunk
    taken = existing.existing(chunk.all_ids())
    if taken:
        report.duplicates += chunk.drop(taken)
        staged_ids.discard(taken)
    return chunk


def _map_record(
    item: SourceRecord, field_map: dict[str, str], types: dict[str, str]
) -> tuple[dict[str, Any] | None, RecordProblem | None]:
    """Rename, normalise and type-check one record; a problem names file, line and field.

    Two source fields landing in one target (``raw-data`` next to ``raw_data``, or a
    mapped field next to a field already named like its target) reject the record:
    keeping either value would silently drop the other.
    """
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for key, value in item.fields.items():
        target = F.target_name(key, field_map)
        if target in origin:
            return None, _problem(item, F.collision_reason(origin[target], key, target, field_map), target)
        origin[target] = key
        try:
            out[target] = F.plain_value(value, binary=types.get(target) == "binary")
        except F.BadValue as e:
            return None, _problem(item, str(e), key)
    if item.content_type is not None and RAW_CONTENT_TYPE_FIELD not in out and _takes_content_type(types):
        out[RAW_CONTENT_TYPE_FIELD] = item.content_type  # the record's own content_type field wins
    raw = out.get(RAW_CONTENT_FIELD)
    if raw is None:
        return None, _problem(item, _missing_raw(field_map), RAW_CONTENT_FIELD)
    if not isinstance(raw, str):
        return None, _problem(item, f"raw content must be text, got {F.value_type(raw)}", RAW_CONTENT_FIELD)
    if not raw.strip():
        return None, _problem(item, "empty raw content", RAW_CONTENT_FIELD)
    for key, value in out.items():
        expected = types.get(key)
        if expected is None:
            continue
        ok, fitted = F.coerce(value, expected)
        if not ok:
            return None, _problem(item, f"expected {expected}, got {F.value_type(value)} {str(value)[:40]!r}", key)
        out[key] = fitted
    for key, value in out.items():  # fields first seen in this record fix their type now
        if key not in types and value is not None:
            types[key] = F.value_type(value)
    return out, None


#: column types of a block the pipeline takes whole, as the table's field types
_BLOCK_KINDS = {"string": "string", "int64": "long", "bool": "boolean"}


def _field_names(item: SourceRecord | SourceBlock) -> set[str]:
    return set(item.table.column_names) if isinstance(item, SourceBlock) else set(item.fields)


def _map_block(block: SourceBlock, field_map: dict[str, str], types: dict[str, str]) -> pa.Table | None:
    """The block's columns renamed to their fields and fitted to the table's types, or None
    when a record needs its own decision (see :class:`SourceBlock`).

    Column by column, the checks are :func:`_map_record`'s: two source fields landing in
    one field, or a column whose type the table's field cannot take, fall back; the raw
    content's checks are per row and stay in :func:`_take_block`. New fields take the
    column's type, as the first record holding them would.
    """
    names = block.table.column_names
    if F.collision(names, field_map) is not None:
        return None
    columns, fitted, learned = [], [], {}
    for source, column in zip(names, block.table.columns):
        target = F.target_name(source, field_map)
        kind = _BLOCK_KINDS.get(str(column.type))
        if kind is None:  # all null: nothing to store, no type to learn
            continue
        expected = types.get(target)
        if expected is None:
            learned[target] = kind
        elif expected != kind and not (expected == "double" and kind == "long"):
            return None
        if target == RAW_CONTENT_FIELD and kind != "string":
            return None
        columns.append(target)
        fitted.append(column.cast(pa.float64()) if expected == "double" else column)
    if (block.content_type is not None and _takes_content_type(types)
            and RAW_CONTENT_TYPE_FIELD not in {F.target_name(n, field_map) for n in names}):
        columns.append(RAW_CONTENT_TYPE_FIELD)  # as _map_record: only where no field lands there
        fitted.append(pa.array([block.content_type] * len(block), pa.string()))
        if RAW_CONTENT_TYPE_FIELD not in types:
            learned[RAW_CONTENT_TYPE_FIELD] = "string"
    types.update(learned)  # only once the whole block is taken
    return pa.Table.from_arrays(fitted, names=columns) if columns else pa.table({})


def _takes_content_type(types: dict[str, str]) -> bool:
    """Whether the reader's content type can be stored: not where the table's own data made
    ``RawData.content_type`` something other than text."""
    return types.get(RAW_CONTENT_TYPE_FIELD, "string") == "string"


def _settle(pending: _Pending, chunk: _Chunk, dedup: bool, staged_ids: BatchIds, report: SubmitReport) -> None:
    """Give the pending rows their ids and add them to the chunk in order; a row whose content
    this batch already holds is a duplicate (counted, not added).

    Earlier batches are asked once per chunk (:func:`_without_existing`), not per row.
    """
    if not len(pending):
        return
    if dedup:
        ids = content_ids(pending.raws)
        new = staged_ids.add(ids)
        report.duplicates += len(pending) - int(np.count_nonzero(new))
        rids = ids.to_pylist()
        for i in np.flatnonzero(new).tolist():
            chunk.add(rids[i], pending.records[i], len(pending.raws[i]))
    else:
        for record, raw in zip(pending.records, pending.raws):
            chunk.add(random_id(), record, len(raw))
    pending.clear()


def _ids_ahead(block: SourceBlock, field_map: dict[str, str]) -> pa.Array | None:
    """The content id of every row of the block's column that lands in the raw content, computed
    while the block is read (the reading thread has time to spare; the pipeline's own thread
    does the rest): what :func:`_take_block` would compute for the rows it keeps, since mapping
    a text column to ``raw_data`` only renames it. None where there is no such text column (the
    block then takes the per-record path or has no raw content). A null row is hashed as ""
    only to keep the rows aligned: it is a reject, its id is never used."""
    sources = [n for n in block.table.column_names if F.target_name(n, field_map) == RAW_CONTENT_FIELD]
    if len(sources) != 1:
        return None
    column = block.table.column(sources[0])
    if not pa.types.is_string(column.type) or not len(column):
        return None
    raws = _one_chunk(column)
    return content_ids(raws.fill_null("") if raws.null_count else raws)


def _take_block(block: SourceBlock, mapped: pa.Table, field_map: dict[str, str], dedup: bool, staged_ids: BatchIds,
                chunk: _Chunk, report: SubmitReport, rejects: list, batch: str, state: FamilyState,
                ids_ahead: pa.Array | None = None) -> None:
    """Add a mapped block's rows to the chunk: raw content checked per row, ids, in-batch dedup
    (column operations; only rows that may be blank are looked at one by one). ``ids_ahead``:
    the ids of every row, when :func:`_ids_ahead` computed them already."""
    n = len(block)
    raws = _one_chunk(mapped.column(RAW_CONTENT_FIELD)) if RAW_CONTENT_FIELD in mapped.column_names else None
    blank = np.ones(n, dtype=bool) if raws is None else _blank(raws)
    for i in np.flatnonzero(blank).tolist():
        reason = _missing_raw(field_map) if raws is None or not raws[i].is_valid else "empty raw content"
        _reject(report, rejects, RecordProblem(block.source_file, reason, line=block.lines[i],
                                               field=RAW_CONTENT_FIELD), batch, state)
    keep = np.flatnonzero(~blank)
    if not len(keep):
        return
    if len(keep) < n:
        raws = raws.take(pa.array(keep, pa.int64()))
    if dedup:
        if ids_ahead is None:
            ids = content_ids(raws)
        else:
            ids = ids_ahead if len(keep) == n else ids_ahead.take(pa.array(keep, pa.int64()))
        new = staged_ids.add(ids)
        if not new.all():
            report.duplicates += len(new) - int(np.count_nonzero(new))
            keep, ids, raws = keep[new], ids.filter(pa.array(new)), raws.filter(pa.array(new))
    else:
        ids = pa.array([random_id() for _ in range(len(keep))], pa.string())
    rows = mapped if len(keep) == n else mapped.take(pa.array(keep, pa.int64()))
    chunk.add_block(ids, rows, _characters(raws))


def _item_bytes(item: SourceRecord | SourceBlock | RecordProblem) -> int:
    """What an item of the source stream holds, roughly: what bounds the read-ahead."""
    if isinstance(item, SourceBlock):
        return item.table.nbytes
    if isinstance(item, SourceRecord):
        return 64 + sum(len(v) for v in item.fields.values() if isinstance(v, (str, bytes)))
    return 64


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _text(values: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets, bytes) of a string array's values, or None for other layouts."""
    if not pa.types.is_string(values.type) or values.buffers()[2] is None:
        return None
    offsets = np.frombuffer(values.buffers()[1], np.int32, len(values) + 1, values.offset * 4)
    return offsets, np.frombuffer(values.buffers()[2], np.uint8)


def _characters(values: pa.Array) -> int:
    """What ``len()`` of each value adds up to, for a string array without nulls."""
    text = _text(values)
    if text is None:
        return int(pc.sum(pc.utf8_length(values)).as_py() or 0)
    offsets, data = text
    data = data[offsets[0]:offsets[-1]]
    if not len(data) or data.max() < 0x80:
        return len(data)
    return len(data) - int(np.count_nonzero((data & 0xC0) == 0x80))  # UTF-8: one lead byte a character


_NOT_SPACE: str | None = None


def _blank(raws: pa.Array) -> np.ndarray:
    """True where the raw content is null or has nothing ``str.strip()`` keeps."""
    global _NOT_SPACE
    n = len(raws)
    maybe = np.ones(n, dtype=bool)
    text = _text(raws)
    if text is not None and n:  # a value starting with a printable ASCII character is not blank
        offsets, data = text
        filled = offsets[1:] > offsets[:-1]
        first = np.zeros(n, dtype=np.uint8)
        first[filled] = data[offsets[:-1][filled]]
        maybe = ~filled | (first <= 0x20) | (first >= 0x7F)
        if raws.null_count:
            maybe |= raws.is_null().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(maybe)
    blank = np.zeros(n, dtype=bool)
    if not len(rows):
        return blank
    if _NOT_SPACE is None:
        # what str.isspace() calls whitespace (no code point past the BMP is); a row with
        # any other character is not blank, the few others are asked one by one
        _NOT_SPACE = "[^" + "".join(f"\\x{{{c:x}}}" for c in range(0x10000) if chr(c).isspace()) + "]"
    some = raws.take(pa.array(rows, pa.int64()))
    unsure = ~pc.match_substring_regex(some, _NOT_SPACE).fill_null(False).to_numpy(zero_copy_only=False)
    for i in rows[unsure].tolist():
        value = raws[i].as_py()
        blank[i] = value is None or not value.strip()
    return blank


def _missing_raw(field_map: dict[str, str]) -> str:
    mapped_from = next((s for s, t in field_map.items() if t == RAW_CONTENT_FIELD), None)
    hint = f" (mapped from '{mapped_from}')" if mapped_from else " (use --map SOURCE_FIELD=raw_data)"
    return f"missing mapped field{hint}"


def _problem(item: SourceRecord, reason: str, field_name: str) -> RecordProblem:
    return RecordProblem(item.source_file, reason, line=item.line, offset=item.offset, field=field_name)


def _reject(report: SubmitReport, rejects: list, problem: RecordProblem, batch: str, state: FamilyState) -> None:
    report.rejected += 1
    message = _storable(problem.message())
    if len(report.reject_messages) < MAX_REJECT_MESSAGES:
        report.reject_messages.append(message)
    rejects.append({
        "logical_table": state.table.identifier, "batch": batch, "submit_id": report.submit_id,
        "source_file": _storable(problem.source_file), "line": problem.line, "offset": problem.offset,
        "field": _storable(problem.field), "reason": _storable(problem.reason),
        "rejected_at": datetime.now(timezone.utc),
    })


def _storable(text: str | None) -> str | None:
    """Reject text as UTF-8 can store it: the bad field name or file name that caused a reject
    may itself hold a lone surrogate (a non-UTF-8 file name, ``"\\ud800"`` in a JSON key)."""
    if text is None:
        return None
    return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def _flush(writes: BackgroundWrites, chunk: _Chunk, batch: str, types: dict[str, str], known: set[str],
           report: SubmitReport) -> None:
    if not len(chunk):
        return
    writer = writes.writer
    new = [f for f in chunk.fields() if f not in known and types.get(f)]
    if new:
        writes.wait()  # rows queued before hold the old schema: written under it
        _add_raw_fields(writer, new, types)
        known.update(new)
        report.new_fields += new
    # the table's own struct decides the layout: it may hold fields a concurrent writer added
    table_fields = [(f.name, arrow_type(str(f.field_type)))
                    for f in writer.table.schema().find_field(RAW_STAGE).field_type.fields]
    struct_type = pa.struct([pa.field(f, t) for f, t in table_fields])
    schema = pa.schema(key_arrow_fields() + [pa.field(RAW_STAGE, struct_type)])
    columns = [chunk.parts(f, t) for f, t in table_fields]
    ids = [pa.array(chunk.ids, pa.string()), *(block_ids for block_ids, _ in chunk.blocks)]
    # one record batch per part (the per-record rows, then each block as Arrow read it): the
    # rows are not copied here, only when the writer splits them into files
    batches = [pa.RecordBatch.from_arrays(
        [part_ids, pa.array([batch] * len(part_ids), pa.string()),
         pa.StructArray.from_arrays([parts[k] for parts in columns], fields=list(struct_type))], schema=schema)
        for k, part_ids in enumerate(ids) if len(part_ids)]
    data = pa.Table.from_batches(batches, schema=schema)
    n = len(chunk)
    # the writer's buffer weighs what it holds in Arrow bytes: weighed as the table of one array
    # per column this function made before (a copy of every row), data files end where they did
    weight = (_joined_nbytes(ids, bitmap=False) + n * (4 + len(batch.encode("utf-8")))
              + sum(_joined_nbytes(parts) for parts in columns))
    writes.write(data, weight)
    report.written += n


def _joined_nbytes(parts: list[pa.Array], bitmap: bool | None = None) -> int:
    """``pa.concat_arrays(parts).nbytes`` without the copy: a validity bitmap when any part has
    one (``bitmap=False``: as ``pa.array`` of a list without None makes it, none), and the values
    (for text: 4-byte offsets and the bytes)."""
    n = sum(len(p) for p in parts)
    if bitmap is None:
        bitmap = any(p.buffers()[0] is not None for p in parts)
    size = (n + 7) // 8 if bitmap else 0
    typ = parts[0].type
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        data = 0
        for p in parts:
            if len(p):
                offsets = np.frombuffer(p.buffers()[1], np.int32, len(p) + 1, p.offset * 4)
                data += int(offsets[-1] - offsets[0])
        return size + 4 * n + data
    return size + (n * typ.bit_width + 7) // 8


def _add_raw_fields(writer: StagedWrite, names: list[str], types: dict[str, str]) -> None:
    """Evolve the base table's RawData struct (a schema change, visible to nobody until pinned)."""
    from catalog_ext import iceberg_io

    def evolve(table):
        existing = {f.name: f for f in table.schema().find_field(RAW_STAGE).field_type.fields}
        for n in names:
            if n in existing and str(existing[n].field_type) != str(iceberg_type(types[n])):
                raise SchemaConflictError(
                    f"field RawData.{n} is {existing[n].field_type} in {writer.identifier}, "
                    f"but this source has {types[n]}: map it to another name with --map {n}=NEW_NAME"
                )
        todo = [n for n in names if n not in existing]
        if todo:
            with table.update_schema() as update:
                for n in todo:
                    update.add_column((RAW_STAGE, n), iceberg_type(types[n]))

    iceberg_io.with_table_retry(writer.catalog, writer.identifier, evolve)
    writer.reload()


def _save_rejects(store: FamilyStore, rejects: list[dict[str, Any]]) -> None:
    system_tables.append_rows(store.catalog, system_tables.REJECTS, rejects)


def _commit(store, namespace, name, writer: StagedWrite, report: SubmitReport, batch: str,
            sources: list[str], types: dict[str, str], command: str, check: WinnerCheck | None) -> FamilyState:
    if writer.data_files and writer.pending_files:  # the Spark engine's files are on the branch already
        writer.stage()
    now = int(time.time() * 1000)

    def updates(latest: FamilyState):
        if check is not None:
            # called again after each rebase: ids the winners added since our base are ours no more
            removed = check.after_rebase(writer)
            report.written -= removed
            report.duplicates += removed
        has_data = writer.staged_snapshot_id is not None and bool(writer.data_files)
        ups: list = []
        new_cols = [f for f in report.new_fields if not latest.has_column(f"{RAW_STAGE}.{f}")]
        if new_cols:
            ups.append(AddLogicalColumns(tuple(
                LogicalColumn(path=f"{RAW_STAGE}.{f}", type=types[f], kind="stage") for f in new_cols)))
        if report.new_fields:
            ups.append(AddPhysicalColumns(tuple(
                PhysicalColumn(table=latest.base_table.key, name=f"{RAW_STAGE}.{f}", logical=f"{RAW_STAGE}.{f}")
                for f in report.new_fields)))
        if has_data:
            ups.append(PinSnapshot(latest.base_table.key, writer.staged_snapshot_id, writer.base_snapshot_id))
        ups.append(AddBatch(Batch(
            name=batch, rows=report.written, read=report.read, duplicates=report.duplicates,
            rejected=report.rejected, sources=[str(s) for s in sources][:100], version=latest.version + 1,
            committed_ms=now, submit_id=report.submit_id)))
        return tuple(ups)

    def summary(_latest: FamilyState) -> dict[str, str]:
        # evaluated after ``updates``, so the counts include a re-check's duplicates
        return {"omni.batch": batch, "omni.rows": str(report.written), "omni.duplicates": str(report.duplicates),
                "omni.rejected": str(report.rejected), "omni.submit-id": report.submit_id}

    return store.commit(namespace, name, updates, operation="ingest", command=command,
                        summary=summary, staged=[writer] if writer.data_files else [])


def _abandon(writer: StagedWrite) -> None:
    try:
        writer.abandon()
    except Exception:  # noqa: BLE001 - the original error matters more than cleanup
        pass


def iter_items(sources: Iterable[str], kind: str | None = None):
    """Re-exported for benchmarks: the same reader stream submit uses."""
    return iter_sources(list(sources), kind)


# ---- the steps another engine reuses: the Spark engine (spark_udfs/ingest.py) runs the per-file
# steps in its tasks and the rest on its driver, so both engines accept, reject, id and commit alike
Chunk, Pending, settle, take_block, map_record, map_block, field_names = (
    _Chunk, _Pending, _settle, _take_block, _map_record, _map_block, _field_names)
reject, raw_field_types, check_declared_schemas, check_outcome = (
    _reject, _raw_field_types, _check_declared_schemas, _check_outcome)
save_rejects, add_raw_fields, commit_batch, abandon = _save_rejects, _add_raw_fields, _commit, _abandon
