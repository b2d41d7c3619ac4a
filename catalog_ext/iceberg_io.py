"""The few pyiceberg internals omni relies on, kept in one adapter.

pyiceberg writes data files and commits them in one call (``Table.append``). omni
needs the two halves apart: write files chunk by chunk while streaming (bounded
memory), commit them later as ONE snapshot on a staging branch, and re-commit the
same files onto a newer base after a lost race without rewriting them. pyiceberg
0.12 exposes those halves only as private helpers; if they move, only this module
changes.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any, Iterable

import pyarrow as pa

from catalog_ext import row_groups


def bucket_spec_id(table: Any, bucket_count: int | None) -> int | None:
    """The id of ``table``'s partition spec that buckets the id column into ``bucket_count``.

    A family table holds files of one bucket count per logical version; after a
    re-bucketing (governance/rebucket.py) the table has a spec per count it ever had,
    and a writer must write - and label - its files with the spec of the count its
    logical version says, not whatever spec is the table's default at that moment.
    None: no count asked for, or no spec has it (the caller uses the default spec).
    """
    if bucket_count is None:
        return None
    default = table.metadata.default_spec_id
    found = [spec.spec_id for spec in table.metadata.partition_specs if spec_bucket_count(spec) == bucket_count]
    if not found:
        return None
    return default if default in found else max(found)  # the newest such spec


def _id_bucket_field(spec: Any) -> tuple[int, Any] | None:
    """(position, field) of the spec's ``bucket(N, id)`` field (source id 1, the id column), or None."""
    return next(((i, f) for i, f in enumerate(spec.fields)
                 if f.source_id == 1 and str(f.transform).startswith("bucket")), None)


def spec_bucket_count(spec: Any) -> int | None:
    """N of the spec's ``bucket(N, id)`` field, or None."""
    found = _id_bucket_field(spec)
    return int(found[1].transform.num_buckets) if found else None


def _with_spec(metadata: Any, spec_id: int | None) -> Any:
    if spec_id is None or spec_id == metadata.default_spec_id:
        return metadata
    return metadata.model_copy(update={"default_spec_id": spec_id})


def write_data_files(table: Any, data: pa.Table, write_uuid: uuid.UUID, counter: itertools.count,
                     spec_id: int | None = None) -> list[Any]:
    """Write ``data`` as Parquet data files of ``table``, partitioned per its spec ``spec_id``
    (default: the table's default spec); commit nothing."""
    return [data_file for data_file, _ in write_data_files_with_rows(table, data, write_uuid, counter, spec_id)]


def write_data_files_with_rows(table: Any, data: pa.Table, write_uuid: uuid.UUID, counter: itertools.count,
                               spec_id: int | None = None) -> list[tuple[Any, pa.Table]]:
    """:func:`write_data_files`, each data file with the rows it holds, in its row order.

    pyiceberg decides which rows go to which file (partitions, then bin-packing by size)
    and keeps that to itself in ``_dataframe_to_data_files``; the same steps are taken
    here with its own helpers, so the tasks' rows can be handed on: the id index indexes
    a file from them instead of reading it back (``omni_iceberg.index.staged``).
    ``write_file`` returns one file per task, in task order (an ordered executor map).
    """
    from pyiceberg.io.pyarrow import (_check_pyarrow_schema_compatible, _determine_partitions, bin_pack_arrow_table,
                                      pyarrow_to_schema, write_file)
    from pyiceberg.table import DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE, TableProperties, WriteTask
    from pyiceberg.utils.config import Config
    from pyiceberg.utils.properties import property_as_int

    _check_pyarrow_schema_compatible(
        table.metadata.schema(), provided_schema=data.schema, format_version=table.metadata.format_version
    )
    if data.num_rows == 0:
        return []
    metadata = row_groups.for_write(_with_spec(table.metadata, spec_id), data)  # row groups sized by bytes
    target = property_as_int(metadata.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                             TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT)
    task_schema = pyarrow_to_schema(
        data.schema, name_mapping=metadata.schema().name_mapping,
        downcast_ns_timestamp_to_us=Config().get_bool(DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE) or False,
        format_version=metadata.format_version)
    spec = metadata.spec()
    parts = ([(None, data)] if spec.is_unpartitioned() else
             [(p.partition_key, p.arrow_table_partition)
              for p in _determine_partitions(spec=spec, schema=metadata.schema(), arrow_table=data)])
    tasks = [WriteTask(write_uuid=write_uuid, task_id=next(counter), record_batches=batches, partition_key=key,
                       schema=task_schema)
             for key, rows in parts for batches in bin_pack_arrow_table(rows, target)]
    files = list(write_file(io=table.io, table_metadata=metadata, tasks=iter(tasks)))
    return [(f, pa.Table.from_batches(t.record_batches)) for f, t in zip(files, tasks, strict=True)]


