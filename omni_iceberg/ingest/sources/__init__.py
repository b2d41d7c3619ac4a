"""Source readers, and how a path is matched to one.

Every reader streams :class:`SourceRecord` and :class:`RecordProblem` items (see
:mod:`.records`). The split between the two failure paths is the same everywhere:

- :class:`~catalog_ext.errors.SourceError` (raised) when the source cannot be read
  at all: the path does not exist, cannot be opened or listed, or has no known format;
- :class:`RecordProblem` (yielded) for anything wrong *inside* a file: a bad line or
  row, undecodable text, a damaged PDF, a corrupt or truncated gzip/WARC tail (then
  the rest of that file is skipped, and the next file of a folder is still read);
  and for a file of a folder that is not read at all: not a regular file (a FIFO),
  a link out of the folder, larger than the limit (:mod:`.files`, :class:`ReadPolicy`).

Detection rule of :func:`reader_for` when no kind is given:

- a **file**: by name, the first reader of :data:`READERS` that claims it:
  ``.jsonl``/``.jsonl.gz``/``.json.gz``/``.ndjson`` -> ``jsonl``, ``.parquet`` ->
  ``parquet``, ``.csv``/``.csv.gz`` -> ``csv``, ``.warc``/``.warc.gz`` -> ``warc``,
  ``.pdf`` -> ``pdf``, ``.html``/``.htm`` -> ``html_dir``, a code extension ->
  ``code_tree``;
- a **folder**: scanned once (hidden folders and ``__pycache__`` skipped), and the
  first kind in :data:`FOLDER_PRIORITY` that has at least one file there wins:
  ``html_dir`` if it holds HTML pages, else ``pdf`` if it holds PDFs, else ``warc``,
  ``jsonl``, ``parquet``, ``csv`` for a folder of such files, else ``code_tree`` if
  it holds code files. HTML comes first because documentation folders also carry
  ``.js`` files that are not the content. A folder with none of these is an error.

Example::

    for item in iter_sources(["docs/", "crawl.warc.gz"]):
        if isinstance(item, RecordProblem):
            print(item.message())
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from catalog_ext.errors import SourceError
from omni_iceberg.ingest.sources.code_tree import CodeTreeReader
from omni_iceberg.ingest.sources.files import ReadPolicy
from omni_iceberg.ingest.sources.html_dir import HtmlDirReader, iter_files
from omni_iceberg.ingest.sources.jsonl import JsonlReader
from omni_iceberg.ingest.sources.pdf import PdfReader
from omni_iceberg.ingest.sources.records import (
    RecordProblem,
    SourceBlock,
    SourceItem,
    SourceReader,
    SourceRecord,
)
from omni_iceberg.ingest.sources.tabular import CsvReader, ParquetReader
from omni_iceberg.ingest.sources.warc import WarcReader

#: Every reader, in the order files are matched against them.
READERS: tuple[SourceReader, ...] = (
    JsonlReader(),
    ParquetReader(),
    CsvReader(),
    WarcReader(),
    PdfReader(),
    HtmlDirReader(),
    CodeTreeReader(),
)

#: For a folder: the first of these kinds with a file in it is the folder's kind.
FOLDER_PRIORITY: tuple[str, ...] = ("html_dir", "pdf", "warc", "jsonl", "parquet", "csv", "code_tree")

_BY_KIND: dict[str, SourceReader] = {r.kind: r for r in READERS}


def known_kinds() -> tuple[str, ...]:
    """The kind names :func:`reader_for` accepts, in :data:`READERS` order."""
    return tuple(_BY_KIND)


def reader_for(path: str | os.PathLike[str], kind: str | None = None) -> SourceReader:
    """The reader for ``path``: the one named by ``kind``, else detected (see module doc).

    Raises :class:`SourceError` for a path that does not exist, an unknown ``kind``,
    or a format that cannot be detected.

    >>> reader_for("/no/such/file.jsonl")
    Traceback (most recent call last):
    ...
    catalog_ext.errors.SourceError: source not found: /no/such/file.jsonl (check the path exists and is readable)
    """
    p = Path(path)
    if not p.exists():
        raise SourceError(missing_reason(p))
    if kind is not None:
        try:
            return _BY_KIND[kind]
        except KeyError:
            raise SourceError(
                f"unknown source kind {kind!r} for {p}: known kinds are {', '.join(known_kinds())}"
            ) from None
    detected = _detect_folder(p) if p.is_dir() else _detect_file(p)
    if detected is None:
        what = "no readable files in folder" if p.is_dir() else "cannot tell the format of"
        raise SourceError(
            f"{what} {p}: known kinds are {', '.join(known_kinds())}; "
            "rename the file or pass the kind explicitly"
        )
    return detected


def missing_reason(path: Path) -> str:
    """Why ``path`` cannot be read although it was named: missing, a broken link, or a link loop.

    ``Path.exists`` answers False for all three; telling them apart saves the user a
    search for a file that is right there.
    """
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return (f"symbolic link loop at {path}: resolving it leads back to itself ({e.strerror}); "
                    "point the link at a real file or folder")
        if path.is_symlink():
            return (f"broken symbolic link {path} -> {os.readlink(path)}: its target does not exist; "
                    "fix or remove the link")
        if e.errno not in (errno.ENOENT, errno.ENOTDIR):
            return f"cannot read source {path}: {e.strerror or e} (check its permissions)"
    return f"source not found: {path} (check the path exists and is readable)"


def iter_sources(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], kind: str | None = None,
    *, block_rows: int = 0, policy: ReadPolicy | None = None,
) -> Iterator[SourceItem | SourceBlock]:
    """Read several sources one after the other, as one stream of records and problems.

    Every path is resolved to a reader before the first record is read, so a typo in
    the last path fails at once instead of after a long read. With ``block_rows``,
    readers that can (JSONL) yield :class:`SourceBlock` of up to that many records
    where the input allows it; the others ignore it. ``policy`` says what may be
    opened and how much of it held (default: links stay inside, limits from the
    environment).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    policy = policy or ReadPolicy()
    plan = [(reader_for(p, kind), os.fspath(p)) for p in paths]
    for reader, path in plan:
        if block_rows and hasattr(reader, "read_blocks"):
            yield from reader.read_blocks(path, block_rows, policy)
        else:
            yield from reader.read(path, policy)


def _detect_file(path: Path) -> SourceReader | None:
    for reader in READERS:
        if reader.matches(str(path)):
            return reader
    return None


def _detect_folder(path: Path) -> SourceReader | None:
    by_suffix = {r.kind: r.suffixes for r in READERS}  # type: ignore[attr-defined]
    all_suffixes = tuple(s for suffixes in by_suffix.values() for s in suffixes)
    found: set[str] = set()
    for file in iter_files(path, all_suffixes):
        name = file.name.lower()
        found.update(k for k, suffixes in by_suffix.items() if name.endswith(suffixes))
        if FOLDER_PRIORITY[0] in found:
            break  # nothing can outrank it: stop scanning a large tree early
    for kind in FOLDER_PRIORITY:
        if kind in found:
            return _BY_KIND[kind]
    return None


__all__ = [
    "READERS",
    "FOLDER_PRIORITY",
    "ReadPolicy",
    "RecordProblem",
    "SourceBlock",
    "SourceItem",
    "SourceReader",
    "SourceRecord",
    "iter_sources",
    "known_kinds",
    "reader_for",
]
