"""Finding and opening the files of a submitted source, so that no file in it can hang,
exhaust or leak through ``omni submit``.

A submitted folder is input from whoever filled it, so every reader walks and opens
files through this module, and each rule below ends as a :class:`RecordProblem` (a
reject naming the path) while the rest of the batch is read:

- **only regular files are opened**: opening a FIFO blocks until someone writes to it
  (``omni submit`` hung forever), and a device streams without end. Such an entry is
  refused as "not a regular file" from its directory entry, never opened; the open
  itself is non-blocking and checks the opened file again, in case the entry was
  swapped between the two;
- **links stay inside the source tree**: a symbolic link in a submitted folder that
  resolves outside it (``shadow.html -> /etc/shadow``) would copy that file into the
  table, so it is refused unless :attr:`ReadPolicy.follow_links` (``omni submit
  --follow-links``) says the links are meant. A link to a folder is walked only with
  that flag, each real folder once, so loops end; a link to a file inside the tree is
  read, through the path it resolves to;
- **sizes are bounded before anything is read**: a file read whole as one document
  (an HTML page, a code file, a PDF) larger than ``OMNI_MAX_DOCUMENT_BYTES`` is refused
  from its size, and line-oriented readers read at most ``OMNI_MAX_RECORD_BYTES`` of a
  line (after decompression: a small ``.gz`` can hold gigabytes on one line), skipping
  the rest of an over-long line without holding it.

A path named on the command line is the user's choice: it may be a link to anywhere,
and only the regular-file and size rules apply to it.
"""

from __future__ import annotations

import gzip
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NoReturn

from catalog_ext import settings
from catalog_ext.errors import SourceError
from omni_iceberg.ingest.sources.records import RecordProblem

#: a file read whole is one record held in memory (its bytes, its text, its Arrow copy)
MAX_DOCUMENT_ENV = "OMNI_MAX_DOCUMENT_BYTES"
#: one line of JSON Lines or CSV, one WARC response body: parsed into Python objects whole
MAX_RECORD_ENV = "OMNI_MAX_RECORD_BYTES"

_GZIP_MAGIC = b"\x1f\x8b"
#: what the rest of an over-long line is read in, to find where it ends without holding it
_SKIP_CHUNK = 1 << 20


@dataclass(frozen=True)
class ReadPolicy:
    """What a submit may open and how much of it it holds at once (see the module doc)."""

    follow_links: bool = False
    max_document_bytes: int = field(default_factory=lambda: settings.value(MAX_DOCUMENT_ENV))
    max_record_bytes: int = field(default_factory=lambda: settings.value(MAX_RECORD_ENV))


@dataclass(frozen=True)
class SourceFile:
    """A file to read: ``path`` as found (what records and rejects name), the folder it was
    found under, and ``target``, what is opened.

    For an entry of a walked folder ``target`` has no link left in its last component and
    is opened with ``O_NOFOLLOW``, so a link put there after the walk looked is not followed.
    """

    path: Path
    root: Path
    target: Path
    nofollow: bool

    def __str__(self) -> str:
        return str(self.path)


def source_files(path: str | os.PathLike[str], suffixes: tuple[str, ...],
                 policy: ReadPolicy) -> Iterator[SourceFile | RecordProblem]:
    """The file ``path`` itself, or the files of folder ``path`` whose lower-cased name ends
    with one of ``suffixes``, and a problem for each entry the rules refuse.

    Order is :func:`~.html_dir.iter_files`'s: sorted by code point, a folder's files before
    its sub-folders'; hidden folders and ``__pycache__`` are skipped.
    """
    if isinstance(path, SourceFile):  # one file listed before (a Spark task reads the files a driver listed)
        yield path
        return
    p = Path(path)
    if p.is_dir():
        yield from _walk(p, suffixes, policy)
    elif p.exists():
        yield SourceFile(p, p.parent, p, nofollow=False)
    else:
        raise SourceError(f"source not found: {p} (check the path exists and is readable)")



