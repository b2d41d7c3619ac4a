"""The hot store: chosen feature columns of a logical table in ClickHouse MergeTree tables.

One client API for both deployments, clickhouse-connect's: embedded chdb (the default,
``chdb://<home>/hot``, no server) and a ClickHouse server (``OMNI_HOT=clickhouse://host:8123``
or ``http://...``; the code targets ClickHouse 23.8 and later - ``PARTITION BY`` a string,
``ReplacingMergeTree`` with ``FINAL``, Arrow inserts and results). chdb allows one
process per folder at a time; a process that cannot open it falls back to Iceberg.

Per logical table: a data table ``omni_hot.<ns>__<name>`` holding the keys and the hot
columns, partitioned by batch (replacing or dropping a batch is dropping a partition),
and one row of ``omni_hot.state`` saying which columns it holds and, per batch, the
:meth:`~catalog_ext.family.FamilyState.coverage_signature` of the values loaded. A
reader compares that with the signature at its own version: equal signatures, equal
values (see :mod:`omni_iceberg.hot.route`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_ext import settings, types
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.errors import OmniError

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

DATABASE = "omni_hot"
STATE_TABLE = f"{DATABASE}.state"
#: logical primitive type -> ClickHouse type (values are Nullable: failed records are NULL)
_CLICKHOUSE = {"string": "String", "long": "Int64", "int": "Int32", "double": "Float64", "float": "Float32",
               "boolean": "Bool", "date": "Date32"}
SCALAR_TYPES = frozenset(_CLICKHOUSE)


class HotStoreError(OmniError):
    """The hot store cannot be reached or does not hold what its state says (readers fall back)."""


@dataclass
class HotState:
    """What the hot store holds for one logical table (one row of ``omni_hot.state``)."""

    logical_table: str
    table: str
    columns: tuple[str, ...]
    #: batch -> coverage signature of the columns' values loaded for it
    batches: dict[str, str] = field(default_factory=dict)
    #: coverage signature of every batch at ``version``; "" while a sync is changing the rows
    signature: str = ""
    version: int = 0


def clickhouse_type(logical: str) -> str:
    t = types.parse(logical)
    if t.is_list or t.name not in _CLICKHOUSE:
        raise ValueError(logical)
    return f"Nullable({_CLICKHOUSE[t.name]})"


def default_dsn(home: Path | str) -> str:
    return settings.value("OMNI_HOT") or f"chdb://{Path(home).resolve() / 'hot'}"


def store_for(ctx: OmniContext) -> HotStore:
    """The hot store of ``ctx``'s catalog: ``OMNI_HOT`` or embedded chdb under its home.

    One store may serve several catalogs (a ClickHouse server; chdb can open only one
    folder per process): names are scoped by the catalog's warehouse, so ``aidata.web``
    of one catalog never meets another's.
    """
    import hashlib

    scope = hashlib.sha1(ctx.config.warehouse.encode()).hexdigest()[:10]
    return HotStore(default_dsn(ctx.config.home), scope)


_CLIENTS: dict[str, Any] = {}
_LOCK = threading.Lock()


class HotStore:
    """A connection to the hot store at ``dsn`` (one client per process and DSN)."""

    def __init__(self, dsn: str, scope: str = ""):
        self.dsn = dsn
        self.scope = scope
        self.client = _client(dsn)
        self._ensure_state_table()

    def key(self, logical_table: str) -> str:
        """The state row's key of a logical table (scoped: see :func:`store_for`)."""
        return f"{self.scope}:{logical_table}" if self.scope else logical_table

    def table_name(self, logical_table: str) -> str:
        """The data table of a logical table."""
        name = logical_table.replace(".", "__")
        return f"s{self.scope}__{name}" if self.scope else name

    @property
    def where(self) -> str:
        return self.dsn.split("@")[-1]  # never print credentials

    # ---- state -------------------------------------------------------------------------
    def _ensure_state_table(self) -> None:
        self.command(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        self.command(f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (logical_table String, hot_table String, "
                     "columns String, batches String, signature String, version UInt64, updated_ms UInt64) "
                     "ENGINE = ReplacingMergeTree(updated_ms) ORDER BY logical_table")

    def state(self, logical_table: str) -> HotState | None:
        rows = self.query(f"SELECT hot_table, columns, batches, signature, version FROM {STATE_TABLE} FINAL "
                          "WHERE logical_table = {t:String}", {"t": self.key(logical_table)}).to_pylist()
        if not rows or not rows[0]["hot_table"]:
            return None
        r = rows[0]
        try:
            return HotState(logical_table, r["hot_table"], tuple(json.loads(r["columns"])), json.loads(r["batches"]),
                            r["signature"], int(r["version"]))
        except (ValueError, TypeError) as e:
            raise HotStoreError(f"the hot store at {self.where} holds an unreadable state for {logical_table}: {e}")

    def save_state(self, s: HotState) -> None:
        # updated_ms orders the versions of the row: never equal for two saves of one process
        now = max(int(time.time() * 1000), getattr(self, "_last_ms", 0) + 1)
        self._last_ms = now
        self.client.insert(STATE_TABLE, [[self.key(s.logical_table), s.table, json.dumps(list(s.columns)),
                                          json.dumps(s.batches, sort_keys=True), s.signature, s.version, now]],
                           column_names=["logical_table", "hot_table", "columns", "batches", "signature", "version",
                                         "updated_ms"])

    def forget(self, logical_table: str) -> None:
        """Drop the table's hot data and state (its hot columns were removed)."""
        s = self.state(logical_table)
        if s is not None:
            self.command(f"DROP TABLE IF EXISTS {DATABASE}.`{s.table}`")
        self.save_state(HotState(logical_table, "", ()))

    # ---- data --------------------------------------------------------------------------
    def create_table(self, name: str, column_types: dict[str, str]) -> None:
        """(Re)create the data table: the keys, then ``column -> logical type``, partitioned by batch."""
        cols = ", ".join(f"`{c}` {clickhouse_type(t)}" for c, t in column_types.items())
        self.command(f"DROP TABLE IF EXISTS {DATABASE}.`{name}`")
        self.command(f"CREATE TABLE {DATABASE}.`{name}` (`{ID_COLUMN}` String, `{BATCH_COLUMN}` String, {cols}) "
                     f"ENGINE = MergeTree PARTITION BY `{BATCH_COLUMN}` ORDER BY `{ID_COLUMN}`")

    def drop_batches(self, name: str, batches: list[str]) -> None:
        for b in batches:
            self.command(f"ALTER TABLE {DATABASE}.`{name}` DROP PARTITION {{b:String}}", {"b": b})

    def insert(self, name: str, data: pa.Table) -> None:
        if data.num_rows:
            self.client.insert_arrow(f"{DATABASE}.`{name}`", data)

    def batch_rows(self, name: str, batches: list[str]) -> dict[str, int]:
        rows = self.query(f"SELECT `{BATCH_COLUMN}` AS b, count() AS n FROM {DATABASE}.`{name}` "
                          f"WHERE `{BATCH_COLUMN}` IN {{bs:Array(String)}} GROUP BY b", {"bs": batches})
        return {r["b"]: int(r["n"]) for r in rows.to_pylist()}

    # ---- plumbing ----------------------------------------------------------------------
    def command(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        try:
            return self.client.command(sql, parameters=parameters)
        except Exception as e:  # noqa: BLE001 - every driver error becomes one named error
            raise HotStoreError(f"hot store at {self.where}: {e}") from e

    def query(self, sql: str, parameters: dict[str, Any] | None = None, settings: dict[str, Any] | None = None
              ) -> pa.Table:
        try:
            return self.client.query_arrow(sql, parameters=parameters, settings=settings)
        except Exception as e:  # noqa: BLE001
            raise HotStoreError(f"hot store at {self.where}: {e}") from e


def _client(dsn: str) -> Any:
    """One clickhouse-connect client per DSN and process (chdb allows one session per folder)."""
    with _LOCK:
        hit = _CLIENTS.get(dsn)
        if hit is not None:
            return hit
        try:
            import clickhouse_connect
        except ImportError as e:
            raise HotStoreError("hot columns need clickhouse-connect (and chdb for the embedded store): "
                                "pip install 'omni-iceberg[olap]'") from e
        try:
            if dsn.startswith("chdb://"):
                Path(dsn[len("chdb://"):]).mkdir(parents=True, exist_ok=True)
            client = clickhouse_connect.get_client(dsn=dsn)
        except Exception as e:  # noqa: BLE001 - unreachable server, locked chdb folder, missing chdb
            raise HotStoreError(f"cannot open the hot store at {dsn.split('@')[-1]}: {e}") from e
        _CLIENTS[dsn] = client
        return client

