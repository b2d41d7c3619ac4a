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

The fast path finds lines in pieces of the file rather than one ``readline`` at a
time (a Python call per line cost more than Arrow's parse of it): newlines, line
lengths and blank-line candidates are located with array operations over each
piece, and a block's bytes go to Arrow as they were read. It yields the same lines,
line numbers, blocks and problems as the line-by-line reader.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from omni_iceberg.ingest.sources.files import (
    MAX_RECORD_ENV,
    ReadPolicy,
    SourceFile,
    decompressed,
    open_file,
    read_each,
    read_line,
    source_files,
)
from omni_iceberg.ingest.sources.html_dir import one_line, utf8_reason
from omni_iceberg.ingest.sources.records import TEXT_PLAIN, RecordProblem, SourceBlock, SourceItem, SourceRecord

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson", ".ndjson.gz")
#: a block is also cut at this many bytes of lines (bounds memory with long records)
BLOCK_BYTES = 8 * 1024 * 1024
#: bytes the fast path reads from a file at a time
READ_BYTES = 1 << 20

_BOM = b"\xef\xbb\xbf"
#: the bytes ``bytes.strip()`` removes: a line of nothing else is blank
_STRIPPED = np.zeros(256, dtype=bool)
_STRIPPED[list(b" \t\n\r\x0b\x0c")] = True

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
        yield from read_each(path, JSONL_SUFFIXES, policy, lambda file: self._read_file(file, policy))

    def read_blocks(self, path: str, block_rows: int,
                    policy: ReadPolicy | None = None) -> Iterator[SourceItem | SourceBlock]:
        """Like :meth:`read`, but clean runs of up to ``block_rows`` lines come as one
        :class:`SourceBlock` (see the module docstring).

        A block ends at its ``block_rows``-th line, at the line that brings it to
        :data:`BLOCK_BYTES`, at a problem of the stream (an over-long line, a break) and at
        the end of the file; blank lines are skipped without ending it.
        """
        policy = policy or ReadPolicy()
        for file in source_files(path, JSONL_SUFFIXES, policy):
            if isinstance(file, RecordProblem):
                yield file
                continue
            src = str(file.path)
            pending: list[_Run] = []
            rows = size = 0
            for item in _runs(file, policy.max_record_bytes):
                if isinstance(item, RecordProblem):  # what came before still counts
                    yield from self._block(pending, src)
                    pending, rows, size = [], 0, 0
                    yield item
                    continue
                run: _Run | None = item
                while run is not None:
                    sizes = run.ends - run.start  # bytes of the run up to the end of each line
                    cut = min(block_rows - rows - 1, int(np.searchsorted(sizes, BLOCK_BYTES - size, "left")))
                    if cut >= len(run):
                        pending.append(run)
                        rows, size = rows + len(run), size + int(sizes[-1])
                        run = None
                        continue
                    head, run = run.split(cut + 1)
                    pending.append(head)
                    yield from self._block(pending, src)
                    pending, rows, size = [], 0, 0
            yield from self._block(pending, src)

    def _block(self, pending: list["_Run"], src: str) -> Iterator[SourceItem | SourceBlock]:
        if not pending:
            return

        def one_by_one() -> Iterator[SourceItem]:
            return (self._parse_line(raw, src, line_no) for run in pending for line_no, raw in run.lines())

        lines = _line_numbers(pending)
        data = pending[0].raw() if len(pending) == 1 else b"".join(run.raw() for run in pending)
        table = _columns(data if data.endswith(b"\n") else data + b"\n", len(lines))
        if table is None:
            yield from one_by_one()
        else:
            yield SourceBlock(table, src, lines, one_by_one, TEXT_PLAIN)

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
                    yield _too_long(src, line_no, length, limit)
                    continue
                if line_no == 1 and raw.startswith(_BOM):
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


def _columns(data: bytes, rows: int):
    """``rows`` lines (``data``, each ending in a newline) as an Arrow table when the fast path
    keeps every value as ``json.loads`` would, else None."""
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1))
        if table.num_rows != rows:  # two objects on one line, or one spread over several
            return None
        for f in table.schema:
            if not (pa.types.is_string(f.type) or pa.types.is_int64(f.type) or pa.types.is_boolean(f.type)
                    or pa.types.is_null(f.type)):
                return None
        table.validate(full=True)  # invalid UTF-8 in a value: the line-by-line path names it
    except (pa.ArrowException, ValueError, UnicodeError):
        return None
    return table


def _line_numbers(runs: list["_Run"]) -> range | list[int]:
    """The line number of each line of ``runs``: one range while they follow each other
    (no blank or over-long line between them), a list otherwise."""
    first, count = runs[0].first, 0
    for run in runs:
        if run.first != first + count:
            return [n for run in runs for n in range(run.first, run.first + len(run))]
        count += len(run)
    return range(first, first + count)


def _too_long(src: str, line_no: int, length: int, limit: int) -> RecordProblem:
    return RecordProblem(src, f"line longer than the limit ({length} bytes > {limit}); "
                         f"{MAX_RECORD_ENV} raises the limit", line=line_no)


