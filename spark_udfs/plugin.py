"""Spark's registration hook, the ``omni_iceberg.engines`` entry point named ``spark``.

Importing this module imports no pyspark: the factory and the executor load the
Spark modules when first called.
"""

from __future__ import annotations

import importlib.util
from typing import Any


def register() -> None:
    """Register the Spark backfill engine and SQL executor (called by :mod:`omni_iceberg.engines`)."""
    from omni_iceberg.engines import register_backfill_engine, register_sql_executor

    register_backfill_engine("spark", spark_engine)
    register_sql_executor("spark", execute_sql)


def spark_engine(omni: Any, *, master: str | None = None, spark: Any = None, **options: Any) -> Any:
    """A :class:`~spark_udfs.engine.SparkBackfill` on ``master`` (or the session ``spark``).

    ``isolation`` (a local-engine option) is ignored: Spark isolates UDFs in its own
    Python workers. Other options go to ``SparkBackfill`` (``jar_cache_dir``, ``overrides``).
    """
    from spark_udfs.engine import SparkBackfill

    options.pop("isolation", None)
    return SparkBackfill(omni, spark=spark, master=master, **options)


def unavailable(config: Any) -> str | None:
    """Why Spark cannot run a backfill for ``config`` here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'omni-iceberg[spark]')"
    if config.is_embedded:
        return "the catalog is embedded SQLite, which Spark would lock (use a PostgreSQL catalog)"
    return None


spark_engine.unavailable = unavailable  # type: ignore[attr-defined]


def execute_sql(omni: Any, sql_text: str) -> Any:
    """:func:`spark_udfs.sql.execute_sql`, imported on first call."""
    from spark_udfs.sql import execute_sql as run

    return run(omni, sql_text)