def use_spec(tx: Any, spec_id: int | None) -> None:
    """Make ``spec_id`` the table's default spec inside transaction ``tx`` (before its snapshot).

    pyiceberg writes every added file into one manifest labelled with the default spec
    of the transaction's metadata: files partitioned by another spec must make it the
    default in the same commit, or their partition values would be read under the wrong
    spec (a bucket of 16 taken for a bucket of 4). The default only says how the next
    writer partitions when it names no spec; every omni writer names one.
    """
    if spec_id is None or tx.table_metadata.default_spec_id == spec_id:
        return
    from pyiceberg.table.update import SetDefaultSpecUpdate

    tx._apply((SetDefaultSpecUpdate(spec_id=spec_id),))


def commit_data_files(table: Any, data_files: Iterable[Any], branch: str, properties: dict[str, str],
                      spec_id: int | None = None) -> Any:
    """Commit already-written data files (of spec ``spec_id``) as one append snapshot on ``branch``."""
    with table.transaction() as tx:
        use_spec(tx, spec_id)
        with tx.update_snapshot(snapshot_properties=properties, branch=branch).fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)
    return table


def commit_data_files_on_new_branch(table: Any, data_files: Iterable[Any], branch: str, base_snapshot_id: int,
                                    properties: dict[str, str], spec_id: int | None = None) -> Any:
    """Create ``branch`` at ``base_snapshot_id``, then append ``data_files`` on it.

    Two catalog commits on purpose. In one transaction, pyiceberg's own retry after a
    concurrent commit to the table (another writer's branch) rebuilds only the snapshot:
    it drops the branch creation and appends on a branch that no longer exists - a
    snapshot with NO parent, holding only these files, so every row of the base vanished
    from the version that pins it (found by the two-writer concurrency test). The append
    alone is retried by pyiceberg on the branch's new head. The caller checks the new
    snapshot's parent (:meth:`catalog_ext.physical.StagedWrite.checkpoint`): a parent other
    than ``base_snapshot_id`` means another writer moved the branch meanwhile.
    """
    if branch not in table.metadata.refs:
        table.manage_snapshots().create_branch(base_snapshot_id, branch).commit()
    return commit_data_files(table, data_files, branch, properties, spec_id)


def added_data_files(table: Any, snapshot_id: int) -> list[Any]:
    """The data files a snapshot added (what a rebase re-commits)."""
    return snapshot_data_changes(table, snapshot_id)[0]


def snapshots_between(table: Any, base_snapshot_id: int | None, head_snapshot_id: int | None) -> list[Any]:
    """The snapshots after ``base`` (exclusive; None: from the first) up to ``head``, oldest first."""
    chain = []
    snap = table.snapshot_by_id(head_snapshot_id) if head_snapshot_id is not None else None
    while snap is not None and snap.snapshot_id != base_snapshot_id:
        chain.append(snap)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return chain[::-1]


def snapshot_data_changes(table: Any, snapshot_id: int) -> tuple[list[Any], list[Any]]:
    """(data files added, data files deleted) by one snapshot.

    Only the manifests that snapshot wrote are read: its ADDED and DELETED entries live
    there, so the cost follows the snapshot, not the table's history of manifests.
    """
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

    added, deleted = [], []
    for manifest in table.snapshot_by_id(snapshot_id).manifests(table.io):
        if manifest.added_snapshot_id != snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != snapshot_id or entry.data_file.content != DataFileContent.DATA:
                continue
            if entry.status == ManifestEntryStatus.ADDED:
                added.append(entry.data_file)
            elif entry.status == ManifestEntryStatus.DELETED:
                deleted.append(entry.data_file)
    return added, deleted


def commit_empty_snapshot(table: Any, properties: dict[str, str]) -> int:
    """Give a new table its first (empty) snapshot: branches can only start from a snapshot."""
    with table.transaction() as tx:
        with tx.update_snapshot(snapshot_properties=properties).fast_append():
            pass
    return table.current_snapshot().snapshot_id


def is_commit_race(error: Exception) -> bool:
    """True when a physical-table commit failed only because another writer got there first.

    pyiceberg reports this as CommitFailedException, or - when the table moved between
    load and commit - as a ValueError about the snapshot sequence number.
    """
    from pyiceberg.exceptions import BadRequestError, CommitFailedException

    if isinstance(error, CommitFailedException):
        return True
    # a REST catalog checks the sequence number server-side and answers 400 for the same race
    return isinstance(error, (ValueError, BadRequestError)) and "sequence number" in str(error)


def with_table_retry(catalog: Any, identifier: str, action, attempts: int = 20):
    """Run ``action(fresh_table)`` and retry on a lost race with a freshly loaded table.

    Used for metadata-only commits on family tables (branches, appends of already
    written files): retrying them is cheap and never rewrites data.
    """
    from catalog_ext.retry import retry

    return retry(lambda: action(catalog.load_table(identifier)), on=is_commit_race, attempts=attempts,
                 backoff=0.02, cap=1.0)


