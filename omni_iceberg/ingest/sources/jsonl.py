"""Read JSON Lines (plain or gzip): one record per line holding a JSON object.

Fast path (:meth:`JsonlReader.read_blocks`, what ``omni submit`` uses): lines are
gathered into blocks and each block is parsed by Arrow's JSON reader into columns,
which costs a fraction of a ``json.loads`` per line. A block is only yielded as
columns when that changes nothing: every line one object, every column text, 64-bit
integer, boolean or null (Arrow would read ``1.0`` and ``1`` alike as a double,
too-large integers as doubles, and date-like text as timestamps - all of which the
line-by-line path keeps apart), and all text valid UTF-8 (Arrow does not check).
Anything else - a bad line anywhere in the block included - sends the block through
the line-by-line path, so problems are reported exactly as before.

Lines are read as bytes and decoded one at a time, so one line with invalid UTF-8
or broken JSON becomes a :class:`RecordProblem` and the rest of the file is still
read. A line longer than ``OMNI_MAX_RECORD_BYTES`` is such a problem too, found
without holding it (see :mod:`.files`). A corrupt or truncated gzip stream ends the
file with one problem naming the line where reading stopped.
"""

from __future__ import annotations

import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

from omni_iceberg.ingest.sources.files import (
    MAX_RECORD_ENV,
    ReadPolicy,
    SourceFile,
    decompressed,
    open_file,
    read_line,
    source_files,
)
from omni_iceberg.ingest.sources.html_dir import one_line, utf8_reason
from omni_iceberg.ingest.sources.records import TEXT_PLAIN, RecordProblem, SourceBlock, SourceItem, SourceRecord

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson", ".ndjson.gz")
#: a block is also cut at this many bytes of lines (bounds memory with long records)
BLOCK_BYTES = 8 * 1024 * 1024

#: What a damaged file raises while being read (gzip.BadGzipFile is an OSError).
STREAM_ERRORS = (OSError, EOFError, zlib.error)


def stream_failure(source_file: str, line: int, e: BaseException) -> RecordProblem:
    """The problem recorded when the byte stream itself breaks at ``line``."""
    return RecordProblem(
        source_file,
        f"corrupt or truncated file, stopped reading here: {one_line(e)}",
        line=line,
    )


