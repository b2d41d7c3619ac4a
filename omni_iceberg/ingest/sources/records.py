"""What every source reader yields.

A reader turns one input path into a stream of :class:`SourceRecord` (a flat dict of
field values plus where it came from) interleaved with :class:`RecordProblem` for a
record that could not be read (malformed JSON, invalid UTF-8, ...). A problem is not
an exception: the ingest pipeline counts it and keeps it in the rejects table, and the
rest of the file is still read. Errors that stop the whole source (path missing,
unknown format) raise :class:`catalog_ext.errors.SourceError` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence, Union


#: what readers know ``raw_data`` to be (``SourceRecord.content_type``): a page, or text that
#: is no markup - a field of a JSONL/CSV/Parquet record, text extracted from a PDF
TEXT_HTML = "text/html"
TEXT_PLAIN = "text/plain"


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record read from a source.

    ``fields`` holds plain Python values (str, int, float, bool, None, or nested
    dict/list which the pipeline stores as JSON text). ``line`` is 1-based where the
    format has lines (JSONL, CSV); ``offset`` is a byte offset (WARC) or row index
    (Parquet); for one-record-per-file sources both may be None. ``content_type`` is
    what the reader knows ``raw_data`` to be (``text/html``, ``text/x-java``,
    ``text/plain``): the pipeline stores it as ``RawData.content_type`` unless the
    record has a field of that name, and ``html_parser`` parses only HTML.
    """

    fields: dict[str, Any]
    source_file: str
    line: int | None = None
    offset: int | None = None
    content_type: str | None = None

    @property
    def location(self) -> str:
        """Human-readable place, e.g. ``data.jsonl:12`` or ``crawl.warc.gz@4096``."""
        return format_location(self.source_file, self.line, self.offset)


@dataclass(frozen=True, slots=True)
class RecordProblem:
    """A record that could not be turned into a :class:`SourceRecord`."""

    source_file: str
    reason: str
    line: int | None = None
    offset: int | None = None
    field: str | None = None

    @property
    def location(self) -> str:
        return format_location(self.source_file, self.line, self.offset)

    def message(self) -> str:
        """One line naming file, line/offset, field and what is wrong."""
        where = self.location
        if self.field:
            return f"{where}: field '{self.field}': {self.reason}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True, slots=True)
class SourceBlock:
    """Many consecutive records of one file, already parsed into Arrow columns.

    Only readers asked for blocks yield them (the JSONL fast path, see
    :mod:`.jsonl`), and only for input whose columns are plain - text, 64-bit
    integers, booleans, nulls - so the pipeline can check and map them column by
    column. ``lines`` is the 1-based line of each row. ``records`` re-reads the same
    lines one record at a time: the pipeline falls back to it whenever the block needs
    a per-record decision (two fields landing in one column, a type clash with the
    table), so both paths accept and reject exactly the same records.
    """

    table: Any  # pyarrow.Table: one row per record
    source_file: str
    lines: Sequence[int]  # a range where the lines follow each other
    records: Callable[[], Iterator["SourceRecord | RecordProblem"]]
    content_type: str | None = None  # as SourceRecord.content_type, for every row

    def __len__(self) -> int:
        return len(self.lines)


SourceItem = Union[SourceRecord, RecordProblem]


class SourceReader(Protocol):
    """A reader for one kind of source. ``kind`` is its CLI name (``jsonl``, ``warc``...)."""

    kind: str

    def matches(self, path: str) -> bool:
        """True when this reader handles ``path`` (by suffix, or a folder's content)."""
        ...

    def read(self, path: str, policy: Any = None) -> Iterator[SourceItem]:
        """Yield records and problems, streaming: never load the whole input.

        ``policy`` (a :class:`~.files.ReadPolicy`) says which files may be opened and
        how much of one is held at once."""
        ...


def format_location(source_file: str, line: int | None, offset: int | None) -> str:
    if line is not None:
        return f"{source_file}:{line}"
    if offset is not None:
        return f"{source_file}@{offset}"
    return source_file
