"""Read a folder of HTML pages: one record per ``.html``/``.htm`` file.

This module also holds the small helpers the other readers share
(:func:`iter_files`, :func:`read_text_file`, :func:`utf8_reason`, :func:`one_line`),
so that all of them visit files in the same deterministic order and word problems
the same way. Readers walk and open files through :mod:`.files`, which refuses what a
hostile folder could do to a submit (FIFOs, links out of the tree, huge files).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from catalog_ext.errors import SourceError
from omni_iceberg.ingest.sources.files import MAX_DOCUMENT_ENV, ReadPolicy, SourceFile, read_document, source_files
from omni_iceberg.ingest.sources.records import TEXT_HTML, RecordProblem, SourceItem, SourceRecord

HTML_SUFFIXES = (".html", ".htm")

#: A page is one record held in memory whole; anything larger is not a web page
#: but a dump, and is rejected rather than risking the worker's memory.
MAX_HTML_BYTES = 64 * 1024 * 1024


def iter_files(root: str | os.PathLike[str], suffixes: tuple[str, ...]) -> Iterator[Path]:
    """Yield files under ``root`` whose lower-cased name ends with one of ``suffixes``.

    Deterministic: folders and files are visited in sorted (code point) order, files
    of a folder before its sub-folders' files. Hidden folders (``.git``, ``.venv``)
    and ``__pycache__`` are skipped because they hold tooling state, not content.
    Symbolic links to folders are not followed (no cycles); links to files are
    yielded. A folder that cannot be listed raises :class:`SourceError`.

    Names only, for telling a folder's kind and for trusted trees (the demo corpora):
    readers walk with :func:`.files.source_files`, which applies the rules on what may
    be opened.
    """
    for folder, dirnames, filenames in os.walk(root, onerror=_unlistable):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            if name.lower().endswith(suffixes):
                yield Path(folder, name)


def _unlistable(e: OSError) -> None:
    raise SourceError(
        f"cannot list folder {e.filename}: {e.strerror or e} (fix its permissions or leave it out)"
    ) from e


def has_files(root: str | os.PathLike[str], suffixes: tuple[str, ...]) -> bool:
    """True when :func:`iter_files` would yield at least one file (stops at the first)."""
    return next(iter_files(root, suffixes), None) is not None


def relative_name(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` with ``/`` separators (the stored ``path`` field)."""
    return path.relative_to(root).as_posix()


def read_text_file(file: SourceFile, max_bytes: int, setting: str | None) -> str | RecordProblem:
    """Return the file's text (strict UTF-8, a BOM is dropped) or the problem why not.

    Checks the size before reading so an oversized file is never loaded; ``setting``
    names the variable that raises ``max_bytes`` (None when a reader's own cap binds).
    """
    data = read_document(file, max_bytes, setting)
    if isinstance(data, RecordProblem):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return RecordProblem(str(file.path), utf8_reason(e), field="raw_data")


def document_limit(cap: int | None, policy: ReadPolicy) -> tuple[int, str | None]:
    """The size limit of a file read whole: the reader's own ``cap`` or the setting's, the
    lower, and the variable to name when it is the setting's."""
    if cap is None or policy.max_document_bytes < cap:
        return policy.max_document_bytes, MAX_DOCUMENT_ENV
    return cap, None


def utf8_reason(e: UnicodeDecodeError, *, unit: str = "file") -> str:
    """One-line reason for a UTF-8 decoding failure, naming the 0-based byte position."""
    bad = e.object[e.start : e.start + 4].hex(" ")
    return f"invalid UTF-8 at byte {e.start} of the {unit} (bytes {bad}): {e.reason}"


def one_line(e: BaseException) -> str:
    """``Type: first line of the message`` - problem reasons must stay on one line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


class HtmlDirReader:
    """Folder of HTML pages -> records ``{raw_data, path, url}``.

    ``path`` is relative to the folder, ``url`` is None (a folder has no crawl URL;
    the WARC reader fills it). A single ``.html`` file is also accepted.

    >>> HtmlDirReader().kind
    'html_dir'
    """

    kind = "html_dir"
    suffixes = HTML_SUFFIXES

    def matches(self, path: str) -> bool:
        """A folder holding at least one HTML file, or one ``.html``/``.htm`` file."""
        p = Path(path)
        if p.is_dir():
            return has_files(p, HTML_SUFFIXES)
        return p.name.lower().endswith(HTML_SUFFIXES)

    def read(self, path: str, policy: ReadPolicy | None = None) -> Iterator[SourceItem]:
        """One :class:`SourceRecord` per page, sorted by relative path."""
        policy = policy or ReadPolicy()
        limit, setting = document_limit(MAX_HTML_BYTES, policy)
        for file in source_files(path, HTML_SUFFIXES, policy):
            if isinstance(file, RecordProblem):
                yield file
                continue
            text = read_text_file(file, limit, setting)
            if isinstance(text, RecordProblem):
                yield text
                continue
            fields = {"raw_data": text, "path": relative_name(file.path, file.root), "url": None}
            yield SourceRecord(fields=fields, source_file=str(file.path), content_type=TEXT_HTML)
