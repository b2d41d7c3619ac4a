"""Spark's SQL executor: run SQL already rewritten to the Spark dialect, return Arrow.

Registered as the ``sql`` capability of engine ``spark`` in :mod:`omni_iceberg.engines` (through the
``omni_iceberg.engines`` entry point), so the explore planner never imports Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from catalog_ext.errors import ConfigError

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


def execute_sql(ctx: OmniContext, sql_text: str, master: str | None = None) -> pa.Table:
    """``sql_text`` (Spark dialect, physical tables at pinned snapshots) on a Spark session for ``ctx``'s catalog.

    ``master``: a cluster (``spark://HOST:PORT``) or ``local[N]``; None: a session this process
    already runs, else ``local[2]``. A cluster's session is checked as a backfill's is (master
    reachable, an executor registered, the same Iceberg catalog) before the query runs.
    """
    if master is None:
        from spark_udfs.session import build_spark_session

        spark = build_spark_session(ctx.config)
    else:
        spark = _session_on(ctx, master)
    return pa.Table.from_pandas(spark.sql(sql_text).toPandas(), preserve_index=False)


def _session_on(ctx: OmniContext, master: str):
    from pyspark.sql import SparkSession

    from spark_udfs.engine import check_master_reachable, open_session

    running = SparkSession.getActiveSession()
    if running is not None and running.sparkContext.master != master:
        check_master_reachable(master)  # a master that does not answer is the error to name first
    if running is not None:
        # one SparkContext per process: a session already running keeps the master it started with
        have = running.sparkContext.master
        if have != master:
            raise ConfigError(f"this process already runs a Spark session on {have}; it cannot query on {master} "
                              "as well - stop that session first, or ask for its master")
        return running
    return open_session(ctx.config, master, app_name="omni-sql")
