"""The embedded DuckDB that runs user-derived SQL: no files, no extensions, settings locked.

omni hands DuckDB only in-memory Arrow tables (``register``), so the engine never needs
the file system or the network. Turning external access off and locking the
configuration means that even SQL the guard failed to refuse cannot read or write a
file, attach a database, load an extension or switch the protection back on.
"""

from __future__ import annotations

from typing import Any

#: ``lock_configuration`` last: once set, no statement can change the others
LOCKED_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}


def locked_duckdb(tables: dict[str, Any] | None = None) -> Any:
    """A fresh in-memory DuckDB connection with ``tables`` (name -> Arrow) registered.

    >>> import pyarrow as pa
    >>> con = locked_duckdb({"t": pa.table({"x": [1, 2]})})
    >>> con.sql('SELECT sum(x) FROM t').fetchall()
    [(3,)]
    >>> con.sql("COPY t TO '/tmp/omni-doctest.csv'")
    Traceback (most recent call last):
    ...
    _duckdb.PermissionException: Permission Error: Cannot access file "/tmp/omni-doctest.csv" - file system operations are disabled by configuration
    """
    import duckdb

    con = duckdb.connect(":memory:", config=dict(LOCKED_CONFIG))
    for name, data in (tables or {}).items():
        con.register(name, data)
    return con
