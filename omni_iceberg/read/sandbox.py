"""The embedded DuckDB that runs user-derived SQL: no files, no extensions, settings locked.

omni hands DuckDB Arrow tables and Arrow datasets over files omni itself opened
(``register``), so the engine never needs the file system or the network. Turning external access off and locking the
configuration means that even SQL the guard failed to refuse cannot read or write a
file, attach a database, load an extension or switch the protection back on.

A query whose scans DuckDB may read natively (:func:`locked_duckdb_over_files`) gets a
database of its own that can read exactly that query's data files, and write none.

Out-of-core: the database gets a memory limit and a spill folder, set before the lock.
DuckDB's own temporary files are not "external access": joins, sorts and aggregates
larger than the limit spill there even with external access off (tested).

A known gap: DuckDB always adds its temporary directory to the directories it may write,
and no setting removes it, so SQL that got past the guard could COPY a file into the spill
folder (nowhere else). The guard refuses COPY; the spill folder holds nothing but spills.
"""

from __future__ import annotations

import os
import threading
from typing import Any

#: ``lock_configuration`` last: once set, no statement can change the others
LOCKED_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,  # FROM name never finds a Python variable of the caller
    "lock_configuration": True,
}


_lock = threading.Lock()
#: (memory limit in MiB, spill folder) -> connection, for the process ``_pid``: a DuckDB database
#: does not survive fork, and its limits are locked, so a changed setting needs a database of its own
_databases: dict[tuple[float | None, str | None], Any] = {}
_pid: int | None = None
#: databases kept open at once (each holds its own buffer pool up to its limit)
_KEEP = 4


def _locked_database(memory_limit_mb: float | None, spill_dir: str | None) -> Any:
    """One locked in-memory database per process and limits; opening one costs ~0.1 s, a cursor ~0."""
    global _pid
    key = (memory_limit_mb, spill_dir)
    with _lock:
        if _pid != os.getpid():
            _databases.clear()
            _file_databases.clear()
            _pid = os.getpid()
        if key not in _databases:
            import duckdb

            config: dict[str, Any] = {}
            if memory_limit_mb is not None:
                config["memory_limit"] = f"{int(memory_limit_mb * 1024)}KiB"
            if spill_dir is not None:
                os.makedirs(spill_dir, exist_ok=True)
                config["temp_directory"] = spill_dir
            while len(_databases) >= _KEEP:  # cursors of a dropped database keep it alive until they close
                _databases.pop(next(iter(_databases)))
            # DuckDB applies the options in order: the spill folder is refused when set before
            # external access is turned off (found by trying), and nothing may follow the lock
            locked = {k: v for k, v in LOCKED_CONFIG.items() if k != "lock_configuration"}
            _databases[key] = duckdb.connect(":memory:", config={**locked, **config, "lock_configuration": True})
        return _databases[key]


def locked_duckdb(tables: dict[str, Any] | None = None, memory_limit_mb: float | None = None,
                  spill_dir: str | None = None) -> Any:
    """A connection (a cursor of the process's locked database) with ``tables`` (name -> Arrow) registered.

    ``tables`` are Arrow tables or datasets (read lazily, once per scan DuckDB makes).
    ``memory_limit_mb`` and ``spill_dir`` (None: DuckDB's defaults, no spilling for an
    in-memory database) are the database's, locked. Registrations are private to the
    returned cursor, so concurrent queries never see each other's scans; close it when done.

    >>> import pyarrow as pa
    >>> con = locked_duckdb({"t": pa.table({"x": [1, 2]})})
    >>> con.sql('SELECT sum(x) FROM t').fetchall()
    [(3,)]
    >>> con.sql("COPY t TO '/tmp/omni-doctest.csv'")
    Traceback (most recent call last):
    ...
    _duckdb.PermissionException: Permission Error: Cannot access file "/tmp/omni-doctest.csv" - file system operations are disabled by configuration
    """
    con = _locked_database(memory_limit_mb, spill_dir).cursor()
    for name, data in (tables or {}).items():
        con.register(name, data)
    return con


