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


def write_data_files(table: Any, data: pa.Table, write_uuid: uuid.UUID, counter: itertools.count) -> list[Any]:
    """Write ``data`` as Parquet data files of ``table`` (partitioned per its spec); commit nothing."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, _dataframe_to_data_files

    _check_pyarrow_schema_compatible(
        table.metadata.schema(), provided_schema=data.schema, format_version=table.metadata.format_version
    )
    if data.num_rows == 0:
        return []
    return list(
        _dataframe_to_data_files(table_metadata=table.metadata, df=data, io=table.io, write_uuid=write_uuid, counter=counter)
    )


def commit_data_files(table: Any, data_files: Iterable[Any], branch: str, properties: dict[str, str]) -> Any:
    """Commit already-written data files as one append snapshot on ``branch``; return the table."""
    with table.transaction() as tx:
        with tx.update_snapshot(snapshot_properties=properties, branch=branch).fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)
    return table


def commit_data_files_on_new_branch(table: Any, data_files: Iterable[Any], branch: str, base_snapshot_id: int,
                                    properties: dict[str, str]) -> Any:
    """Create ``branch`` at ``base_snapshot_id``, then append ``data_files`` on it.

    Two catalog commits on purpose. In one transaction, pyiceberg's own retry after a
    concurrent commit to the table (another writer's branch) rebuilds only the snapshot:
    it drops the branch creation and appends on a branch that no longer exists - a
    snapshot with NO parent, holding only these files, so every row of the base vanished
    from the version that pins it (found by the two-writer concurrency test). The append
    alone retries safely: the branch it targets exists and only this writer moves it.
    The parent is checked after the commit, so this can never pass silently again.
    """
    if branch not in table.metadata.refs:
        table.manage_snapshots().create_branch(base_snapshot_id, branch).commit()
    with table.transaction() as tx:
        with tx.update_snapshot(snapshot_properties=properties, branch=branch).fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)
    head = table.metadata.snapshot_by_name(branch)
    if head is None or head.parent_snapshot_id != base_snapshot_id:
        # an invariant, not a race: retrying would append onto the wrong parent again
        raise RuntimeError(
            f"staging branch {branch} of {table.name()} was moved while its first snapshot was committed "
            f"(parent {head.parent_snapshot_id if head else None}, expected {base_snapshot_id})")
    return table


def added_data_files(table: Any, snapshot_id: int) -> list[Any]:
    """The data files a snapshot added (what a rebase re-commits)."""
    return snapshot_data_changes(table, snapshot_id)[0]


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


def scan_tasks_by_bucket(table: Any, snapshot_id: int, selected: tuple[str, ...], row_filter: Any) -> tuple[Any, dict[int, list[Any]]]:
    """Plan a scan and group its file tasks by the id-bucket partition value.

    Every family table is partitioned (batch, bucket(N, id)) with the same N, so the
    rows of bucket k of one table only ever join rows of bucket k of another: reading
    one bucket at a time bounds memory by the data size divided by N.
    """
    scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id, selected_fields=selected)
    spec = table.metadata.specs()[0]
    position = next(i for i, f in enumerate(spec.fields) if str(f.transform).startswith("bucket"))
    groups: dict[int, list[Any]] = {}
    for task in scan.plan_files():
        groups.setdefault(task.file.partition[position], []).append(task)
    return scan, groups


def read_tasks(scan: Any, tasks: list[Any]) -> Any:
    """Read some of a scan's file tasks as one Arrow table (the scan's projection and filter)."""
    from pyiceberg.io.pyarrow import ArrowScan

    return ArrowScan(scan.table_metadata, scan.io, scan.projection(), scan.row_filter, scan.case_sensitive).to_table(tasks)


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
