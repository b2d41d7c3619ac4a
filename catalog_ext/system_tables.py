"""System tables: ordinary Iceberg tables in the ``omni_sys`` namespace.

They hold what users should be able to ``SELECT`` from Spark or Trino (rejected
records today; feature definitions, runs, lineage, errors and the query log as those
capabilities land). Appends retry on a lost race, since many writers share them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from catalog_ext.contract import SYSTEM_NAMESPACE
from catalog_ext.errors import CommitConflictError

REJECTS = "rejects"
FEATURES = "features"
RUNS = "runs"
LINEAGE = "lineage"
ERRORS = "errors"
QUERY_LOG = "query_log"
FEATURE_VALUES = "feature_values"
_TS = pa.timestamp("us", tz="UTC")

SCHEMAS: dict[str, pa.Schema] = {
    # where the values of feature@version with one data version live, catalog-wide: the
    # reuse index. Partitioned by feature, so a lookup reads only that feature's rows.
    FEATURE_VALUES: pa.schema([
        pa.field("feature", pa.string(), nullable=False),
        pa.field("version", pa.string(), nullable=False),
        pa.field("code_hash", pa.string(), nullable=False),
        pa.field("data_version", pa.string(), nullable=False),
        pa.field("logical_table", pa.string(), nullable=False),
        pa.field("id_mode", pa.string(), nullable=False),
        pa.field("batch", pa.string(), nullable=False),
        pa.field("physical_table", pa.string(), nullable=False),
        pa.field("snapshot_id", pa.int64(), nullable=False),
        pa.field("logical_version", pa.int64(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("committed_at", _TS, nullable=False),
    ]),
    REJECTS: pa.schema([
        pa.field("logical_table", pa.string(), nullable=False),
        pa.field("batch", pa.string(), nullable=False),
        pa.field("submit_id", pa.string(), nullable=False),
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("line", pa.int64()),
        pa.field("offset", pa.int64()),
        pa.field("field", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("rejected_at", _TS, nullable=False),
    ]),
    FEATURES: pa.schema([
        pa.field("logical_table", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("version", pa.string(), nullable=False),
        pa.field("udf", pa.string(), nullable=False),
        pa.field("code_hash", pa.string(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("inputs", pa.string(), nullable=False),
        pa.field("outputs", pa.string(), nullable=False),
        pa.field("definition", pa.string(), nullable=False),
        pa.field("logical_version", pa.int64(), nullable=False),
        pa.field("registered_at", _TS, nullable=False),
    ]),
    RUNS: pa.schema([
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("logical_table", pa.string(), nullable=False),
        pa.field("features", pa.string(), nullable=False),
        pa.field("batches", pa.string(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("plan", pa.string(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("errors", pa.int64(), nullable=False),
        pa.field("reused", pa.int64(), nullable=False),
        pa.field("logical_version", pa.int64()),
        pa.field("started_at", _TS, nullable=False),
        pa.field("finished_at", _TS, nullable=False),
        pa.field("message", pa.string()),
    ]),
    LINEAGE: pa.schema([
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("logical_table", pa.string(), nullable=False),
        pa.field("output_column", pa.string(), nullable=False),
        pa.field("feature", pa.string(), nullable=False),
        pa.field("version", pa.string(), nullable=False),
        pa.field("batch", pa.string(), nullable=False),
        pa.field("input_columns", pa.string(), nullable=False),
        pa.field("input_snapshots", pa.string(), nullable=False),
        pa.field("output_table", pa.string(), nullable=False),
        pa.field("output_snapshot", pa.int64()),
        pa.field("logical_version", pa.int64()),
        pa.field("code_hash", pa.string(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("started_at", _TS, nullable=False),
        pa.field("finished_at", _TS, nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("errors", pa.int64(), nullable=False),
        pa.field("reused", pa.int64(), nullable=False),
    ]),
    ERRORS: pa.schema([
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("logical_table", pa.string(), nullable=False),
        pa.field("feature", pa.string(), nullable=False),
        pa.field("version", pa.string(), nullable=False),
        pa.field("_ai_unique_id_", pa.string(), nullable=False),
        pa.field("batch", pa.string(), nullable=False),
        pa.field("exception_class", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("traceback_digest", pa.string(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("failed_at", _TS, nullable=False),
    ]),
    QUERY_LOG: pa.schema([
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("logical_table", pa.string(), nullable=False),
        pa.field("logical_version", pa.int64(), nullable=False),
        pa.field("columns", pa.string(), nullable=False),
        pa.field("filter_columns", pa.string(), nullable=False),
        pa.field("batches", pa.string(), nullable=False),
        pa.field("physical_tables", pa.string(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("latency_ms", pa.int64(), nullable=False),
        pa.field("sql", pa.string(), nullable=False),
        pa.field("at", _TS, nullable=False),
        # the engine the query was submitted to: omni (``omni sql``/``omni export``), spark
        # (the session extension's listener), trino (omni's event listener). ``engine``
        # above is what executed it (local, hot, spark for ``omni sql --engine spark``).
        # Added later: rows written before have it NULL, which means omni.
        pa.field("query_engine", pa.string()),
    ]),
}


def system_table(catalog: Any, name: str) -> Any:
    """Load (creating on first use) the system table ``omni_sys.<name>``."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

    ident = f"{SYSTEM_NAMESPACE}.{name}"
    try:
        return _with_added_fields(catalog, ident, catalog.load_table(ident), SCHEMAS[name])
    except NoSuchTableError:
        pass
    try:
        catalog.create_namespace(SYSTEM_NAMESPACE)
    except NamespaceAlreadyExistsError:
        pass
    try:
        table = catalog.create_table(ident, schema=SCHEMAS[name], properties={
            "format-version": "2",
            # appends come one per query/run: keep the metadata log short and delete old files
            "write.metadata.previous-versions-max": "20",
            "write.metadata.delete-after-commit.enabled": "true",
        })
    except TableAlreadyExistsError:
        return catalog.load_table(ident)
    if name in PARTITION_BY:
        # the creator partitions before any row exists; a crash here only costs pruning
        with table.update_spec() as spec:
            spec.add_identity(PARTITION_BY[name])
        table = catalog.load_table(ident)
    return table