def file_io(catalog: Any, location: str) -> Any:
    """The catalog's FileIO for ``location`` (pyiceberg keeps this behind a private method)."""
    return catalog._load_file_io(location=location)


def file_length(io: Any, path: str) -> int:
    """Bytes of the file at ``path`` through ``io`` (a FileIO); 0 when it cannot be read (gone)."""
    try:
        return len(io.new_input(path))
    except (OSError, TypeError):
        return 0


def delete_files(catalog: Any, paths: Iterable[str]) -> int:
    """Delete data files by path; returns how many were deleted (missing ones are skipped)."""
    deleted = 0
    for path in paths:
        io = file_io(catalog, path)
        try:
            io.delete(path)
            deleted += 1
        except FileNotFoundError:
            continue
    return deleted


def reachable_data_files(table: Any, snapshot_ids: Iterable[int]) -> set[str]:
    """Paths of every live data file in the given snapshots (metadata reads only)."""
    out: set[str] = set()
    seen_manifests: set[str] = set()
    for sid in snapshot_ids:
        snapshot = table.snapshot_by_id(sid)
        if snapshot is None:
            continue
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                out.add(entry.data_file.file_path)
    return out


class _WeightedLru:
    """Values by key, least recently used out first, bounded by their total weight; thread-safe.

    Shared by the footer and plan caches below: both keep facts about files that never
    change, and differ only in what a value weighs and how much may be kept.
    """

    def __init__(self) -> None:
        import threading
        from collections import OrderedDict

        self._entries: "OrderedDict[Any, tuple[Any, int]]" = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def _limit(self) -> int:
        raise NotImplementedError

    def get(self, key: Any) -> Any | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return hit[0]

    def put(self, key: Any, value: Any, weight: int) -> None:
        limit = self._limit()
        with self._lock:
            if key in self._entries or weight > limit:
                return
            self._entries[key] = (value, weight)
            self._total += weight
            while self._total > limit:
                _, (_, w) = self._entries.popitem(last=False)
                self._total -= w

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._total = 0
            self.hits = self.misses = 0


class _PlanCache(_WeightedLru):
    """File tasks of planned scans, by (table uuid, snapshot id, schema, filter, options).

    Why: planning reads the snapshot's manifests and evaluates every file's column
    statistics against the filter; for a wide column-group table that is ~12 ms a
    query, and the same snapshot is planned again by every query that reads it. A
    snapshot's files never change, so neither does the plan of one filter on it. Bounded
    by the files the kept plans hold, weighted by their statistics' width.
    """

    #: weight units kept: one per data file plus one per column it has statistics for
    LIMIT = 2_000_000

    def _limit(self) -> int:
        return self.LIMIT

    def tasks(self, scan: Any) -> list[Any]:
        snapshot = scan.snapshot()
        if snapshot is None:
            return list(scan.plan_files())
        # the filter binds to the current schema; empty files are an option of the scan
        key = (str(scan.table_metadata.table_uuid), snapshot.snapshot_id, scan.table_metadata.current_schema_id,
               repr(scan.row_filter), scan.case_sensitive, scan.options.get("include_empty_files"))
        tasks = self.get(key)
        if tasks is None:
            tasks = list(scan.plan_files())
            self.put(key, tasks, sum(1 + len(t.file.value_counts or ()) for t in tasks))
        return list(tasks)


PLANS = _PlanCache()


def scan_tasks_by_bucket(table: Any, snapshot_id: int, selected: tuple[str, ...], row_filter: Any) -> tuple[Any, dict[int, list[Any]]]:
    """Plan a scan and group its file tasks by the id-bucket partition value.

    Every family table of a logical version is partitioned by bucket(N, id) with the same N, so the
    rows of bucket k of one table only ever join rows of bucket k of another: reading
    one bucket at a time bounds memory by the data size divided by N.
    """
    scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id, selected_fields=selected)
    specs = table.metadata.specs()
    positions: dict[int, int] = {}  # spec id -> position of its bucket field (specs differ after a re-bucketing)
    groups: dict[int, list[Any]] = {}
    for task in PLANS.tasks(scan):
        spec_id = task.file.spec_id
        if spec_id not in positions:
            positions[spec_id] = bucket_position(specs[spec_id])
        groups.setdefault(task.file.partition[positions[spec_id]], []).append(task)
    return scan, groups


def bucket_position(spec: Any) -> int:
    """Position of the id-bucket field in a spec's partition tuples."""
    found = _id_bucket_field(spec)
    if found is None:
        raise ValueError(f"partition spec {spec.spec_id} has no bucket field on the id column")
    return found[0]


