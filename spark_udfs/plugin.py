"""Spark's registration hook, the ``omni_iceberg.engines`` entry point named ``spark``.

Importing this module imports no pyspark: the factory, the executor and the operations
load the Spark modules when first called.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


def register() -> None:
    """Register the Spark backfill engine, SQL executor and operations (called by :mod:`omni_iceberg.engines`)."""
    from omni_iceberg.engines import register_backfill_engine, register_engine_operation, register_sql_executor

    register_backfill_engine("spark", spark_engine)
    register_sql_executor("spark", execute_sql)
    for operation, fn in OPERATIONS.items():
        register_engine_operation("spark", operation, fn)


def spark_engine(ctx: OmniContext, *, master: str | None = None, spark: Any = None, **options: Any) -> Any:
    """A :class:`~spark_udfs.engine.SparkBackfill` on ``master`` (or the session ``spark``).

    ``isolation`` (a local-engine option) is ignored: Spark isolates UDFs in its own
    Python workers. Other options go to ``SparkBackfill`` (``jar_cache_dir``, ``overrides``).
    """
    from spark_udfs.engine import SparkBackfill

    options.pop("isolation", None)
    return SparkBackfill(ctx, spark=spark, master=master, **options)


def unavailable(config: Any) -> str | None:
    """Why Spark cannot run a backfill for ``config`` here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'omni-iceberg[spark]')"
    if config.is_embedded:
        return "the catalog is embedded SQLite, which Spark would lock (use a PostgreSQL catalog)"
    return None


spark_engine.unavailable = unavailable  # type: ignore[attr-defined]


def execute_sql(ctx: OmniContext, sql_text: str) -> Any:
    """:func:`spark_udfs.sql.execute_sql`, imported on first call."""
    from spark_udfs.sql import execute_sql as run

    return run(ctx, sql_text)


def settings(config: Any) -> dict[str, str]:
    """:func:`spark_udfs.config.spark_properties` (``omni spark-config``), imported on first call."""
    from spark_udfs.config import spark_properties

    return spark_properties(config)


def compact(*args: Any, **kwargs: Any) -> Any:
    """:func:`spark_udfs.compaction.rewrite_partitions_on_spark`, imported on first call."""
    from spark_udfs.compaction import rewrite_partitions_on_spark

    return rewrite_partitions_on_spark(*args, **kwargs)


def rebucket(*args: Any, **kwargs: Any) -> Any:
    """:func:`spark_udfs.rebucket.rebucket_table_on_spark`, imported on first call."""
    from spark_udfs.rebucket import rebucket_table_on_spark

    return rebucket_table_on_spark(*args, **kwargs)


def sweep_orphans(*args: Any, **kwargs: Any) -> Any:
    """:func:`spark_udfs.orphans.sweep_on_spark`, imported on first call."""
    from spark_udfs.orphans import sweep_on_spark

    return sweep_on_spark(*args, **kwargs)


def orphan_grace_blocker(older_than_s: float) -> str | None:
    """:func:`spark_udfs.orphans.spark_grace_blocker`, imported on first call."""
    from spark_udfs.orphans import spark_grace_blocker

    return spark_grace_blocker(older_than_s)


#: what Spark registers under :data:`omni_iceberg.engines.OPERATIONS`' names
OPERATIONS = {"settings": settings, "compact": compact, "rebucket": rebucket, "sweep_orphans": sweep_orphans,
              "orphan_grace_blocker": orphan_grace_blocker}
