"""The embedded DuckDB that runs user-derived SQL: no files, no extensions, settings locked.

omni hands DuckDB only Arrow tables and Arrow datasets over files omni itself opened
(``register``), so the engine never needs the file system or the network. Turning external access off and locking the
configuration means that even SQL the guard failed to refuse cannot read or write a
file, attach a database, load an extension or switch the protection back on.

Out-of-core: the database gets a memory limit and a spill folder, set before the lock.
DuckDB's own temporary files are not "external access": joins, sorts and aggregates
larger than the limit spill there even with external access off (tested).
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
