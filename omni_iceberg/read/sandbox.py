"""The embedded DuckDB that runs user-derived SQL: no files, no extensions, settings locked.

omni hands DuckDB only in-memory Arrow tables (``register``), so the engine never needs
the file system or the network. Turning external access off and locking the
configuration means that even SQL the guard failed to refuse cannot read or write a
file, attach a database, load an extension or switch the protection back on.
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
_database: tuple[int, Any] | None = None  # (pid, connection): a DuckDB database does not survive fork


def _locked_database() -> Any:
    """One locked in-memory database per process; opening one costs ~0.1 s, a cursor ~0."""
    global _database
    with _lock:
        if _database is None or _database[0] != os.getpid():
            import duckdb

            _database = (os.getpid(), duckdb.connect(":memory:", config=dict(LOCKED_CONFIG)))
        return _database[1]


def locked_duckdb(tables: dict[str, Any] | None = None) -> Any:
    """A connection (a cursor of the process's locked database) with ``tables`` (name -> Arrow) registered.

    Registrations are private to the returned cursor, so concurrent queries never see
    each other's scans; close it when done. The settings are locked database-wide.

    >>> import pyarrow as pa
    >>> con = locked_duckdb({"t": pa.table({"x": [1, 2]})})
    >>> con.sql('SELECT sum(x) FROM t').fetchall()
    [(3,)]
    >>> con.sql("COPY t TO '/tmp/omni-doctest.csv'")
    Traceback (most recent call last):
    ...
    _duckdb.PermissionException: Permission Error: Cannot access file "/tmp/omni-doctest.csv" - file system operations are disabled by configuration
    """
    con = _locked_database().cursor()
    for name, data in (tables or {}).items():
        con.register(name, data)
    return con
