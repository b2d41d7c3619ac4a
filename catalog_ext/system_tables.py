"""System tables: ordinary Iceberg tables in the ``omni_sys`` namespace.

They hold what users should be able to ``SELECT`` from Spark or Trino (rejected
records today; feature definitions, runs, lineage, errors and the query log as those
capabilities land). Appends retry on a lost race, since many writers share them.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from catalog_ext.contract import SYSTEM_NAMESPACE
from omni_iceberg.errors import CommitConflictError

REJECTS = "rejects"

SCHEMAS: dict[str, pa.Schema] = {
    REJECTS: pa.schema([
        pa.field("logical_table", pa.string(), nullable=False),
        pa.field("batch", pa.string(), nullable=False),
        pa.field("submit_id", pa.string(), nullable=False),
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("line", pa.int64()),
        pa.field("offset", pa.int64()),
        pa.field("field", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("rejected_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]),
}


def system_table(catalog: Any, name: str) -> Any:
    """Load (creating on first use) the system table ``omni_sys.<name>``."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

    ident = f"{SYSTEM_NAMESPACE}.{name}"
    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        pass
    try:
        catalog.create_namespace(SYSTEM_NAMESPACE)
    except NamespaceAlreadyExistsError:
        pass
    try:
        return catalog.create_table(ident, schema=SCHEMAS[name], properties={"format-version": "2"})
    except TableAlreadyExistsError:
        return catalog.load_table(ident)


def append_rows(catalog: Any, name: str, rows: list[dict[str, Any]], attempts: int = 10) -> None:
    """Append rows to a system table, retrying when another writer committed first."""
    if not rows:
        return
    from pyiceberg.exceptions import CommitFailedException

    data = pa.Table.from_pylist(rows, schema=SCHEMAS[name])
    for attempt in range(attempts):
        table = system_table(catalog, name)
        try:
            table.append(data)
            return
        except CommitFailedException:
            time.sleep(0.05 * (attempt + 1))
    raise CommitConflictError(f"could not append to {SYSTEM_NAMESPACE}.{name} after {attempts} attempts")


def read_rows(catalog: Any, name: str, row_filter: str | None = None) -> pa.Table:
    table = system_table(catalog, name)
    if table.current_snapshot() is None:
        return SCHEMAS[name].empty_table()
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    return scan.to_arrow()
