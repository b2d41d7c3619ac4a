"""Spark's registration hook, the ``omni_iceberg.engines`` entry point named ``spark``.

Spark offers six capabilities (:data:`omni_iceberg.engines.CAPABILITIES`): ``backfill``,
``rewrite`` (compaction, re-bucketing, materialization, the orphan sweep), ``ingest``, ``export``,
``sql`` and ``settings``. Importing this module imports no pyspark: the
factories and functions load the Spark modules when first called.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


def register() -> None:
    """Register Spark's capabilities (called by :mod:`omni_iceberg.engines`)."""
    from omni_iceberg.engines import register as offer

    offer("backfill", "spark", spark_engine)
    offer("rewrite", "spark", spark_rewrite)
    offer("ingest", "spark", spark_ingest)
    offer("export", "spark", spark_export)
    offer("sql", "spark", execute_sql)
    offer("settings", "spark", settings)


def spark_engine(ctx: OmniContext, *, master: str | None = None, spark: Any = None, **options: Any) -> Any:
    """A :class:`~spark_udfs.engine.SparkBackfill` on ``master`` (or the session ``spark``).

    ``isolation`` (a local-engine option) is ignored: Spark isolates UDFs in its own
    Python workers. Other options go to ``SparkBackfill`` (``jar_cache_dir``, ``overrides``).
    """
    from spark_udfs.engine import SparkBackfill

    options.pop("isolation", None)
    return SparkBackfill(ctx, spark=spark, master=master, **options)


def spark_rewrite(ctx: OmniContext | None = None, **options: Any) -> Any:
    """:func:`spark_udfs.rewrite.spark_rewrite`: a :class:`~spark_udfs.rewrite.SparkRewrite`."""
    from spark_udfs.rewrite import spark_rewrite as build

    return build(ctx, **options)


def unavailable(config: Any) -> str | None:
    """Why Spark cannot run for ``config`` here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'omni-iceberg[spark]')"
    if config.is_embedded:
        return "the catalog is embedded SQLite, which Spark would lock (use a PostgreSQL catalog)"
    return None


def spark_export(ctx: OmniContext, **options: Any) -> Any:
    """:func:`spark_udfs.export.spark_export`: a :class:`~spark_udfs.export.SparkExport`."""
    from spark_udfs.export import spark_export as build

    return build(ctx, **options)


def spark_ingest(ctx: OmniContext, **options: Any) -> Any:
    """:func:`spark_udfs.ingest.spark_ingest`: a :class:`~spark_udfs.ingest.SparkIngest`."""
    from spark_udfs.ingest import spark_ingest as build

    return build(ctx, **options)


spark_engine.unavailable = unavailable  # type: ignore[attr-defined]
spark_rewrite.unavailable = unavailable  # type: ignore[attr-defined]
spark_export.unavailable = unavailable  # type: ignore[attr-defined]
spark_ingest.unavailable = unavailable  # type: ignore[attr-defined]


def execute_sql(ctx: OmniContext, sql_text: str, master: str | None = None) -> Any:
    """:func:`spark_udfs.sql.execute_sql`, imported on first call."""
    from spark_udfs.sql import execute_sql as run

    return run(ctx, sql_text, master)


def settings(config: Any) -> dict[str, str]:
    """:func:`spark_udfs.config.spark_properties` (``omni spark-config``), imported on first call."""
    from spark_udfs.config import spark_properties

    return spark_properties(config)
