"""The id index takes a written file's ids from the rows its writer held, not from the file.

``StagedWrite.flush`` knows which rows went into which data file
(``iceberg_io.write_data_files_with_rows``) and hands them to the index with the files;
the index then reads only each file's footer. These tests hold that to the contract of
the read-back it replaces: the same entries (id, file, row position, inline values) and
the same file records for the same batch, and rows that do not match their file are
refused before anything of the write is indexed or committed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_ext import iceberg_io
from omni_iceberg.api import Omni
from omni_iceberg.index import inline
from omni_iceberg.index.backend import FILE_PREFIX, RUN_PREFIX, FileRecord
from omni_iceberg.index.core import IdIndex
from omni_iceberg.index.errors import IndexInputError
from omni_iceberg.index.lmdb_backend import LmdbBackend

ROWS = 3_000


def _jsonl(path: Path, rows: int = ROWS) -> Path:
    """Records with the kinds of leaves the index inlines: short ASCII and non-ASCII text, a
    field missing from some records (nulls), integers, floats, booleans."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            rec = {"raw_data": f"<p>record {i} " + "words " * (i % 9) + "</p>", "url": f"https://ex.org/{i}",
                   "n": i * 7, "score": i / 3, "ok": i % 2 == 0}
            if i % 5:
                rec["title"] = f"titre n°{i} é"
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def _content(index: IdIndex) -> tuple[dict[bytes, tuple], dict[bytes, dict]]:
    """Every entry (key -> stored value) and every file record (without its run) of an index."""
    entries = {e[0] + e[1]: tuple(e[2:]) for e in index.backend.scan_entries()}
    files = {}
    for key, value in index.backend.scan_meta(FILE_PREFIX):
        rec = json.loads(FileRecord.from_bytes(value).to_bytes())
        rec.pop("run")
        files[key] = rec
    return entries, files


def _read_back(index: IdIndex, tmp_path: Path) -> tuple[dict[bytes, tuple], dict[bytes, dict]]:
    """The same files indexed again into a fresh index the old way: each read back."""
    recs = [FileRecord.from_bytes(v) for _, v in index.backend.scan_meta(FILE_PREFIX)]
    fresh = IdIndex(LmdbBackend(tmp_path / "read-back"), index.logical_identifier)
    fresh.writer(recs[0].table, "read-back").add_files([(rec.path, rec.batch) for rec in recs])
    got = _content(fresh)
    fresh.close()
    return got


@pytest.fixture
def omni(omni_home):
    o = Omni(config=omni_home)
    o.create_table("web")
    return o


def test_entries_from_the_writers_rows_equal_the_entries_read_back(omni, tmp_path, monkeypatch):
    reads = []
    real_read = inline.read_for_index
    monkeypatch.setattr(inline, "read_for_index", lambda path, io=None: reads.append(path) or real_read(path, io))
    report = omni.submit("web", [str(_jsonl(tmp_path / "a.jsonl"))], batch="b1", progress=False)
    assert report.written == ROWS
    assert reads == []  # no file was read back: every file came with its rows

    state = omni.state("web")
    index = omni.context.open_index(state.table.identifier)
    entries, files = _content(index)
    assert len(entries) == ROWS
    assert sum(rec["rows"] for rec in files.values()) == ROWS
    layouts = {tuple(tuple(s) for s in rec["inline"]) for rec in files.values()}
    kinds = {kind for layout in layouts for _, kind, _ in layout}
    assert {"s", "i8", "f8", "b1"} <= kinds, layouts  # text, integers, floats, booleans inlined

    monkeypatch.setattr(inline, "read_for_index", real_read)
    again_entries, again_files = _read_back(index, tmp_path)
    assert again_files == files  # same paths, batches, row counts, inline layouts
    assert again_entries == entries  # same ids, files, row positions, inline values
    assert omni.verify_index("web").ok


