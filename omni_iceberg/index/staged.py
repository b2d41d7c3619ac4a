"""Keep the id index in step with staged writes: write-then-commit, for every writer.

:class:`IndexingHook` is a :attr:`FamilyStore.write_hooks` entry, so ingest, backfill
(local and Spark) and governance rewrites index their files the same way:

* ``files_written``: a file the writer wrote itself is indexed at once, from the rows
  the writer hands over with it (``StagedWrite.flush`` knows each file's rows, in file
  order: ``iceberg_io.write_data_files_with_rows``); only the file's footer is read, for
  the same inline layout a read-back gives. A writer that hands no rows has the file
  read back;
* ``before_commit``: right before each logical commit attempt's compare-and-swap, the
  run's record is brought in line with what its branch holds at that moment - files
  others wrote (Spark executors, the ingest race re-check's rewrites) are indexed, files
  the branch's snapshots deleted (compaction, recomputed batches) are retired - and the
  run is marked complete. Only then can the commit make it visible. Files this process
  indexed that the branch no longer holds (left out after a lost race: units a concurrent
  backfill committed first, ids a concurrent submit added, a dropped batch) will never be
  published: their entries are deleted, not left behind for ``verify`` to find; the same
  for a run that ends up with nothing on the table (its record goes too). Other indexed
  files the branch lacks (an earlier, crashed attempt's) are retired;
* ``abandoned``: a write given up (a failed command, a submit whose every row a
  concurrent one added first) takes its entries with it, before its files are deleted.

What the branch holds is read from the run's own snapshots (base exclusive to staged
head), and from each only the manifests that snapshot wrote: the cost follows the run,
not the table's history. It is ``StagedWrite.run_changes``, which the logical commit's
invariant check has just read for the same attempt (so the manifests are read once).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from catalog_ext.family import FamilyState
from catalog_ext.physical import StagedWrite, file_batch
from omni_iceberg.index.core import IdIndex, IndexWriter
from omni_iceberg.index.errors import IndexInputError
from omni_iceberg.index.inline import given_for_index, index_rows
from omni_iceberg.index.keys import file_key


def batch_of(table: Any, data_file: Any) -> str:
    """A data file's batch, or "" for a file holding several (a compaction's): lookups read the column."""
    return file_batch(table, data_file) or ""


class WriterIndexing:
    """Indexes one staged write's run; see the module docstring."""

    def __init__(self, index: IdIndex, writer: StagedWrite):
        self.index = index
        self.run: IndexWriter = index.writer(writer.identifier, writer.run_id)
        self.run.io = writer.table.io
        self._pending: list[Future] = []
        #: (path, batch, the file's ids and candidate leaves from its writer, or None: read it back)
        self._queued: list[tuple[str, str, Any]] = []
        #: hex keys of the files this process indexed for the run: only these are withdrawn
        #: (a file of an earlier attempt under the same run id may be another story)
        self._mine: set[str] = set()
        self._queued_rows = 0
        #: rows queued and not yet taken by the background thread (what the queue holds in memory)
        self._backlog_rows = 0
        self._lock = threading.Lock()

    def files_written(self, writer: StagedWrite, files: list[Any], rows: list[Any] | None = None) -> None:
        """Index the files in the background: making and writing their entries overlaps
        with the writer preparing its next chunk (the machine's other core), and
        :meth:`before_commit` waits for it - entries are still durable before the commit.

        ``rows``: each file's rows as the writer held them (see the module docstring). Their
        counts are checked against the files' before any of them is queued: a writer that
        hands rows of another file would index ids at positions that hold other rows, so
        it is refused (:class:`IndexInputError`) and nothing of these files is indexed.
        Only their ids and small leaves are kept until the background thread takes them."""
        for done in [f for f in self._pending if f.done()]:
            done.result()  # a failure surfaces at the next write, not only at the commit
        self._pending = [f for f in self._pending if not f.done()]
        given = [None] * len(files) if rows is None else self._given(writer, files, rows)
        with self._lock:
            self._queued += [(f.file_path, batch_of(writer.table, f), g) for f, g in zip(files, given)]
            written_rows = sum(int(getattr(f, "record_count", 0) or 0) for f in files)
            self._queued_rows += written_rows
            self._backlog_rows += written_rows
            due = self._queued_rows >= BACKGROUND_ROWS
            if due:
                self._queued_rows = 0
            behind = self._backlog_rows >= MAX_BACKLOG_ROWS
        if behind:  # the writer outpaces the index: wait, or the queued ids grow with the batch
            self.wait()
        if due:
            self._pending.append(_background().submit(self._add))

    def wait(self) -> None:
        """Wait for the background work queued so far; raise its failure."""
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()

    def _add(self) -> None:
        """Index every file queued so far: files written while the thread was busy go
        together, in fewer and larger index transactions."""
        with self._lock:
            queued, self._queued, self._backlog_rows = self._queued, [], 0
        if queued:
            self.run.reopen()
            self.run.add_files([(p, b, None if g is None else index_rows(*g)) for p, b, g in queued])
            self._mine.update(file_key(p).hex() for p, _, _ in queued)

    @staticmethod
    def _given(writer: StagedWrite, files: list[Any], rows: list[Any]) -> list[Any]:
        """Each file's ids and candidate leaves from its rows (None: read it back); see :meth:`files_written`."""
        if len(rows) != len(files):
            raise IndexInputError(f"the writer of {writer.identifier} (run {writer.run_id}) handed the id index "
                                  f"rows for {len(rows)} data files with {len(files)} files: none of them is indexed")
        for f, r in zip(files, rows):
            if r is not None and r.num_rows != f.record_count:
                raise IndexInputError(
                    f"the writer of {writer.identifier} (run {writer.run_id}) handed the id index {r.num_rows} ids "
                    f"for data file {f.file_path}, which holds {f.record_count} rows: none of the {len(files)} "
                    f"files of this write is indexed")
        return [None if r is None else given_for_index(f.file_path, r, writer.table.io) for f, r in zip(files, rows)]

    def drain(self) -> None:
        """Index what is still queued, wait for the background work; raise its failure."""
        self.wait()
        self._queued_rows = 0
        self._add()

    def before_commit(self, writer: StagedWrite) -> None:
        self.drain()
        table, live, deleted = writer.run_changes()  # read once per attempt, with the commit's invariant check
        indexed = set(self.run.record.files)
        todo = [f for p, f in live.items() if file_key(p).hex() not in indexed]
        live_keys = {file_key(p).hex() for p in live}
        stray = [k for k in indexed if k not in live_keys]
        own = [k for k in stray if k in self._mine]
        retire = [file_key(p).hex() for p in deleted] + [k for k in stray if k not in self._mine]
        if not own and self.run.record.complete and not todo and set(retire) <= set(self.run.record.retired):
            return  # nothing changed since the last attempt
        self.run.reopen()
        left = self.run.withdraw(own, table.io) if own else []
        self._mine -= set(own) - set(left)
        retire += left
        if not todo and not retire and not self.run.record.files and not self.run.record.retired:
            self.run.discard([])  # nothing of this run on the table: no record for verify to call dangling
            return
        self.run.add_files([(f.file_path, batch_of(table, f)) for f in todo])
        self._mine.update(file_key(f.file_path).hex() for f in todo)
        if retire:
            self.run.retire_keys(retire)
        self.run.finish()

    def abandoned(self, writer: StagedWrite) -> None:
        """The write is given up: delete the entries of the files this process indexed, while
        they can still be read. Best effort - the command is failing already, and entries
        left behind stay invisible until ``rebuild`` sweeps the dead run."""
        pending, self._pending = self._pending, []
        for f in pending:
            try:
                f.result()
            except Exception:  # noqa: BLE001 - a failed indexing write: withdraw what did land
                pass
        with self._lock:  # files queued but not indexed yet have no entries to withdraw
            self._queued, self._queued_rows = [], 0
        try:
            self.run.discard(self._mine, writer.table.io)
        except Exception:  # noqa: BLE001 - see the docstring
            return
        self._mine.clear()


#: rows of written files queued before the background thread indexes them together: larger
#: index transactions copy fewer leaf pages per entry (see ``IndexWriter.add_files``)
BACKGROUND_ROWS = 100_000
#: rows queued for the background thread past which a writer waits for it: the queue holds
#: each file's ids and small leaves, so without a bound it grows with the batch whenever
#: the writer is faster than the index (a short-record ingest is)
MAX_BACKLOG_ROWS = 4 * BACKGROUND_ROWS
_BACKGROUND: list[ThreadPoolExecutor] = []
_BACKGROUND_LOCK = threading.Lock()


def _background() -> ThreadPoolExecutor:
    """One indexing thread per process: runs stay in order, and writers share one core's worth."""
    with _BACKGROUND_LOCK:
        if not _BACKGROUND:
            _BACKGROUND.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="omni-index-write"))
        return _BACKGROUND[0]


class IndexingHook:
    """``FamilyStore.write_hooks`` entry: index every staged write of tables that have an index."""

    def __init__(self, opener: Callable[[str], IdIndex | None]):
        self.opener = opener

    def __call__(self, state: FamilyState, writer: StagedWrite) -> None:
        index = self.opener(state.table.identifier)
        if index is not None:
            writer.hooks.append(WriterIndexing(index, writer))
