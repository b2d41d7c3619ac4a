"""Read-only SQL over logical tables, executed on embedded DuckDB over Arrow scans.

Why DuckDB: it is a ~30 MB wheel with no server, runs SQL directly over Arrow
tables zero-copy, and its dialect is close to both Spark's and Trino's. (chdb is the
better fit for the future hot-column OLAP path, but is ~530 MB to install.)

This is the first, simple planner: each referenced logical table is read at one
version with only the top-level columns the query names (or all of them for ``*``),
then the query runs unchanged on those Arrow tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from catalog_ext.contract import PHYSICAL_SEPARATOR, split_qualified
from omni_iceberg.errors import OmniError

if TYPE_CHECKING:
    from omni_iceberg.api import Omni


class QueryError(OmniError):
    """The query cannot be run: syntax, not read-only, unknown table or column."""

    exit_code = 2


def run_query(omni: "Omni", sql: str, as_of: int | None = None) -> pa.Table:
    import duckdb
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        raise QueryError(
            f"syntax error at line {err.get('line')}, column {err.get('col')}: {err.get('description', e)}"
        ) from e
    if len(statements) != 1:
        raise QueryError(f"expected exactly one statement, got {len(statements)}")
    stmt = statements[0]
    if not isinstance(stmt, exp.Query):
        raise QueryError(f"only queries are allowed, not {stmt.key.upper()}: omni sql is read-only")
    cte_names = {c.alias_or_name for c in stmt.find_all(exp.CTE)}
    identifiers = {i.name.lower() for i in stmt.find_all(exp.Identifier)}
    wants_all = any(True for _ in stmt.find_all(exp.Star))
    con = duckdb.connect()
    for i, table in enumerate(list(stmt.find_all(exp.Table))):
        if table.name in cte_names and not table.db:
            continue
        if table.catalog or PHYSICAL_SEPARATOR in table.name:
            raise QueryError(f"{table.sql()}: name logical tables only (NAME or NAMESPACE.NAME), not physical ones")
        logical = f"{table.db}.{table.name}" if table.db else table.name
        ns, name = split_qualified(logical)
        state = omni.state(f"{ns}.{name}", as_of)
        columns = state.top_level_columns()
        if not wants_all:
            columns = [c for c in columns if c.lower() in identifiers or c.startswith("_ai_")]
        data = omni.read(f"{ns}.{name}", columns=columns, as_of=as_of)
        local = f"__omni_t{i}"
        con.register(local, data)
        alias = table.alias or table.name
        table.replace(exp.Table(this=exp.to_identifier(local), alias=exp.TableAlias(this=exp.to_identifier(alias))))
    try:
        return con.sql(stmt.sql(dialect="duckdb")).to_arrow_table()
    except duckdb.Error as e:
        raise QueryError(f"query failed: {e}") from e