class JsonlReader:
    """JSON Lines -> records whose fields are each object's top-level keys.

    ``line`` is the 1-based physical line. Blank lines are skipped. A folder is read
    as all its JSON Lines files in sorted order.
    """

    kind = "jsonl"
    suffixes = JSONL_SUFFIXES

    def matches(self, path: str) -> bool:
        """True for ``.jsonl``, ``.jsonl.gz``, ``.json.gz``, ``.ndjson`` (``.gz``) files."""
        return Path(path).name.lower().endswith(JSONL_SUFFIXES)

    def read(self, path: str, policy: ReadPolicy | None = None) -> Iterator[SourceItem]:
        """Stream records and per-line problems from a file or folder."""
        policy = policy or ReadPolicy()
        for file in source_files(path, JSONL_SUFFIXES, policy):
            if isinstance(file, RecordProblem):
                yield file
            else:
                yield from self._read_file(file, policy)

    def read_blocks(self, path: str, block_rows: int,
                    policy: ReadPolicy | None = None) -> Iterator[SourceItem | SourceBlock]:
        """Like :meth:`read`, but clean runs of up to ``block_rows`` lines come as one
        :class:`SourceBlock` (see the module docstring)."""
        policy = policy or ReadPolicy()
        for file in source_files(path, JSONL_SUFFIXES, policy):
            if isinstance(file, RecordProblem):
                yield file
                continue
            src = str(file.path)
            pending: list[tuple[int, bytes]] = []
            size = 0
            for item in self._lines(file, policy.max_record_bytes):
                if isinstance(item, RecordProblem):  # the stream broke: what came before still counts
                    yield from self._block(pending, src)
                    pending, size = [], 0
                    yield item
                    continue
                pending.append(item)
                size += len(item[1])
                if len(pending) >= block_rows or size >= BLOCK_BYTES:
                    yield from self._block(pending, src)
                    pending, size = [], 0
            yield from self._block(pending, src)

    def _block(self, pending: list[tuple[int, bytes]], src: str) -> Iterator[SourceItem | SourceBlock]:
        if not pending:
            return

        def one_by_one() -> Iterator[SourceItem]:
            return (self._parse_line(raw, src, line_no) for line_no, raw in pending)

        table = _columns(pending)
        if table is None:
            yield from one_by_one()
        else:
            yield SourceBlock(table, src, [line_no for line_no, _ in pending], one_by_one, TEXT_PLAIN)

    def _read_file(self, file: SourceFile, policy: ReadPolicy) -> Iterator[SourceItem]:
        src = str(file.path)
        for item in self._lines(file, policy.max_record_bytes):
            yield item if isinstance(item, RecordProblem) else self._parse_line(item[1], src, item[0])

    @staticmethod
    def _lines(file: SourceFile, limit: int) -> Iterator[tuple[int, bytes] | RecordProblem]:
        """(line number, bytes) of each non-blank line; a line over ``limit`` bytes is a problem;
        a broken stream ends with its problem."""
        src = str(file.path)
        opened = open_file(file)
        if isinstance(opened, RecordProblem):
            yield opened
            return
        with decompressed(opened, file.path) as stream:
            line_no = 0
            while True:
                try:
                    raw, length = read_line(stream, limit)
                except STREAM_ERRORS as e:
                    yield stream_failure(src, line_no + 1, e)
                    return
                if not raw and not length:
                    return
                line_no += 1
                if not raw:
                    yield RecordProblem(src, f"line longer than the limit ({length} bytes > {limit}); "
                                        f"{MAX_RECORD_ENV} raises the limit", line=line_no)
                    continue
                if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]  # a UTF-8 BOM is an editor artefact, not data
                if not raw.strip():
                    continue
                yield line_no, raw

    @staticmethod
    def _parse_line(raw: bytes, src: str, line_no: int) -> SourceItem:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return RecordProblem(src, utf8_reason(e, unit="line"), line=line_no, field=_undecodable_field(raw))
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            return RecordProblem(src, f"malformed JSON at column {e.colno}: {e.msg}", line=line_no)
        except RecursionError:
            return RecordProblem(src, "malformed JSON: nested too deeply", line=line_no)
        if not isinstance(value, dict):
            return RecordProblem(
                src, f"expected a JSON object, got {_json_type(value)}", line=line_no
            )
        return SourceRecord(fields=value, source_file=src, line=line_no, content_type=TEXT_PLAIN)


def _columns(pending: list[tuple[int, bytes]]):
    """The lines as an Arrow table when the fast path keeps every value as ``json.loads`` would, else None."""
    import pyarrow as pa
    import pyarrow.json as pj

    data = b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for _, raw in pending)
    try:
        table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1))
        if table.num_rows != len(pending):  # two objects on one line, or one spread over several
            return None
        for f in table.schema:
            if not (pa.types.is_string(f.type) or pa.types.is_int64(f.type) or pa.types.is_boolean(f.type)
                    or pa.types.is_null(f.type)):
                return None
        table.validate(full=True)  # invalid UTF-8 in a value: the line-by-line path names it
    except (pa.ArrowException, ValueError, UnicodeError):
        return None
    return table


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _undecodable_field(raw: bytes) -> str | None:
    """The top-level key whose key or value holds the invalid bytes, when the line still parses.

    surrogateescape keeps each bad byte as one marker character, so the JSON structure
    survives decoding and the marker shows which field the bytes were in.
    """
    try:
        value = json.loads(raw.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    for key, item in value.items():
        text = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        if _ESCAPED_BYTE.search(key) or _ESCAPED_BYTE.search(text):
            return key
    return None


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"