def test_rows_that_do_not_match_their_file_are_refused_and_nothing_is_committed(omni, tmp_path, monkeypatch):
    real = iceberg_io.write_data_files_with_rows

    def one_row_short(*args, **kwargs):
        written = real(*args, **kwargs)
        (first, rows), rest = written[0], written[1:]
        return [(first, rows.slice(1)), *rest]

    monkeypatch.setattr(iceberg_io, "write_data_files_with_rows", one_row_short)
    with pytest.raises(IndexInputError) as failed:
        omni.submit("web", [str(_jsonl(tmp_path / "a.jsonl"))], batch="b1", progress=False)
    message = str(failed.value)
    assert ".parquet" in message and "ids for data file" in message and "none of the" in message
    state = omni.state("web")
    assert state.batch("b1") is None and state.version == omni.state("web").version
    index = omni.context.open_index(state.table.identifier)
    assert list(index.backend.scan_entries()) == []
    assert list(index.backend.scan_meta(FILE_PREFIX)) == []
    assert list(index.backend.scan_meta(RUN_PREFIX)) == []

    monkeypatch.setattr(iceberg_io, "write_data_files_with_rows", real)  # the same batch goes in afterwards
    assert omni.submit("web", [str(_jsonl(tmp_path / "a.jsonl"))], batch="b1", progress=False).written == ROWS
    assert len(list(index.backend.scan_entries())) == ROWS


def test_rows_that_name_a_leaf_otherwise_have_the_file_read_back(tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "f.parquet"
    table = pa.table({"_ai_unique_id_": ["0" * 32, "f" * 32], "url": ["a", "b"]})
    pq.write_table(table, path)
    ids, leaves = inline.given_for_index(str(path), table)
    assert ids.to_pylist() == ["0" * 32, "f" * 32] and [n for n, _ in leaves] == ["url"]
    assert inline.given_for_index(str(path), table.rename_columns(["_ai_unique_id_", "link"])) is None
    assert inline.given_for_index(str(path), pa.table({"url": ["a", "b"]})) is None


class _RunsWhenAsked:
    """An executor that runs a task only when someone waits for it: an index thread that
    never catches up on its own, the worst case for a writer that queues ids for it."""

    class _Task:
        def __init__(self, fn):
            self.fn, self.ran = fn, False

        def done(self) -> bool:
            return self.ran

        def result(self):
            if not self.ran:
                self.ran = True
                self.fn()

    def submit(self, fn):
        return self._Task(fn)


def test_a_writer_faster_than_the_index_waits_instead_of_queueing_the_whole_batch(omni, tmp_path, monkeypatch):
    from catalog_ext import physical
    from omni_iceberg.index import staged
    from omni_iceberg.ingest import pipeline

    monkeypatch.setattr(staged, "_background", lambda: _RunsWhenAsked())
    monkeypatch.setattr(staged, "BACKGROUND_ROWS", 100)
    monkeypatch.setattr(staged, "MAX_BACKLOG_ROWS", 400)
    monkeypatch.setattr(physical, "WRITE_BUFFER_BYTES", 16_000)  # a flush every ~100 records
    backlog, writes = [], []
    real = staged.WriterIndexing.files_written

    def files_written(self, writer, files, rows=None):
        real(self, writer, files, rows)
        writes.append(sum(f.record_count for f in files))
        backlog.append(self._backlog_rows)

    monkeypatch.setattr(staged.WriterIndexing, "files_written", files_written)
    report = pipeline.submit(omni.store, "aidata", "web", [str(_jsonl(tmp_path / "a.jsonl"))], "b1",
                             chunk_rows=100, progress=False)
    assert report.written == ROWS and len(writes) >= 10
    # ids held for the index stay under the bound plus one write, whatever the batch's size
    assert max(backlog) < 400 + max(writes), (max(backlog), max(writes))
    assert omni.verify_index("web").ok
    index = omni.context.open_index(omni.state("web").table.identifier)
    assert len(list(index.backend.scan_entries())) == ROWS