class _PositionalFile:
    """A local file open for reading whose position is each thread's own; reads are ``pread``.

    Why: DuckDB reads a Python file system with a seek and then a read on one handle, and
    its Parquet reader shares a file's handle between the threads reading its row groups;
    an ordinary file object releases the GIL inside the read, so another thread's seek
    lands in between and the read returns bytes of the wrong place (seen as DuckDB's "Out
    of buffer" on a two-table join). With a position per thread, the seek and read of one
    thread always go together, and ``os.pread`` never moves a shared offset.
    """

    def __init__(self, path: str) -> None:
        import threading

        self._fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size
        self._where = threading.local()
        self.closed = False

    def _pos(self) -> int:
        return getattr(self._where, "pos", 0)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos(), 2: self._size}[whence]
        self._where.pos = base + offset
        return self._where.pos

    def tell(self) -> int:
        return self._pos()

    def read(self, size: int = -1) -> bytes:
        pos = self._pos()
        size = self._size - pos if size is None or size < 0 else size
        data = b""
        while len(data) < size:  # pread may return fewer bytes than asked
            chunk = os.pread(self._fd, size - len(data), pos + len(data))
            if not chunk:
                break
            data += chunk
        self._where.pos = pos + len(data)
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._fd)

    def __enter__(self) -> "_PositionalFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _read_only_files(files: dict[str, str]) -> Any:
    """A file system for DuckDB that serves exactly ``files`` (opaque name -> local path), read-only.

    Why a file system of our own rather than ``allowed_paths`` over the local paths: in
    DuckDB 2.0.1 ``allowed_paths`` grants writing as much as reading (found by trying:
    ``COPY ... TO '<allowed file>' (USE_TMP_FILE false)`` overwrote a data file). Here
    every open for anything but reading fails, listing and globbing find nothing, and a
    name not handed out is no file; DuckDB's own local file system stays shut by
    ``enable_external_access`` = false, and the opaque names are still listed in
    ``allowed_paths`` (DuckDB's check for every file system), one by one.
    """
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    class ReadOnlyFiles(fsspec.AbstractFileSystem):
        protocol = FILES_PROTOCOL
        cachable = False  # one instance per database: fsspec must not hand another query's instance back

        def __init__(self) -> None:
            super().__init__()
            self._files, self._local = dict(files), LocalFileSystem()

        def _path(self, path: str) -> str:
            name = self._strip_protocol(path)
            if name not in self._files:
                raise FileNotFoundError(f"{path}: not a file of this query")
            return self._files[name]

        def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
            if mode != "rb":
                raise PermissionError(f"{path}: the query's files are read-only")
            return _PositionalFile(self._path(path))

        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            found = self._local.info(self._path(path))
            return {"name": path, "size": found["size"], "type": "file"}

        def modified(self, path: str) -> Any:
            return self._local.modified(self._path(path))

        def exists(self, path: str, **kwargs: Any) -> bool:
            return self._strip_protocol(path) in self._files

        def glob(self, path: str, **kwargs: Any) -> list[str]:
            return [path] if self._strip_protocol(path) in self._files else []  # a pattern matches nothing

        def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
            raise PermissionError(f"{path}: listing is refused")

        def _refuse(self, path: Any, *args: Any, **kwargs: Any) -> None:
            raise PermissionError(f"{path}: the query's files are read-only")

        rm = rm_file = _rm = mkdir = makedirs = rmdir = mv = cp_file = touch = put_file = pipe_file = _refuse

    return ReadOnlyFiles()


#: the scheme of the names a native query's files go by (see :func:`locked_duckdb_over_files`)
FILES_PROTOCOL = "omnifile"


#: (files, memory limit, spill folder) -> (database, {path: name}), for the process ``_pid`` (see :func:`locked_duckdb_over_files`)
_file_databases: dict[tuple[Any, ...], tuple[Any, dict[str, str]]] = {}
#: file databases kept open at once
_KEEP_FILES = 2


def locked_duckdb_over_files(paths: list[str], memory_limit_mb: float | None = None,
                             spill_dir: str | None = None) -> tuple[Any, dict[str, str]]:
    """A locked database that can read exactly ``paths`` (local files) and write none:
    (a cursor of it, {path: the name DuckDB reads it by}). Close the cursor when done.

    The names are opaque (``omnifile://<random>/<n>``): nothing of the path reaches the
    SQL, and a name never handed out opens nothing. The database belongs to that set of
    files: ``allowed_paths`` can only be set before the lock, and DuckDB refuses it in
    ``duckdb.connect``'s config (found by trying), so it is set by statement before
    external access is turned off and the configuration locked. Opening one costs ~0.02 s
    (measured warm), so the last :data:`_KEEP_FILES` are kept for queries that read the
    same files again (a snapshot's files never change); the planner asks for one only
    when the scans are big enough to gain from DuckDB's own parallel Parquet reader.
    """
    global _pid
    files = tuple(sorted(set(paths)))
    key = (files, memory_limit_mb, spill_dir)
    with _lock:
        if _pid != os.getpid():
            _databases.clear()
            _file_databases.clear()
            _pid = os.getpid()
        if key in _file_databases:
            _file_databases[key] = _file_databases.pop(key)  # most recently used last
        else:
            while len(_file_databases) >= _KEEP_FILES:  # an open cursor keeps its database alive
                _file_databases.pop(next(iter(_file_databases)))
            _file_databases[key] = _open_over_files(files, memory_limit_mb, spill_dir)
        database, urls = _file_databases[key]
        return database.cursor(), urls


def _open_over_files(files: tuple[str, ...], memory_limit_mb: float | None,
                     spill_dir: str | None) -> tuple[Any, dict[str, str]]:
    import secrets

    import duckdb

    token = secrets.token_hex(16)
    names = {p: f"{token}/{i}.parquet" for i, p in enumerate(files)}
    config: dict[str, Any] = {k: v for k, v in LOCKED_CONFIG.items()
                              if k not in ("lock_configuration", "enable_external_access")}
    if memory_limit_mb is not None:
        config["memory_limit"] = f"{int(memory_limit_mb * 1024)}KiB"
    if spill_dir is not None:
        os.makedirs(spill_dir, exist_ok=True)
        config["temp_directory"] = spill_dir
    con = duckdb.connect(":memory:", config=config)
    try:
        con.register_filesystem(_read_only_files({n: p for p, n in names.items()}))
        urls = {p: f"{FILES_PROTOCOL}://{n}" for p, n in names.items()}
        # every value a literal built here (a hex token, numbers): nothing of the paths is spliced
        con.execute(f"SET allowed_paths = [{', '.join(repr(u) for u in urls.values())}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con, urls
