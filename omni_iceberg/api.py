"""The Python API: one :class:`Omni` object per catalog.

Example::

    from omni_iceberg import Omni
    omni = Omni()                                   # embedded SQLite catalog in ./.omni
    omni.create_table("web")
    omni.submit("web", ["crawl.warc.gz"], batch="cc")
    omni.read("web", columns=["RawData.url"], batches=["cc"]).num_rows
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import pyarrow as pa

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, split_qualified
from catalog_ext.family import FamilyState
from catalog_ext.store import FamilyStore, VersionInfo
from omni_iceberg.config import OmniConfig
from omni_iceberg.ingest.pipeline import SubmitReport, submit


class Omni:
    """Entry point for platform teams: tables, ingestion, status, versions and reads."""

    def __init__(self, config: OmniConfig | None = None, **resolve_kwargs: Any):
        self.config = config or OmniConfig.resolve(**resolve_kwargs)

    @cached_property
    def catalog(self) -> Any:
        from catalog_ext.catalog import open_catalog

        return open_catalog(self.config)

    @cached_property
    def store(self) -> FamilyStore:
        return FamilyStore(self.catalog)

    # ---- tables -------------------------------------------------------------------------
    def create_table(self, name: str, *, id_mode: str = "md5", bucket_count: int = 16, comment: str = "",
                     command: str = "") -> FamilyState:
        """Create logical table ``name`` (``web`` or ``namespace.web``)."""
        from omni_iceberg.errors import InvalidIdentifierError

        if id_mode not in ("md5", "uuid"):
            raise InvalidIdentifierError(f"invalid id mode {id_mode!r}: use md5 or uuid")
        if not 1 <= bucket_count <= 1024:
            raise InvalidIdentifierError(f"invalid bucket count {bucket_count}: use 1..1024")
        ns, table = split_qualified(name)
        return self.store.create(ns, table, id_mode=id_mode, bucket_count=bucket_count, comment=comment,
                                 command=command or f"create {ns}.{table}")

    def list_tables(self) -> list[str]:
        return self.store.list_tables()

    def state(self, name: str, as_of: int | None = None) -> FamilyState:
        """The five-layer mapping of ``name`` at logical version ``as_of`` (default: latest)."""
        ns, table = split_qualified(name)
        return self.store.load(ns, table, as_of)

    def log(self, name: str) -> list[VersionInfo]:
        ns, table = split_qualified(name)
        return self.store.log(ns, table)

    # ---- add rows -----------------------------------------------------------------------
    def submit(self, name: str, sources: list[str], batch: str, *, field_map: dict[str, str] | list[str] | None = None,
               kind: str | None = None, max_reject_ratio: float | None = None, progress: bool | None = None,
               command: str = "") -> SubmitReport:
        """Ingest ``sources`` as batch ``batch``; returns counts and the new logical version."""
        ns, table = split_qualified(name)
        return submit(self.store, ns, table, [str(s) for s in sources], batch, field_map=field_map, kind=kind,
                      max_reject_ratio=max_reject_ratio, progress=progress,
                      command=command or f"submit {ns}.{table} --batch {batch}")

    # ---- look ---------------------------------------------------------------------------
    def status(self, name: str, as_of: int | None = None) -> dict[str, Any]:
        """Batches, columns, physical tables (files, bytes) and the version of ``name``."""
        from omni_iceberg.status import table_status

        return table_status(self.catalog, self.state(name, as_of))

    def read(self, name: str, columns: list[str] | None = None, batches: list[str] | None = None,
             as_of: int | None = None) -> pa.Table:
        """Rows of the logical table at one version, reading only the physical tables needed."""
        from omni_iceberg.reader import read_logical

        return read_logical(self.catalog, self.state(name, as_of), columns, batches)

    def rejects(self, name: str, batch: str | None = None) -> pa.Table:
        """Rejected records of ``name`` (optionally one batch), from ``omni_sys.rejects``."""
        from catalog_ext import system_tables

        ns, table = split_qualified(name)
        ident = f"{ns}.{table}"
        flt = f"logical_table == '{ident}'" + (f" and batch == '{batch}'" if batch else "")
        from catalog_ext.contract import check_batch_name

        if batch:
            check_batch_name(batch)  # it is interpolated into the filter expression above
        return system_tables.read_rows(self.catalog, system_tables.REJECTS, flt)

    def query(self, sql: str, as_of: int | None = None) -> pa.Table:
        """Run a read-only SQL query over logical tables on the embedded engine."""
        from omni_iceberg.local_sql import run_query

        return run_query(self, sql, as_of=as_of)


__all__ = ["Omni", "ID_COLUMN", "BATCH_COLUMN"]