def _with_added_fields(catalog: Any, ident: str, table: Any, schema: pa.Schema) -> Any:
    """``table``, its schema first given the optional fields ``schema`` added since it was created.

    A system table created by an earlier version lacks them, and an append of the current
    rows would fail. Only optional fields are ever added (existing rows read them as NULL), so
    this is a safe evolution; two processes adding the same field race, and the loser just
    reloads the winner's schema.
    """
    from pyiceberg.exceptions import CommitFailedException

    have = {f.name for f in table.schema().fields}
    missing = [f for f in schema if f.name not in have]
    if not missing:
        return table
    if any(not f.nullable for f in missing):  # a required field cannot be added to rows that exist
        raise ValueError(f"{ident}: fields added to a system table must be optional: {missing}")
    try:
        with table.update_schema() as update:
            update.union_by_name(pa.schema(missing))
    except CommitFailedException:
        pass  # another process added them first (same names and types): its schema is ours
    return catalog.load_table(ident)


#: system tables read by one key: partitioned on it so a lookup reads only its files
PARTITION_BY = {FEATURE_VALUES: "feature"}


def append_rows(catalog: Any, name: str, rows: list[dict[str, Any]], attempts: int = 10, *,
                compact: bool = True, snapshot_properties: dict[str, str] | None = None) -> Any | None:
    """Append rows to a system table, retrying when another writer committed first.

    Returns the table as committed (``None`` when there was nothing to append: an
    empty append would still cost a snapshot). With ``compact=False`` the caller runs
    :func:`maybe_compact` itself (to time it apart from the append, or to run it
    after a step that must come first). ``snapshot_properties`` go into the snapshot
    summary (the query-log spool records its token there).
    """
    if not rows:
        return None
    from catalog_ext.iceberg_io import is_commit_race
    from catalog_ext.retry import retry

    data = pa.Table.from_pylist(rows, schema=SCHEMAS[name])

    def append() -> Any:
        table = system_table(catalog, name)
        table.append(data, snapshot_properties=snapshot_properties or {})
        return table

    table = retry(append, on=is_commit_race, attempts=attempts, backoff=0.05, cap=1.0,
                  exhausted=lambda e: CommitConflictError(
                      f"could not append to {SYSTEM_NAMESPACE}.{name} after {attempts} attempts "
                      f"(last: {e}); other writers keep winning - retry later"))
    if compact:
        maybe_compact(table)
    return table


def maybe_compact(table: Any) -> bool:
    """Compact a system table once appends left it :data:`COMPACT_AFTER_SNAPSHOTS` snapshots or more."""
    if len(table.metadata.snapshots) >= COMPACT_AFTER_SNAPSHOTS:
        return compact_system_table(table)
    return False


#: one append per query or run makes many small files and snapshots; past this many
#: snapshots a system table is rewritten as one file and its history expired
COMPACT_AFTER_SNAPSHOTS = 64


def compact_system_table(table: Any) -> bool:
    """Rewrite a system table's rows into one file and expire the earlier snapshots.

    Best effort: a concurrent append makes the rewrite lose its commit (nothing is lost,
    the next append tries again). Readers pinned to an expired snapshot of a *system*
    table lose that history, which the system tables do not promise to keep.
    """
    from datetime import datetime, timezone

    from pyiceberg.exceptions import CommitFailedException

    try:
        rows = table.scan().to_arrow()
        table.overwrite(rows)
        table.maintenance.expire_snapshots().older_than(datetime.now(timezone.utc)).commit()
        return True
    except (CommitFailedException, ValueError):
        return False


def read_rows(catalog: Any, name: str, row_filter: str | None = None) -> pa.Table:
    table = system_table(catalog, name)
    if table.current_snapshot() is None:
        return SCHEMAS[name].empty_table()
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    return scan.to_arrow()


def read_rejects(catalog: Any, state: Any, batch: str | None = None) -> pa.Table:
    """Rejected records of a logical table (``state``: its FamilyState), optionally one batch.

    A batch name can be submitted several times until one attempt commits; each attempt
    writes its rejects under its own ``submit_id``. For a committed batch only the
    committing attempt's rejects are the batch's; for a batch that never committed every
    attempt's rejects are shown (they explain why it did not).
    """
    from catalog_ext.contract import check_batch_name

    flt = f"logical_table == '{state.table.identifier}'"
    if batch:
        check_batch_name(batch)  # interpolated into the filter expression
        flt += f" and batch == '{batch}'"
    rows = read_rows(catalog, REJECTS, flt)
    committed = {b.name: b.submit_id for b in state.batches if getattr(b, "submit_id", "")}
    if not committed or rows.num_rows == 0:
        return rows
    keep = [committed.get(b, s) == s for b, s in zip(rows.column("batch").to_pylist(),
                                                       rows.column("submit_id").to_pylist())]
    return rows.filter(pa.array(keep, pa.bool_()))