def read_tasks(scan: Any, tasks: list[Any]) -> Any:
    """Read some of a scan's file tasks as one Arrow table (the scan's projection and filter).

    Through :func:`_read_by_name` when that is provably the same read, else pyiceberg's.
    """
    from pyiceberg.io.pyarrow import ArrowScan

    fast = _read_by_name(scan, tasks)
    if fast is not None:
        return fast
    return ArrowScan(scan.table_metadata, scan.io, scan.projection(), scan.row_filter,
                     scan.case_sensitive).to_table(tasks)


def scan_to_arrow(table: Any, row_filter: Any, snapshot_id: int | None, selected: tuple[str, ...]) -> Any:
    """``table.scan(...).to_arrow()``, read through :func:`read_tasks`."""
    scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id, selected_fields=selected)
    return read_tasks(scan, PLANS.tasks(scan))


#: metadata object id -> (metadata, {name: field id} of the names that never changed)
_STABLE_NAMES: dict[int, tuple[Any, dict[str, Any]]] = {}


def _stable_top_level(meta: Any) -> dict[str, Any]:
    """Top-level names that denote one field, of one type, in every schema the table ever had.

    Only for those is a read of the data files *by name* the same as pyiceberg's read
    by field id: no rename, no drop-and-re-add under the same name, no type promotion.
    Cached per metadata object (a 2,500-column group has hundreds of schemas).
    """
    hit = _STABLE_NAMES.get(id(meta))
    if hit is not None and hit[0] is meta:
        return hit[1]
    by_name: dict[str, Any] = {}
    broken: set[str] = set()
    ids_seen: dict[int, str] = {}
    for schema in meta.schemas:
        for f in schema.fields:
            if ids_seen.setdefault(f.field_id, f.name) != f.name:
                broken.update((f.name, ids_seen[f.field_id]))
            prev = by_name.setdefault(f.name, f)
            if prev.field_id != f.field_id or prev.field_type != f.field_type:
                broken.add(f.name)
    stable = {n: f for n, f in by_name.items() if n not in broken}
    if len(_STABLE_NAMES) >= 32:  # it holds the metadata objects alive: keep it small
        _STABLE_NAMES.clear()
    _STABLE_NAMES[id(meta)] = (meta, stable)
    return stable


class _FooterCache(_WeightedLru):
    """Parsed Parquet footers of local data files, by (path, size).

    Why: a file's footer describes every column, and parsing it is most of the cost of
    reading a few columns from a wide file (2.8 ms for a 258-column column-group file
    of 34 rows, more than its data). Iceberg data files are never rewritten in place -
    a change is a new file with a new name - so a footer parsed once stays true for the
    process; the key also carries the file size the manifest records. The cache is
    bounded by the footers' serialized bytes (``OMNI_FOOTER_CACHE_MB``, default 64).
    """

    def __init__(self) -> None:
        super().__init__()
        self._format: Any = None
        self._fs: Any = None

    def _limit(self) -> int:
        from catalog_ext import settings

        return int(settings.value("OMNI_FOOTER_CACHE_MB") * (1 << 20))

    def fragments(self, files: list[tuple[str, int]]) -> tuple[Any, Any, list[Any]]:
        """(format, filesystem, one fragment with its footer parsed per file)."""
        with self._lock:  # made once, on first use: importing pyarrow.dataset costs every command
            if self._format is None:
                import pyarrow.dataset as ds
                import pyarrow.fs as pafs

                self._format, self._fs = ds.ParquetFileFormat(), pafs.LocalFileSystem()
        out = []
        for key in files:
            fragment = self.get(key)
            if fragment is None:
                fragment = self._format.make_fragment(key[0], self._fs)
                fragment.ensure_complete_metadata()  # parses the footer once, here
                self.put(key, fragment, fragment.metadata.serialized_size)
            out.append(fragment)
        return self._format, self._fs, out


FOOTERS = _FooterCache()


def _local_path(location: str) -> str | None:
    if location.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(location).path)
    return location if location.startswith("/") else None


def _read_by_name(scan: Any, tasks: list[Any]) -> Any | None:
    """Read local Parquet files with one Arrow dataset, projecting columns by name
    (:func:`by_name_dataset`, read whole); None when that read is not provably pyiceberg's."""
    found = by_name_dataset(scan, tasks)
    if found is None:
        return None
    dataset, columns, arrow_filter = found
    try:
        return dataset.to_table(columns=columns, filter=arrow_filter)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError):
        return None  # see by_name_dataset: pyiceberg reconciles such files field by field


