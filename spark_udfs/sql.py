"""Spark's SQL executor: run SQL already rewritten to the Spark dialect, return Arrow.

Registered as the ``sql`` capability of engine ``spark`` in :mod:`omni_iceberg.engines` (through the
``omni_iceberg.engines`` entry point), so the explore planner never imports Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


def execute_sql(ctx: OmniContext, sql_text: str) -> pa.Table:
    """``sql_text`` (Spark dialect, physical tables at pinned snapshots) on a Spark session for ``ctx``'s catalog."""
    from spark_udfs.session import build_spark_session

    spark = build_spark_session(ctx.config)
    return pa.Table.from_pandas(spark.sql(sql_text).toPandas(), preserve_index=False)
