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
from catalog_ext.config import OmniConfig
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
        from catalog_ext.errors import InvalidIdentifierError

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
        from omni_iceberg.explore.status import table_status

        return table_status(self.catalog, self.state(name, as_of))

    def read(self, name: str, columns: list[str] | None = None, batches: list[str] | None = None,
             as_of: int | None = None) -> pa.Table:
        """Rows of the logical table at one version, reading only the physical tables needed."""
        from omni_iceberg.explore.reader import read_logical

        return read_logical(self.catalog, self.state(name, as_of), columns, batches)

    def rejects(self, name: str, batch: str | None = None) -> pa.Table:
        """Rejected records of ``name`` (optionally one batch), from ``omni_sys.rejects``.

        For a committed batch, only the committing attempt's rejects (a failed attempt's are not the batch's).
        """
        from catalog_ext import system_tables

        return system_tables.read_rejects(self.catalog, self.state(name), batch)

    # ---- add columns ------------------------------------------------------------------------
    def register_features(self, name: str, definitions: list[Any], command: str = "") -> list[Any]:
        """Register feature definitions (objects, ``@feature``-decorated UDFs or YAML/JSON paths).

        All of them are validated first and committed as one logical version.
        """
        from omni_iceberg.features.registry import load_definitions_file, register
        from omni_iceberg.features.spec import FeatureDefinition

        defs: list[FeatureDefinition] = []
        for item in definitions:
            if isinstance(item, FeatureDefinition):
                defs.append(item)
            elif hasattr(item, "definition"):
                defs.append(item.definition)
            else:
                defs += load_definitions_file(str(item))
        ns, table = split_qualified(name)
        return register(self.store, ns, table, defs, command=command or f"feature register {ns}.{table}")

    def features(self, name: str) -> list[dict[str, Any]]:
        """Registered features of ``name``: version, inputs, outputs, engine, computed batches."""
        import json

        state = self.state(name)
        out = []
        for b in state.features:
            d = json.loads(b.definition)
            out.append({"name": b.name, "version": b.version, "current": b.current, "udf": d["udf"],
                        "engine": d["engine"], "inputs": d["inputs"], "outputs": list(b.outputs),
                        "physical_table": state.physical_table(b.table_key).identifier,
                        "computed_batches": sorted(state.computed_batches(b.name, b.version))})
        return out

    def plan(self, name: str, features: list[str], batches: list[str] | None = None, has_gpu: bool | None = None):
        """The backfill plan (minimal closure, stages, routes) without running it."""
        from omni_iceberg.backfill.planner import plan_backfill

        return plan_backfill(self.state(name), features, batches, has_gpu)

    def backfill(self, name: str, features: list[str], batches: list[str] | None = None, *, dry_run: bool = False,
                 isolation: str = "process", max_error_ratio: float | None = 0.1, progress: bool | None = None,
                 has_gpu: bool | None = None, command: str = "", engine: str = "local",
                 spark_master: str | None = None) -> Any:
        """Compute ``features`` (and their missing ancestors) for ``batches``; one logical commit.

        ``engine``: ``local``, ``spark`` (``spark_master``: ``spark://host:port``, default local[2])
        or ``auto`` (Spark from ``OMNI_SPARK_THRESHOLD_BYTES`` of input up); the report says which and why.
        """
        from omni_iceberg.backfill.choose import run_backfill

        return run_backfill(self, name, features, batches, engine=engine, spark_master=spark_master,
                            dry_run=dry_run, isolation=isolation, max_error_ratio=max_error_ratio,
                            progress=progress, has_gpu=has_gpu,
                            command=command or f"backfill {name} --features {','.join(features)}")

    def retry_failed(self, name: str, features: list[str], error_classes: list[str] | None = None, *,
                     isolation: str = "process", progress: bool | None = None, command: str = "",
                     engine: str = "local", spark_master: str | None = None) -> Any:
        """Recompute only the records ``features`` failed on (optionally only these exception classes)."""
        from omni_iceberg.backfill.choose import run_retry_failed

        return run_retry_failed(self, name, features, error_classes, engine=engine, spark_master=spark_master,
                                isolation=isolation, progress=progress, max_error_ratio=None,
                                command=command or f"backfill {name} --features {','.join(features)} --retry-failed")

    def errors(self, name: str, run_id: str | None = None) -> pa.Table:
        """Failed records of ``name`` from ``omni_sys.errors`` (optionally one run)."""
        from catalog_ext import system_tables
        from catalog_ext.contract import check_identifier

        ns, table = split_qualified(name)
        flt = f"logical_table == '{ns}.{table}'"
        if run_id:
            check_identifier(run_id.replace("-", "_"), "run id")
            flt += f" and run_id == '{run_id}'"
        return system_tables.read_rows(self.catalog, system_tables.ERRORS, flt)

    def lineage(self, name: str, column: str):
        """The upstream tree of a logical column (features, versions, inputs, runs)."""
        from omni_iceberg.backfill.lineage import lineage_tree

        return lineage_tree(self, name, column)

    def query(self, sql: str, as_of: int | None = None, engine: str = "local") -> pa.Table:
        """Run a read-only SQL query over logical tables (embedded DuckDB, or Spark); logged."""
        from omni_iceberg.explore.planner import run_query

        return run_query(self, sql, as_of=as_of, engine=engine)

    def export(self, name: str, out_dir: str, *, columns: list[str] | None = None, where: str | None = None,
               fmt: str = "parquet", as_of: int | None = None, progress: bool | None = None) -> Any:
        """Stream a filtered projection to ``out_dir`` with a manifest that re-creates it exactly."""
        from omni_iceberg.explore.export import export

        return export(self, name, columns, where, fmt, out_dir, as_of=as_of, progress=progress)

    def export_from_manifest(self, manifest: str, out_dir: str, progress: bool | None = None) -> Any:
        """Re-create an earlier export byte for byte from its manifest."""
        from omni_iceberg.explore.export import export_from_manifest

        return export_from_manifest(self, manifest, out_dir, progress=progress)

    def explain(self, sql: str, as_of: int | None = None) -> str:
        """The physical plan of a logical query: tables, snapshots, columns, pushed filters."""
        from omni_iceberg.explore.planner import plan_query

        return plan_query(self, sql, as_of).explain()

    def translate(self, sql: str, dialect: str, as_of: int | None = None) -> str:
        """The same query over pinned physical tables, in ``spark`` or ``trino`` SQL."""
        from omni_iceberg.explore.planner import plan_query

        return plan_query(self, sql, as_of).sql(dialect)


__all__ = ["Omni", "ID_COLUMN", "BATCH_COLUMN"]