def by_name_dataset(scan: Any, tasks: list[Any], grown_structs: bool = False) -> tuple[Any, list[str], Any] | None:
    """(Arrow dataset over local Parquet files, the projected column names, the Arrow filter), by name.

    Why: pyiceberg converts every file's *whole* Parquet schema to an Iceberg schema
    and projects it per file (about 3 ms a file at 15 columns, 44 ms at 200): for the
    16 small bucket files of a batch, or one wide column-group file, that costs more
    than the read. The result equals pyiceberg's whenever (checked here, else None and
    the caller reads through pyiceberg): the files are local Parquet without delete
    files; every projected column is a whole top-level field whose name, id and type
    never changed in the table's history; the filter reads only such columns. Files
    written before a column existed lack it: the dataset reads it as nulls, as the
    Iceberg spec asks. ``OMNI_READ_BY_NAME=0`` turns this off.

    ``grown_structs``: a struct column that only ever gained fields (:func:`_grown_only`,
    what ingest does to ``RawData``) is read by name too, when the files hold it with
    exactly the current fields, in order - for a reader that picks fields by name (an
    engine), since the struct may hold fields pyiceberg would have pruned.
    """
    from catalog_ext import settings

    if not tasks or not settings.value("OMNI_READ_BY_NAME"):
        return None
    from pyiceberg.manifest import FileFormat

    files = []
    for task in tasks:
        if task.delete_files or task.file.file_format != FileFormat.PARQUET:
            return None
        path = _local_path(task.file.file_path)
        if path is None:
            return None
        files.append((path, int(task.file.file_size_in_bytes)))
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.visitors import bind, extract_field_ids
    from pyiceberg.io.pyarrow import expression_to_pyarrow, schema_to_pyarrow
    from pyiceberg.schema import Schema

    meta = scan.table_metadata
    current = meta.schema()
    stable = _stable_top_level(meta)
    projected = scan.projection()
    needed, grown = [], set()
    for f in projected.fields:
        if stable.get(f.name) is None or stable[f.name].field_id != f.field_id or \
                current.find_field(f.field_id).field_type != f.field_type:  # a pruned struct: by id only
            if not (grown_structs and current.find_field(f.field_id).field_type == f.field_type
                    and _grown_only(meta, f)):
                return None
            grown.add(f.name)
        needed.append(f)
    arrow_filter = None
    if scan.row_filter != AlwaysTrue():
        bound = bind(current, scan.row_filter, scan.case_sensitive)
        for fid in extract_field_ids(bound):
            field = current.find_field(fid)
            if stable.get(field.name) is None or stable[field.name].field_id != fid:
                return None  # a nested or renamed column in the filter
            if all(n.field_id != fid for n in needed):
                needed.append(field)
        arrow_filter = expression_to_pyarrow(bound, current)
    import pyarrow.dataset as ds

    want = schema_to_pyarrow(Schema(*needed), include_field_ids=False)
    try:
        fmt, fs, fragments = FOOTERS.fragments(files)
        first = fragments[0].physical_schema
        # the files' own Arrow types (string or large_string, as written), else Iceberg's
        fields = [first.field(f.name).with_nullable(f.nullable) if f.name in first.names else f for f in want]
        if any(f.name in grown and _field_names(f.type) != _field_names(w.type) for f, w in zip(fields, want)):
            return None  # the first file's struct lacks a field added since: a struct by name would too
        dataset = ds.FileSystemDataset(fragments, pa.schema(fields), fmt, fs)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError):
        # files that disagree on a physical type (list element names, a writer's own
        # encoding): pyiceberg reconciles them field by field
        return None
    return dataset, [f.name for f in projected.fields], arrow_filter


def _struct_ids(field_type: Any, prefix: tuple[str, ...] = ()) -> dict[int, tuple] | None:
    """{field id: (path of names, leaf type or "struct")} of a struct of structs and primitives; None otherwise."""
    from pyiceberg.types import StructType

    out: dict[int, tuple] = {}
    for child in field_type.fields:
        path = prefix + (child.name,)
        if isinstance(child.field_type, StructType):
            inner = _struct_ids(child.field_type, path)
            if inner is None:
                return None
            out[child.field_id] = (path, "struct")
            out.update(inner)
        elif child.field_type.is_primitive:
            out[child.field_id] = (path, child.field_type)
        else:
            return None  # lists and maps: their element ids are not checked here
    return out


def _grown_only(meta: Any, field: Any) -> bool:
    """Whether top-level struct ``field`` only ever gained fields: in every schema of the table it
    has its name and id, and each field it held then has the same path and type now."""
    from pyiceberg.types import StructType

    if not isinstance(field.field_type, StructType):
        return False
    now = _struct_ids(field.field_type)
    if now is None:
        return False
    for schema in meta.schemas:
        for old in schema.fields:
            if old.field_id != field.field_id and old.name != field.name:
                continue
            if old.field_id != field.field_id or old.name != field.name or not isinstance(old.field_type, StructType):
                return False
            before = _struct_ids(old.field_type)
            if before is None or any(now.get(fid) != where for fid, where in before.items()):
                return False
    return True


def _field_names(arrow_type: Any) -> Any:
    """The nested field names of an Arrow type, in order (a type's shape by name)."""
    if pa.types.is_struct(arrow_type):
        return tuple((f.name, _field_names(f.type)) for f in arrow_type)
    return None