def read_each(path: str | os.PathLike[str], suffixes: tuple[str, ...], policy: ReadPolicy,
              read_file: Callable[[SourceFile], Iterator]) -> Iterator:
    """What ``read_file`` yields for each file :func:`source_files` accepts, and each refusal as a problem."""
    for file in source_files(path, suffixes, policy):
        if isinstance(file, RecordProblem):
            yield file
        else:
            yield from read_file(file)

def _walk(root: Path, suffixes: tuple[str, ...], policy: ReadPolicy) -> Iterator[SourceFile | RecordProblem]:
    real_root = os.path.realpath(root)
    seen: set[tuple[int, int]] = set()  # real folders walked: a followed link back to one is not walked again
    stack = [root]  # an explicit stack: a hostile tree may be deeper than Python's recursion limit
    while stack:
        folder = stack.pop()
        try:
            st = os.stat(folder)
        except OSError as e:
            _unlistable(e)
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        subfolders: list[Path] = []
        for entry in _entries(folder):
            path = Path(folder, entry.name)
            if entry.is_symlink():
                found = _link(path, entry.name, suffixes, root, real_root, policy, subfolders)
                if found is not None:
                    yield found
            elif entry.is_dir(follow_symlinks=False):
                if _walkable(entry.name):
                    subfolders.append(path)
            elif entry.name.lower().endswith(suffixes):
                if entry.is_file(follow_symlinks=False):  # the directory entry's type: no system call
                    yield SourceFile(path, root, path, nofollow=True)
                    continue
                try:
                    yield RecordProblem(str(path), not_regular(entry.stat(follow_symlinks=False).st_mode))
                except OSError as e:
                    yield RecordProblem(str(path), f"cannot read file: {e.strerror or e}")
        stack.extend(reversed(subfolders))


def _link(path: Path, name: str, suffixes: tuple[str, ...], root: Path, real_root: str, policy: ReadPolicy,
          subfolders: list[Path]) -> SourceFile | RecordProblem | None:
    """The file a link in the tree stands for, the problem with it, or None (a folder link to
    walk, added to ``subfolders``, or nothing to read)."""
    target = os.path.realpath(path)  # a loop or a dangling link resolves as far as it goes; opening says why
    inside = os.path.commonpath([target, real_root]) == real_root
    if os.path.isdir(target):
        if not _walkable(name):
            return None
        if policy.follow_links:
            subfolders.append(path)
            return None
        if inside:
            return None  # its files are read where they really are
        return RecordProblem(str(path), f"symbolic link to folder {target}, outside the source tree {real_root}: "
                             "not followed (--follow-links reads it)")
    if not name.lower().endswith(suffixes):
        return None
    if not inside and not policy.follow_links:
        return RecordProblem(str(path), f"symbolic link to {target}, outside the source tree {real_root}: "
                             "refused (--follow-links reads it)")
    return SourceFile(path, root, Path(target), nofollow=True)


def _walkable(name: str) -> bool:
    # hidden folders (.git, .venv) and __pycache__ hold tooling state, not content
    return not name.startswith(".") and name != "__pycache__"


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as e:
        _unlistable(e)


def _unlistable(e: OSError) -> NoReturn:
    raise SourceError(
        f"cannot list folder {e.filename}: {e.strerror or e} (fix its permissions or leave it out)"
    ) from e


def not_regular(mode: int) -> str:
    """Why a file of this mode is not read."""
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else
            "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "of unknown type")
    return f"not a regular file ({kind}): not opened"


def too_large(size: int, limit: int, setting: str | None) -> str:
    """The reason a file is refused for its size; ``setting`` names the variable that raises the limit."""
    hint = f"; {setting} raises the limit" if setting else ""
    return f"file larger than the limit ({size} bytes > {limit}){hint}"