class _Run(NamedTuple):
    """Consecutive lines of a file, none blank or over the limit: line ``first + i`` is
    ``data[ends[i - 1]:ends[i]]`` (``data[start:ends[0]]`` for the first), its newline included."""

    data: bytes
    start: int
    ends: np.ndarray
    first: int

    def __len__(self) -> int:
        return len(self.ends)

    def raw(self) -> bytes:
        return self.data[self.start:int(self.ends[-1])]

    def lines(self) -> Iterator[tuple[int, bytes]]:
        start = self.start
        for i, end in enumerate(self.ends.tolist()):
            yield self.first + i, self.data[start:end]
            start = end

    def split(self, n: int) -> tuple["_Run", "_Run | None"]:
        """The first ``n`` lines, and the rest (None when there is none)."""
        if n >= len(self.ends):
            return self, None
        return (_Run(self.data, self.start, self.ends[:n], self.first),
                _Run(self.data, int(self.ends[n - 1]), self.ends[n:], self.first + n))


def _runs(file: SourceFile, limit: int) -> Iterator[_Run | RecordProblem]:
    """The file's non-blank lines as runs, with a problem for each line over ``limit`` bytes
    and one where the stream breaks, in file order: what ``JsonlReader._lines`` yields.

    A line over the limit is dropped piece by piece as it is read; at most ``limit`` bytes
    of one line and one piece are held.
    """
    src = str(file.path)
    opened = open_file(file)
    if isinstance(opened, RecordProblem):
        yield opened
        return
    with decompressed(opened, file.path) as stream:
        pieces = _pieces(stream)
        line_no = 0  # lines of the file passed so far
        carry: list[bytes] = []  # the start of a line whose end is not read yet
        carry_len = 0
        skipping = False  # that line is over the limit: its bytes are counted, not kept
        while True:
            try:
                piece = next(pieces, b"")
            except STREAM_ERRORS as e:
                yield stream_failure(src, line_no + 1, e)
                return
            if not piece:  # the end: a last line without a newline
                if skipping:
                    yield _too_long(src, line_no + 1, carry_len, limit)
                elif carry:
                    data = b"".join(carry)
                    yield from _split(data, 0, len(data), line_no, limit, src)[0]
                return
            cut = piece.rfind(b"\n") + 1
            if not cut:  # no line ends in this piece
                carry_len += len(piece)
                if not skipping:
                    carry.append(piece)
                    if carry_len > limit:
                        skipping, carry = True, []
                continue
            if skipping:
                end = piece.find(b"\n")
                line_no += 1
                yield _too_long(src, line_no, carry_len + end, limit)
                data, start, skipping = piece, end + 1, False
            else:
                data, start = piece, 0
                if carry:  # only the line begun in earlier pieces is joined, not the whole piece
                    start = piece.find(b"\n") + 1
                    head = b"".join([*carry, piece[:start]])
                    yield from _split(head, 0, len(head), line_no, limit, src)[0]
                    line_no += 1
            found, lines = _split(data, start, cut, line_no, limit, src)
            yield from found
            line_no += lines
            tail = data[cut:]
            carry, carry_len = ([tail] if tail else []), len(tail)
            if carry_len > limit:
                skipping, carry = True, []


def _pieces(stream) -> Iterator[bytes]:
    """The stream's bytes, about :data:`READ_BYTES` at a time.

    A gzip stream is read in the steps of its own buffer, as ``readline`` reads it, so a
    stream that breaks loses the same bytes as on the line-by-line path; what was read
    before the break is given out before the error is raised.
    """
    gz = isinstance(stream, gzip.GzipFile)
    got: list[bytes] = []
    size = 0
    while True:
        try:
            piece = stream.read1(-1) if gz else stream.read1(READ_BYTES)
        except STREAM_ERRORS:
            if got:
                yield b"".join(got)
            raise
        if not piece:
            break
        got.append(piece)
        size += len(piece)
        if size >= READ_BYTES:
            yield got[0] if len(got) == 1 else b"".join(got)
            got, size = [], 0
    if got:
        yield b"".join(got)


def _split(data: bytes, lo: int, hi: int, line_no: int, limit: int,
           src: str) -> tuple[list[_Run | RecordProblem], int]:
    """The whole lines of ``data[lo:hi]`` (the last one may lack its newline at the end of a
    file), numbered from ``line_no + 1``: runs between blank and over-long lines, and a
    problem for each over-long one; and how many lines that was."""
    if hi <= lo:
        return [], 0
    arr = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(arr[lo:hi] == 10) + (lo + 1)
    if not len(ends) or ends[-1] < hi:
        ends = np.append(ends, hi)
    starts = np.empty_like(ends)
    starts[0] = lo
    starts[1:] = ends[:-1]
    lengths = ends - starts - (arr[ends - 1] == 10)
    over = lengths > limit
    if line_no == 0 and not over[0] and data.startswith(_BOM, lo):
        starts[0] += 3  # a UTF-8 BOM is an editor artefact, not data
    # blank lines start with a byte strip() removes; those few are checked whole
    maybe = (starts == ends) | _STRIPPED[arr[np.minimum(starts, ends - 1)]]
    breaks = set(np.flatnonzero(over).tolist())
    breaks.update(i for i in np.flatnonzero(maybe & ~over).tolist()
                  if not data[int(starts[i]):int(ends[i])].strip())
    out: list[_Run | RecordProblem] = []
    prev = 0
    for i in sorted(breaks):
        if i > prev:
            out.append(_Run(data, int(starts[prev]), ends[prev:i], line_no + 1 + prev))
        if over[i]:
            out.append(_too_long(src, line_no + 1 + i, int(lengths[i]), limit))
        prev = i + 1
    if prev < len(ends):
        out.append(_Run(data, int(starts[prev]), ends[prev:], line_no + 1 + prev))
    return out, len(ends)


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