def scan_dataset(table: Any, row_filter: Any, snapshot_id: int | None, selected: tuple[str, ...]) -> Any | None:
    """The scan as a lazily read, re-scannable Arrow dataset: projection and filter applied while reading.

    Why: a query engine handed this reads the pinned snapshot's files batch by batch
    (memory follows the batches in flight, not the table), and each of its scans starts
    a fresh read, so a plan that reads one name twice (a self-join, a CTE used twice)
    sees every row both times - a record batch reader would be empty the second time.
    The files are those pyiceberg plans (batch pruning by file statistics), read by name
    under :func:`by_name_dataset`'s conditions. None when those do not hold, when the
    files disagree on a column's physical type (such a disagreement would only show
    mid-read, too late to fall back), or when no file is left: the caller then reads
    through :func:`scan_to_arrow`, whole. Its columns are the projected ones plus any the
    filter alone reads; the engine picks its columns and fields by name. When a nested name
    (``RawData.url``) needs fewer fields than its struct holds, the scan is a
    :class:`LeafScan` instead (an Arrow stream, re-read per scan) holding the struct with
    only those fields: a dataset scan would decode the whole struct.
    """
    found = _agreeing_dataset(table, row_filter, snapshot_id, selected)
    if found is None:
        return None
    return _stream_of(*found[:3], selected)


def _agreeing_dataset(table: Any, row_filter: Any, snapshot_id: int | None,
                      selected: tuple[str, ...]) -> tuple[Any, list[Any], Any, tuple[str, ...], list[Any]] | None:
    """(dataset, its fragments, Arrow filter, top-level columns, file tasks) of :func:`scan_dataset`'s
    read, when it holds (every file agrees with the dataset on each column's physical type)."""
    top = {f.name for f in table.schema().fields}
    whole = tuple(dict.fromkeys(name if name in top else name.split(".")[0] for name in selected))
    if not set(whole) <= top:
        return None
    scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id, selected_fields=whole)
    tasks = PLANS.tasks(scan)
    found = by_name_dataset(scan, tasks, grown_structs=True)
    if found is None:
        return None
    dataset, _, arrow_filter = found
    fragments = list(dataset.get_fragments())
    for fragment in fragments:
        physical = fragment.physical_schema
        for want in dataset.schema:
            if want.name in physical.names and physical.field(want.name).type != want.type:
                return None
    return dataset, fragments, arrow_filter, whole, tasks


def _stream_of(dataset: Any, fragments: list[Any], arrow_filter: Any, selected: tuple[str, ...]) -> Any:
    leaves = LeafScan.of(dataset, fragments, selected, arrow_filter)
    if leaves is not None:
        return leaves
    return dataset if arrow_filter is None else dataset.filter(arrow_filter)


class FileScan:
    """A scan an engine may read straight from its Parquet files, by column name: the planned
    local files (batch pruning by file statistics done), the top-level columns to read, and
    the Arrow stream :func:`scan_dataset` gives for the same read (for an engine that cannot).

    What holds (else :func:`scan_files` gives None): the conditions of
    :func:`by_name_dataset` (local Parquet, no delete files, every column read by name is
    pyiceberg's read by field id; a struct that only ever gained fields counts), every
    file agrees on each column's physical type, and every file holds every column read -
    a file lacking one would need the nulls the Iceberg spec asks for, which a by-name
    reader over several files does not give. The row filter is NOT part of what the
    engine reads: whoever reads the files applies the filters it needs (the planner keeps
    every pushed conjunct in the query and adds the batches), pruning by file is done.
    """

    def __init__(self, paths: list[str], columns: tuple[str, ...], file_bytes: int, schema: Any,
                 arrow: Any) -> None:
        self.paths, self.columns, self.file_bytes, self.schema = paths, columns, file_bytes, schema
        self._arrow = arrow

    @property
    def arrow(self) -> Any:
        """The Arrow stream of the same read, made when first asked for: with a filter, making
        it prunes every file's row groups (a few ms a file), work a native read never needs."""
        if callable(self._arrow):
            self._arrow = self._arrow()
        return self._arrow


class _FileScanCache(_WeightedLru):
    """:func:`scan_files`' answers, by (table uuid, snapshot, schemas, filter, columns, by-name setting).

    Why: checking a scan's files (footers by path, every file's physical types, the
    table's schema history) costs ~0.15 ms a file a query (measured at 32 files), ~40 ms
    at 256 - several times DuckDB's own time for a LIMIT query - and the answer for one
    snapshot never changes: its files are immutable, and a schema change gives the key a
    new schema id.
    """

    #: weight units kept: one per file path of the kept scans (~100 bytes each)
    LIMIT = 100_000

    def _limit(self) -> int:
        return self.LIMIT


FILE_SCANS = _FileScanCache()
_NOT_NATIVE = object()  # a cached "no": the scan's files cannot be read natively


