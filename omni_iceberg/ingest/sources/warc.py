"""Read web crawls: HTML responses from WARC files (plain or gzip per record).

Only ``response`` records whose HTTP Content-Type is HTML become records; requests,
metadata, revisits and non-HTML payloads are part of a crawl, not documents, and
are passed over. A truncated or corrupt tail ends the file with one
:class:`RecordProblem` at the byte offset where reading broke.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omni_iceberg.ingest.sources.files import MAX_RECORD_ENV, ReadPolicy, SourceFile, open_file, read_each
from omni_iceberg.ingest.sources.html_dir import one_line
from omni_iceberg.ingest.sources.records import RecordProblem, SourceItem, SourceRecord

WARC_SUFFIXES = (".warc", ".warc.gz")
HTML_MIME_TYPES = ("text/html", "application/xhtml+xml")


def parse_content_type(value: str | None) -> tuple[str, str | None]:
    """Split a Content-Type header into (lower-case mime type, charset or None).

    >>> parse_content_type('text/html; charset="ISO-8859-1"')
    ('text/html', 'iso-8859-1')
    """
    if not value:
        return "", None
    mime, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip("\"'").lower() or None
    return mime.strip().lower(), charset


def decode_body(body: bytes, charset: str | None) -> tuple[str | None, str | None]:
    """Decode an HTTP body: the declared charset, else UTF-8. Returns (text, problem)."""
    codec = charset or "utf-8"
    try:
        codecs.lookup(codec)
    except LookupError:
        # an unknown label is common in real crawls; UTF-8 is the web's default
        codec = "utf-8"
    try:
        return body.decode(codec), None
    except UnicodeDecodeError as e:
        bad = body[e.start : e.start + 4].hex(" ")
        declared = f"declared charset {charset!r}" if charset else "no charset declared, tried utf-8"
        return None, f"body not decodable ({declared}) at byte {e.start} (bytes {bad}): {e.reason}"


class WarcReader:
    """WARC -> records ``{raw_data, url, warc_date, content_type, warc_record_id}``.

    ``offset`` is the record's byte offset in the (compressed) file, the value a
    CDX index would store. A folder is read as all its WARC files in sorted order.
    """

    kind = "warc"
    suffixes = WARC_SUFFIXES

    def matches(self, path: str) -> bool:
        """True for ``.warc`` and ``.warc.gz`` files."""
        return Path(path).name.lower().endswith(WARC_SUFFIXES)

    def read(self, path: str, policy: ReadPolicy | None = None) -> Iterator[SourceItem]:
        """Stream HTML responses (and problems) from a file or folder."""
        policy = policy or ReadPolicy()
        yield from read_each(path, WARC_SUFFIXES, policy, lambda file: self._read_file(file, policy.max_record_bytes))

    def _read_file(self, file: SourceFile, limit: int) -> Iterator[SourceItem]:
        from warcio.archiveiterator import WARCIterator

        src = str(file.path)
        # raw bytes, not decompressed: warcio decompresses per record to know offsets
        f = open_file(file)
        if isinstance(f, RecordProblem):
            yield f
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            records = WARCIterator(f)
            it = iter(records)
            end = 0  # where the last complete record ended: the last sound place
            while True:
                start = end
                try:
                    rec = next(it)
                except StopIteration:
                    break
                except Exception as e:  # noqa: BLE001
                    # warcio raises many types on damaged input (ArchiveLoadFailed,
                    # zlib.error, EOFError, AttributeError on half a header, ...)
                    yield _broken(src, start, one_line(e))
                    return
                declared = (rec.rec_headers.get_header("Content-Length") or "").strip()
                if rec.rec_type is None or not declared.isdigit():
                    # every WARC record declares both; warcio reads a missing or bad
                    # length as 0, which is how a record cut inside its headers looks
                    yield _broken(src, start, "record without a WARC-Type or a valid Content-Length")
                    return
                try:
                    mime, charset = _html_type(rec)
                    # at most one byte past the limit: a body may also be gzip or chunked inside
                    body = rec.content_stream().read(limit + 1) if mime else None
                    missing = _drain(rec)
                    records.read_to_end()  # moves records.offset to the next record
                except Exception as e:  # noqa: BLE001 - same reason as above
                    yield _broken(src, start, one_line(e))
                    return
                if missing:
                    yield _broken(src, start, f"the record lacks {missing} of its declared bytes")
                    return
                if not _member_complete(records):
                    yield _broken(src, start, "the record's gzip member is cut short")
                    return
                # never behind the record's start: warcio's offset is garbage for a
                # gzip that is one member for many records (reported on the next one)
                end = max(records.offset, start)
                if body is not None and len(body) > limit:
                    yield RecordProblem(src, f"response body longer than the limit (more than {limit} bytes); "
                                        f"{MAX_RECORD_ENV} raises the limit", offset=start, field="raw_data")
                elif body is not None:
                    yield _item(rec, body, charset, src, start)
            if end < size:
                # warcio ends quietly when a file is cut inside a record's headers:
                # bytes left over after the last whole record say so
                yield _broken(src, end, f"the {size - end} bytes after the last complete "
                              "record do not form a record")


def _broken(src: str, offset: int, why: str) -> RecordProblem:
    return RecordProblem(src, f"corrupt or truncated WARC: {why}; stopped reading here", offset=offset)


def _html_type(rec: Any) -> tuple[str | None, str | None]:
    """(mime, charset) of an HTML response record; (None, None) for any other record."""
    if rec.rec_type != "response" or rec.http_headers is None:
        return None, None
    mime, charset = parse_content_type(rec.http_headers.get_header("Content-Type"))
    return (mime, charset) if mime in HTML_MIME_TYPES else (None, None)


def _item(rec: Any, body: bytes, charset: str | None, src: str, offset: int) -> SourceItem:
    text, problem = decode_body(body, charset)
    if problem is not None:
        return RecordProblem(src, problem, offset=offset, field="raw_data")
    headers = rec.rec_headers
    fields = {
        "raw_data": text,
        "url": headers.get_header("WARC-Target-URI"),
        "warc_date": headers.get_header("WARC-Date"),
        "content_type": rec.http_headers.get_header("Content-Type"),
        "warc_record_id": headers.get_header("WARC-Record-ID"),
    }
    return SourceRecord(fields=fields, source_file=src, offset=offset)


def _member_complete(records: Any) -> bool:
    """False when the record's gzip member lacks its trailer (file cut in the last bytes).

    Looks at warcio's decompressor, an internal: if that ever moves, the check is
    skipped rather than failing every file.
    """
    reader = getattr(records, "reader", None)
    decompressor = getattr(reader, "decompressor", None)
    return decompressor is None or getattr(decompressor, "eof", True)


def _drain(rec: Any) -> int:
    """Read what is left of the record; return how many declared bytes never came.

    warcio stops quietly at the end of a cut file, so a short last record would
    otherwise pass as complete.
    """
    from warcio.limitreader import LimitReader

    raw = rec.raw_stream
    while raw.read(65536):
        pass
    return raw.limit if isinstance(raw, LimitReader) else 0