def open_file(f: SourceFile, max_bytes: int | None = None, setting: str | None = MAX_DOCUMENT_ENV,
              ) -> BinaryIO | RecordProblem:
    """``f`` opened for reading bytes, or the problem why not: not a regular file, larger than
    ``max_bytes`` (from its size, before any byte is read), or unreadable."""
    where = str(f.path)
    try:
        # from the entry first: opening some devices has effects of its own
        mode = os.stat(f.target, follow_symlinks=not f.nofollow).st_mode
        if not stat.S_ISREG(mode):
            return RecordProblem(where, not_regular(mode))
        fd = os.open(f.target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
                     | (os.O_NOFOLLOW if f.nofollow else 0))
    except OSError as e:
        return RecordProblem(where, f"cannot read file: {e.strerror or e}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # the entry was swapped after the check above
            os.close(fd)
            return RecordProblem(where, not_regular(st.st_mode))
        if max_bytes is not None and st.st_size > max_bytes:
            os.close(fd)
            return RecordProblem(where, too_large(st.st_size, max_bytes, setting))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_document(f: SourceFile, max_bytes: int, setting: str | None = MAX_DOCUMENT_ENV) -> bytes | RecordProblem:
    """The whole content of a file read as one record, at most ``max_bytes`` of it."""
    opened = open_file(f, max_bytes, setting)
    if isinstance(opened, RecordProblem):
        return opened
    try:
        with opened:
            data = opened.read(max_bytes + 1)  # the file may have grown since its size was checked
            if len(data) > max_bytes:
                size = max(len(data), os.fstat(opened.fileno()).st_size)
                return RecordProblem(str(f.path), too_large(size, max_bytes, setting))
    except OSError as e:
        return RecordProblem(str(f.path), f"cannot read file: {e.strerror or e}")
    return data


@contextmanager
def decompressed(opened: BinaryIO, name: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """The byte stream of an opened file, gunzipped (streaming) when its name or its first bytes say gzip.

    The magic check also catches gzip data behind a plain name (a common export bug).
    Closes ``opened`` on exit.
    """
    with opened:
        if os.fspath(name).lower().endswith(".gz") or opened.peek(2)[:2] == _GZIP_MAGIC:  # type: ignore[attr-defined]
            with gzip.GzipFile(fileobj=opened, mode="rb") as stream:
                yield stream  # type: ignore[misc]
        else:
            yield opened


def read_line(stream: BinaryIO, limit: int) -> tuple[bytes, int]:
    """The next line of ``stream`` and its length in bytes (its newline excluded).

    A line longer than ``limit`` is not returned: its bytes are read and dropped in
    pieces, and ``(b"", length)`` tells the caller to reject it. ``(b"", 0)`` is the end.
    """
    raw = stream.readline(limit + 1)
    if len(raw) <= limit or raw.endswith(b"\n"):
        return raw, len(raw) - raw.endswith(b"\n")
    length = len(raw)
    while True:
        piece = stream.readline(_SKIP_CHUNK)
        if not piece:
            return b"", length
        if piece.endswith(b"\n"):
            return b"", length + len(piece) - 1
        length += len(piece)


class LineTooLong(Exception):
    """A text line over the limit: :class:`BoundedTextLines` stops there."""

    def __init__(self, line: int, limit: int):
        super().__init__(f"line {line} is longer than {limit} bytes")
        self.line = line
        self.limit = limit


class BoundedTextLines:
    """The lines of a text stream, as ``csv.reader`` consumes them, each at most ``limit``
    bytes long: a longer one raises :class:`LineTooLong` after reading at most
    ``limit + 1`` characters of it.

    ``line`` is the 1-based number of the last line given out.
    """

    def __init__(self, text, limit: int):
        self._text = text
        self._limit = limit
        self.line = 0

    def __iter__(self) -> "BoundedTextLines":
        return self

    def __next__(self) -> str:
        line = self._text.readline(self._limit + 1)
        if not line:
            raise StopIteration
        self.line += 1
        body = line.rstrip("\r\n")
        # a character is 1 to 4 bytes: only a line that may be long is measured in bytes
        if len(body) * 4 > self._limit and len(body.encode("utf-8", "surrogateescape")) > self._limit:
            raise LineTooLong(self.line, self._limit)
        return line
