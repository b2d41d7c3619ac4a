"""Read tables: Parquet (one record per row) and CSV with a header row.

Both stream: Parquet by record batches, CSV row by row from a text stream, so
memory stays bounded by one batch (or one row) whatever the file size; a CSV line
longer than ``OMNI_MAX_RECORD_BYTES`` ends its file with a problem, found without
holding the line (see :mod:`.files`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omni_iceberg.ingest.sources.files import (
    MAX_RECORD_ENV,
    BoundedTextLines,
    LineTooLong,
    ReadPolicy,
    SourceFile,
    decompressed,
    open_file,
    read_each,
    source_files,
)
from omni_iceberg.ingest.sources.html_dir import one_line
from omni_iceberg.ingest.sources.jsonl import STREAM_ERRORS, stream_failure
from omni_iceberg.ingest.sources.records import TEXT_PLAIN, RecordProblem, SourceItem, SourceRecord

PARQUET_SUFFIXES = (".parquet",)
CSV_SUFFIXES = (".csv", ".csv.gz")

#: rows converted to Python objects at a time; bounds memory for wide rows
PARQUET_BATCH_ROWS = 1024


class ParquetReader:
    """Parquet -> one record per row; ``offset`` is the 0-based row index in the file.

    Field values are what pyarrow's ``as_py()`` gives (str, int, float, bool, None,
    bytes, datetime, Decimal, list, dict). A file pyarrow cannot open, or a damaged
    row group, becomes a :class:`RecordProblem` and ends that file.
    """

    kind = "parquet"
    suffixes = PARQUET_SUFFIXES

    def matches(self, path: str) -> bool:
        """True for ``.parquet`` files."""
        return Path(path).name.lower().endswith(PARQUET_SUFFIXES)

    def read(self, path: str, policy: ReadPolicy | None = None) -> Iterator[SourceItem]:
        """Stream rows of a file, or of every Parquet file of a folder (sorted)."""
        for file in source_files(path, PARQUET_SUFFIXES, policy or ReadPolicy()):
            if isinstance(file, RecordProblem):
                yield file
            else:
                yield from self._read_file(file)

    def _read_file(self, file: SourceFile) -> Iterator[SourceItem]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        src = str(file.path)
        opened = open_file(file)
        if isinstance(opened, RecordProblem):
            yield opened
            return
        try:
            pf = pq.ParquetFile(opened)
        except (pa.ArrowException, OSError) as e:
            opened.close()
            yield RecordProblem(src, f"not a readable Parquet file: {one_line(e)}", offset=0)
            return
        with opened, pf:
            row = 0
            batches = pf.iter_batches(batch_size=PARQUET_BATCH_ROWS)
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except (pa.ArrowException, OSError) as e:
                    yield RecordProblem(
                        src, f"damaged Parquet data, stopped reading here: {one_line(e)}", offset=row
                    )
                    return
                yield from _batch_records(batch, src, row)
                row += batch.num_rows


def _batch_records(batch: Any, src: str, first_row: int) -> Iterator[SourceItem]:
    try:
        rows = batch.to_pylist()
    except (ValueError, OverflowError, ArithmeticError):
        # some value has no Python equivalent (e.g. a timestamp past year 9999):
        # convert cell by cell so only the bad row is rejected, naming its column
        rows = None
    if rows is not None:
        for i, row in enumerate(rows):
            yield SourceRecord(fields=row, source_file=src, offset=first_row + i, content_type=TEXT_PLAIN)
        return
    names = batch.schema.names
    for i in range(batch.num_rows):
        fields: dict[str, Any] = {}
        for name, column in zip(names, batch.columns, strict=True):
            try:
                fields[name] = column[i].as_py()
            except (ValueError, OverflowError, ArithmeticError) as e:
                yield RecordProblem(
                    src, f"value has no Python equivalent: {one_line(e)}",
                    offset=first_row + i, field=name,
                )
                break
        else:
            yield SourceRecord(fields=fields, source_file=src, offset=first_row + i, content_type=TEXT_PLAIN)


class CsvReader:
    """CSV with a header row -> records of column name -> text value.

    ``line`` is the physical line where the record starts (a quoted value may span
    lines). Values stay strings: typing them is the pipeline's job. A row with the
    wrong number of columns, or a value that is not valid UTF-8, is a problem; the
    rest of the file is still read. Python's csv limit on one value (128 KiB) applies.
    """

    kind = "csv"
    suffixes = CSV_SUFFIXES

    def matches(self, path: str) -> bool:
        """True for ``.csv`` and ``.csv.gz`` files."""
        return Path(path).name.lower().endswith(CSV_SUFFIXES)

    def read(self, path: str, policy: ReadPolicy | None = None) -> Iterator[SourceItem]:
        """Stream rows of a file, or of every CSV file of a folder (sorted)."""
        policy = policy or ReadPolicy()
        yield from read_each(path, CSV_SUFFIXES, policy, lambda file: self._read_file(file, policy.max_record_bytes))

    def _read_file(self, file: SourceFile, limit: int) -> Iterator[SourceItem]:
        src = str(file.path)
        opened = open_file(file)
        if isinstance(opened, RecordProblem):
            yield opened
            return
        with decompressed(opened, file.path) as raw:
            # surrogateescape keeps undecodable bytes in the text so the csv module
            # still sees the line structure; each value is checked after parsing
            text = io.TextIOWrapper(
                raw, encoding="utf-8-sig", errors="surrogateescape", newline=""  # type: ignore[type-var]
            )
            reader = csv.reader(BoundedTextLines(text, limit))
            header: list[str] | None = None
            while True:
                start = reader.line_num + 1
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except STREAM_ERRORS as e:
                    yield stream_failure(src, start, e)
                    return
                except LineTooLong as e:
                    yield RecordProblem(src, f"line longer than the limit (more than {limit} bytes); "
                                        f"{MAX_RECORD_ENV} raises the limit. A CSV parser cannot resume "
                                        "inside a record: stopped reading here", line=e.line)
                    return
                except csv.Error as e:
                    # the parser's position is unknown after an error: stop, don't guess
                    yield RecordProblem(src, f"malformed CSV, stopped reading here: {e}", line=start)
                    return
                if not row:
                    continue  # blank line
                if header is None:
                    problem = _header_problem(row, src, start)
                    if problem is not None:
                        yield problem
                        return
                    header = row
                    continue
                yield _row_item(row, header, src, start)


def _header_problem(row: list[str], src: str, line: int) -> RecordProblem | None:
    seen: set[str] = set()
    for position, name in enumerate(row, start=1):
        bad = _invalid_utf8_byte(name)
        if bad is not None:
            return RecordProblem(
                src, f"header column {position}: invalid UTF-8 at byte {bad}; "
                "fix the header, no row can be named without it", line=line,
            )
        if not name.strip():
            return RecordProblem(src, f"header column {position} has no name; name every column", line=line)
        if name in seen:
            return RecordProblem(src, f"duplicate column name {name!r} in header; rename one", line=line)
        seen.add(name)
    return None


def _row_item(row: list[str], header: list[str], src: str, line: int) -> SourceItem:
    if len(row) != len(header):
        return RecordProblem(
            src, f"expected {len(header)} columns (as in the header), got {len(row)}", line=line
        )
    for name, value in zip(header, row, strict=True):
        bad = _invalid_utf8_byte(value)
        if bad is not None:
            return RecordProblem(src, f"invalid UTF-8 at byte {bad} of the value", line=line, field=name)
    return SourceRecord(fields=dict(zip(header, row, strict=True)), source_file=src, line=line,
                        content_type=TEXT_PLAIN)


def _invalid_utf8_byte(value: str) -> int | None:
    """0-based byte position of the first undecodable byte kept by surrogateescape."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return len(value[: e.start].encode("utf-8"))
    return None

