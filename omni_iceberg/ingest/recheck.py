"""Keep ``_ai_unique_id_`` unique when concurrent submits race (md5 tables).

A submit dedups against the table as of its base snapshot. Two submits that start
from the same base both pass that check with the same content, and a lost race used
to re-commit the loser's files on top of the winner's unchanged: the same id twice.

:class:`WinnerCheck` closes that gap. After the store rebases the loser's staged
files onto the winner's snapshot, it reads the ids of the data files added between
the loser's last checked snapshot and its new base - the concurrent additions only,
never the whole table - and rewrites the loser's staged files without the ids the
winners already hold. The store then commits the rewritten files (or none), so a
duplicate id is never committed; the rows dropped are counted as duplicates.

Example (inside the ``updates`` callable that :meth:`FamilyStore.commit` calls again
after each rebase)::

    removed = check.after_rebase(writer)
    report.written -= removed
    report.duplicates += removed
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext import iceberg_io
from catalog_ext.iceberg_io import read_data_files
from catalog_ext.contract import ID_COLUMN
from catalog_ext.physical import StagedWrite
from omni_iceberg.ingest.dedup import BatchIds


class WinnerCheck:
    """The ids one submit has staged, and the snapshot they are known unique through."""

    def __init__(self, staged_ids: BatchIds, checked_through: int):
        self.staged_ids = staged_ids
        self.checked_through = checked_through
        #: data files whose ids were read by the last check (tests assert the cost with it)
        self.files_read: list[str] = []

    def after_rebase(self, writer: StagedWrite) -> int:
        """Drop from ``writer`` the rows whose id a concurrent commit added; return how many.

        A no-op until the writer's base moves (the store rebased it). Idempotent: the
        same base is never checked twice.
        """
        if writer.base_snapshot_id == self.checked_through:
            return 0
        table = writer.catalog.load_table(writer.identifier)
        files = added_between(table, self.checked_through, writer.base_snapshot_id)
        taken = self._ids_taken(table, files) if self.staged_ids else set()
        self.checked_through = writer.base_snapshot_id
        if not taken:
            return 0
        removed = _rewrite_without(writer, table, taken)
        self.staged_ids.discard(taken)
        return removed

    def _ids_taken(self, table: Any, files: list[Any]) -> set[str]:
        taken: set[str] = set()
        self.files_read = []
        for data_file in files:  # one file at a time: memory bounded by the largest file's ids
            ids = read_data_files(table, [data_file], (ID_COLUMN,)).column(0)
            self.files_read.append(data_file.file_path)
            taken.update(ids.filter(pa.array(self.staged_ids.contains(ids))).to_pylist())
        return taken


def added_between(table: Any, since: int, until: int) -> list[Any]:
    """Data files of snapshot ``until`` that ``since`` does not have.

    Walks ``until``'s ancestry back to ``since`` and collects what each snapshot
    added: the cost follows the concurrent commits, not the table size. When
    ``since`` is not an ancestor (history rewritten or expired), every live file of
    ``until`` is returned: slower, still correct.
    """
    files: list[Any] = []
    snap = table.snapshot_by_id(until)
    while snap is not None and snap.snapshot_id != since:
        files += iceberg_io.added_data_files(table, snap.snapshot_id)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    if snap is None:
        return [task.file for task in table.scan(snapshot_id=until).plan_files()]
    return files


def _rewrite_without(writer: StagedWrite, table: Any, taken: set[str]) -> int:
    """Replace the writer's staged files by copies without ``taken`` ids; re-stage them."""
    drop = pa.array(list(taken), pa.string())
    keep: list[Any] = []
    removed = 0
    write_uuid, counter = uuid.uuid4(), itertools.count()
    for data_file in writer.data_files:
        rows = read_data_files(table, [data_file])
        mask = pc.invert(pc.is_in(rows.column(ID_COLUMN), value_set=drop))
        kept = rows.filter(mask)
        if kept.num_rows == rows.num_rows:
            keep.append(data_file)  # untouched files are re-committed as they are
            continue
        removed += rows.num_rows - kept.num_rows
        # the old file becomes an orphan, like the files of an abandoned submit
        keep += iceberg_io.write_data_files(table, kept, write_uuid, counter)
    writer.branch_files, writer.pending_files = keep, []
    writer.rows -= removed
    if keep:
        writer.rebase(writer.base_snapshot_id)  # the branch now holds the rewritten set
    else:
        writer.abandon()  # every row was a winner's: nothing of ours to pin
        writer.staged_snapshot_id = None
    return removed