def scan_files(table: Any, row_filter: Any, snapshot_id: int | None, selected: tuple[str, ...]) -> FileScan | None:
    """The scan as a :class:`FileScan` (see its conditions); None when they do not hold or no file is left."""
    from catalog_ext import settings

    meta = table.metadata
    snapshot = snapshot_id if snapshot_id is not None else meta.current_snapshot_id
    key = (str(meta.table_uuid), snapshot, meta.current_schema_id, len(meta.schemas), repr(row_filter),
           tuple(selected), bool(settings.value("OMNI_READ_BY_NAME")))
    hit = FILE_SCANS.get(key) if snapshot is not None else None
    if hit is not None:
        if hit is _NOT_NATIVE:
            return None
        # the cache keeps the facts, not the footers: the Arrow stream, if ever needed, is made again
        return FileScan(*hit, lambda: scan_dataset(table, row_filter, snapshot_id, selected))
    found = _agreeing_dataset(table, row_filter, snapshot_id, selected)
    scan = None
    if found is not None:
        dataset, fragments, arrow_filter, whole, tasks = found
        if all(set(whole) <= set(f.physical_schema.names) for f in fragments):
            scan = FileScan([f.path for f in fragments], whole, sum(int(t.file.file_size_in_bytes) for t in tasks),
                            pa.schema([dataset.schema.field(n) for n in whole]),
                            lambda: _stream_of(dataset, fragments, arrow_filter, selected))
    if snapshot is not None:
        FILE_SCANS.put(key, _NOT_NATIVE if scan is None else (scan.paths, scan.columns, scan.file_bytes, scan.schema),
                       1 + (len(scan.paths) if scan else 0))
    return scan


def _pruned(arrow_type: Any, paths: list[tuple[str, ...]]) -> Any | None:
    """``arrow_type`` (a struct) with only the children ``paths`` (non-empty) lead to, a child whose
    path ends there whole; None when a path leaves structs (a list, a map) or names no child."""
    if not pa.types.is_struct(arrow_type) or any(p[0] not in arrow_type.names for p in paths):
        return None
    kept = []
    for child in arrow_type:
        below = [p[1:] for p in paths if p[0] == child.name]
        if not below:
            continue
        if any(not p for p in below):
            kept.append(child)
            continue
        inner = _pruned(child.type, below)
        if inner is None:
            return None
        kept.append(child.with_type(inner))
    return pa.struct(kept)


class LeafScan:
    """A re-scannable Arrow stream (``__arrow_c_stream__``) over Parquet files that reads only the
    struct leaves a scan needs: each stream a fresh read, file by file, row group by row group.

    Why: an Arrow dataset scan reads a struct column whole even when asked for one child
    (pyarrow 26: ``RawData.raw_data`` decoded ``RawData.url`` too, 4x the CPU on short
    records), while Parquet's own reader takes leaf paths (``RawData.raw_data``) and
    decodes only those pages. The struct keeps its name with fewer children, so SQL over
    ``RawData.raw_data`` reads the same. Row groups are pruned by the filter's statistics
    (as the dataset would) and the filter is applied to every batch read.
    """

    #: rows per batch read (the dataset scanner's default)
    BATCH_ROWS = 131_072

    def __init__(self, parts: list[tuple[Any, list[int] | None]], columns: list[str], schema: Any,
                 arrow_filter: Any) -> None:
        self.parts, self.columns, self.schema, self.arrow_filter = parts, columns, schema, arrow_filter

    @classmethod
    def of(cls, dataset: Any, fragments: list[Any], selected: tuple[str, ...], arrow_filter: Any) -> "LeafScan | None":
        """The leaf read of ``dataset``'s files for ``selected``; None when no struct is read with
        fewer children than it has, or a file lacks a column (the dataset reads that as nulls)."""
        names = set(dataset.schema.names)
        nested: dict[str, list[tuple[str, ...]]] = {}
        for name in selected:
            if name not in names and "." in name:
                top, *rest = name.split(".")
                nested.setdefault(top, []).append(tuple(rest))
        if not nested or any(top in selected for top in nested):
            return None
        fields, smaller = [], False
        for f in dataset.schema:
            if f.name in nested:
                inner = _pruned(f.type, nested[f.name])
                if inner is None:
                    return None
                smaller = smaller or inner != f.type
                f = f.with_type(inner)
            fields.append(f)
        if not smaller:
            return None
        if any(not names <= set(fragment.physical_schema.names) for fragment in fragments):
            return None
        columns = [".".join((f.name, *p)) for f in dataset.schema if f.name in nested for p in nested[f.name]]
        columns += [f.name for f in dataset.schema if f.name not in nested]
        parts = []
        for fragment in fragments:
            if arrow_filter is None:
                parts.append((fragment, None))
                continue
            groups = [g.id for piece in fragment.split_by_row_group(arrow_filter) for g in piece.row_groups]
            if groups:
                parts.append((fragment, groups))
        return cls(parts, columns, pa.schema(fields), arrow_filter)

    def batches(self):
        import pyarrow.parquet as pq

        for fragment, groups in self.parts:
            reader = pq.ParquetFile(fragment.path, metadata=fragment.metadata)
            try:
                for batch in reader.iter_batches(batch_size=self.BATCH_ROWS, row_groups=groups, columns=self.columns):
                    if self.arrow_filter is not None:
                        batch = batch.filter(self.arrow_filter)
                    # Parquet yields the file's column order: the stream's is the dataset's
                    yield pa.RecordBatch.from_arrays([batch.column(n) for n in self.schema.names], schema=self.schema)
            finally:
                reader.close()

    def to_table(self) -> Any:
        return pa.Table.from_batches(list(self.batches()), schema=self.schema)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        # called once per scan the engine makes: each call starts a fresh read, lazily
        return pa.RecordBatchReader.from_batches(self.schema, self.batches()).__arrow_c_stream__(requested_schema)


