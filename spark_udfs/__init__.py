"""The Spark side of the engine protocol: jars, session, the engine and its stages.

The core never imports this package: :mod:`spark_udfs.plugin` registers the ``spark``
engine's capabilities - backfill (:mod:`spark_udfs.engine`), rewrite (:mod:`spark_udfs.rewrite`:
compaction, re-bucketing, the orphan sweep), ingest (:mod:`spark_udfs.ingest`: ``omni submit
--engine spark``), export (:mod:`spark_udfs.export`), sql (:mod:`spark_udfs.sql`) and settings -
through the ``omni_iceberg.engines`` entry point. Stages run as one fused
``mapInArrow`` pass (:mod:`spark_udfs.arrow_stage`) or, when every feature of a stage
is a pandas UDF, as Spark pandas UDFs (:mod:`spark_udfs.pandas_stage`).

Nothing here imports pyspark at module level - :func:`build_spark_session` imports it
when called - and the public names below are loaded on first use, so importing
``spark_udfs`` (or running ``python -m spark_udfs.jars``) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["build_spark_session", "ensure_jars", "spark_catalog_conf"]

if TYPE_CHECKING:  # pragma: no cover
    from spark_udfs.jars import ensure_jars
    from spark_udfs.session import build_spark_session, spark_catalog_conf

_EXPORTS = {
    "ensure_jars": "spark_udfs.jars",
    "build_spark_session": "spark_udfs.session",
    "spark_catalog_conf": "spark_udfs.session",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_udfs' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