def read_data_files(table: Any, files: list[Any], columns: tuple[str, ...] | None = None) -> Any:
    """Rows of some data files, projected to ``columns`` (all by default) of the table's current schema.

    Read through pyiceberg's scan machinery, so field ids (not file column names)
    decide the projection and files written before a schema change get the new
    fields as nulls.
    """
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    schema = table.schema() if columns is None else table.schema().select(*columns)
    for f in files:
        try:
            f.spec_id
        except AttributeError:
            # a file written by this process and not yet read back from a manifest has no
            # spec id; it was written with the table's default spec (the only one omni uses)
            f.spec_id = table.metadata.default_spec_id
    tasks = [FileScanTask(f) for f in files]
    return ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(tasks)


def iter_task_batches(scan: Any, tasks: list[Any], where: Any = None, batch_rows: int = 65_536):
    """Some of a scan's file tasks as Arrow record batches (its projection and filter, then ``where``,
    a pyarrow compute expression), read a few rows at a time: memory follows ``batch_rows``, not the files.

    Through :func:`by_name_dataset` when that read is provably pyiceberg's and every file
    agrees on the projected columns' physical types (a disagreement would only show
    mid-read); else file by file through pyiceberg (memory then follows one data file,
    bounded by the write buffer that wrote it). The batches hold the same rows, in the
    same order, as :func:`read_tasks` of the same tasks filtered by ``where``.
    """
    if not tasks:
        return
    found = by_name_dataset(scan, tasks)
    if found is not None:
        dataset, columns, arrow_filter = found
        agree = all(physical.field(want.name).type == want.type
                    for physical in (fragment.physical_schema for fragment in dataset.get_fragments())
                    for want in dataset.schema if want.name in physical.names)
        if agree:
            combined = arrow_filter if where is None else (where if arrow_filter is None else arrow_filter & where)
            # one fragment and one batch ahead: readahead multiplies what is held in memory
            yield from dataset.to_batches(columns=columns, filter=combined, batch_size=max(1, batch_rows),
                                          batch_readahead=1, fragment_readahead=1, use_threads=True)
            return
    from pyiceberg.io.pyarrow import ArrowScan

    reader = ArrowScan(scan.table_metadata, scan.io, scan.projection(), scan.row_filter, scan.case_sensitive)
    for task in tasks:  # pyiceberg reads every file of a call ahead at once: one call a file
        for batch in reader.to_record_batches([task]):
            if where is not None:
                batch = pa.Table.from_batches([batch]).filter(where).combine_chunks()
                batch = batch.to_batches()[0] if batch.num_rows else None
            if batch is not None and batch.num_rows:
                for start in range(0, batch.num_rows, max(1, batch_rows)):
                    yield batch.slice(start, batch_rows)


def estimate_arrow_bytes(scan: Any, tasks: list[Any]) -> int:
    """About how many bytes of Arrow memory reading ``tasks`` through ``scan`` takes (its projection).

    Local Parquet files: the footers' uncompressed sizes of the projected columns (a
    nested projection counts its whole top-level field), plus 8 bytes a value for offsets
    and dictionary-decoded values the encoded size leaves out. Other files: their size
    on disk times 4 (a typical text compression ratio). An estimate, used to choose how
    finely to slice a read; never a correctness input.
    """
    top = {f.name for f in scan.projection().fields}
    total = 0
    local = []
    for task in tasks:
        path = _local_path(task.file.file_path)
        if path is None:
            total += 4 * int(task.file.file_size_in_bytes)
        else:
            local.append((path, int(task.file.file_size_in_bytes)))
    if local:
        _, _, fragments = FOOTERS.fragments(local)
        for fragment in fragments:
            meta = fragment.metadata
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                for c in range(rg.num_columns):
                    col = rg.column(c)
                    if col.path_in_schema.split(".", 1)[0] in top:
                        total += int(col.total_uncompressed_size) + 8 * int(col.num_values)
    return total
