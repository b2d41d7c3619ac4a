"""omni's Spark session extension: Java sources in ``spark_udfs/java``, compiled here into a jar.

What it adds:

- ``omni.spark.OmniSparkCatalog``: Iceberg's ``SparkCatalog`` keeping the tables it loads
  at a snapshot id (immutable) for the session. The view names every physical table
  ``VERSION AS OF`` its pinned snapshot, and Spark resolved each one from the catalog on
  every query, even those the optimizer then drops. Unversioned loads are not cached.
- ``omni.spark.PruneOmniViews``, a resolution rule: a query that names some columns of an
  omni logical view reads the view with only those columns - and the joins they read, each
  join's per-key aggregate cut to the columns read from it - in its body
  (``omni.spark.ViewPruning`` cuts omni's rendering of it). Spark drops unread
  joins anyway, but only after analysing the whole body, whose cost grows with the family
  (``view_pruning`` in benchmarks/RESULTS.md). Queries with ``*``, NATURAL/USING joins,
  PIVOT, or where the view's rows flow out unprojected, read the whole view as before.
  ``spark.omni.viewPruning.enabled=false`` turns it off per session.
- ``omni.spark.DropContainedDriver``, an optimizer rule: the cut view marks the tables it
  reads with its version's digest, and an inner join of the marked base with a marked
  feature table on the keys (a NULL-rejecting filter) loses the base when the query reads
  no base column - every feature row of one version has its base row.
- ``omni.spark.QueryLogListener``, a query-execution listener: each successful query that
  reads an omni view appends the logical table, version, the view columns it read and the
  batches it named to the query-log spool's events file (``spark.omni.queryLog.events``,
  :attr:`catalog_ext.log_spool.LogSpool.events_path`), which omni flushes into
  ``omni_sys.query_log`` with ``query_engine = 'spark'``. Spark calls it on its listener
  thread, after the query; a failure to record is counted, never raised.
- ``omni.spark.RestoreScanLinks``: works around a Spark 3.5 bug that failed self-joins of
  the view under adaptive execution.
- ``omni.spark.UniqueKeyAggregates``, an optimizer rule. The logical view
reads each feature table as ``(SELECT keys, any_value(c) ... GROUP BY keys)`` so that
Spark can drop the tables a query does not read (see :mod:`catalog_ext.view_sql`); for
the tables it does read, that grouping is a hash aggregate and a shuffle per table that
change nothing, because omni writes at most one row per key and physical table. The rule
removes exactly those aggregates, on tables that declare their keys unique (the table
property ``omni.unique-keys``, which :func:`catalog_ext.physical.create_physical_table`
sets), after Spark has dropped the unread joins.

Why it is compiled at set-up: it is the project's own code, and no build tool is needed.
ECJ (the Eclipse compiler for Java: one jar from Maven Central, checked against the
SHA-1 ``jars.lock.toml`` pins) runs on any Java 17+ runtime, including the one the ``trino`` extra
brings in a wheel (a runtime alone has no ``javac``). It compiles against the jars of the
installed pyspark and the Iceberg runtime. The jar's name carries a digest of the sources
and of the pyspark and Iceberg versions, so an edit or an upgrade builds a new jar and an old one is never loaded.

Without it (no Java found, a failed compile, ``OMNI_SPARK_EXTENSION=0``) a session runs
as before: the view returns the same rows, read tables keep their aggregate.

    python -m spark_udfs.extension      # build it now (``make jars`` does)
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from catalog_ext.config import OmniConfig
from catalog_ext.errors import ConfigError
from omni_iceberg.jvm.compile import cached_jar, compile_jar, source_digest
from spark_udfs.jars import ECJ, default_cache_dir, ensure_jars

log = logging.getLogger(__name__)

#: the class ``spark.sql.extensions`` names
EXTENSION_CLASS = "omni.spark.OmniSparkSessionExtensions"
#: the catalog class sessions with the extension use for omni's catalog (an Iceberg SparkCatalog)
CATALOG_CLASS = "omni.spark.OmniSparkCatalog"
SOURCES = Path(__file__).resolve().parent / "java"
#: ``OMNI_SPARK_EXTENSION=0`` leaves the extension out of every session (comparisons, debugging)
SWITCH = "OMNI_SPARK_EXTENSION"


def enabled() -> bool:
    from catalog_ext import settings

    return bool(settings.value(SWITCH))


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def jar_name() -> str:
    """``omni-spark-extensions-<digest>.jar``: the digest of the sources and the pyspark version."""
    import pyspark

    from spark_udfs.jars import ICEBERG_VERSION

    return f"omni-spark-extensions-{source_digest([SOURCES], f'{pyspark.__version__} {ICEBERG_VERSION}')}.jar"


def ensure_extension_jar(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The extension jar in ``cache_dir`` (default: the Spark jar cache), compiled if missing.

    Raises :class:`~catalog_ext.errors.ConfigError` naming what failed (no Java, ECJ not
    downloadable, a compile error with the compiler's output).
    """
    def build(target: Path) -> Path:
        tools = default_cache_dir()
        ecj = ECJ.fetch(tools / ECJ.filename, "run `make jars` where Maven Central is reachable")
        # pyspark's jars and the Iceberg runtime (OmniSparkCatalog extends its SparkCatalog)
        classpath = [*sorted(_spark_jars().glob("*.jar")), *(p for p in ensure_jars(tools) if "iceberg" in p.name)]
        return compile_jar(ecj, [SOURCES], classpath, target, what="omni's Spark extension")

    return cached_jar(cache_dir, default_cache_dir(), jar_name(), build)


def extension_jar(cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The jar for a session, or None (disabled, or it cannot be built: logged, not raised)."""
    if not enabled():
        return None
    try:
        return ensure_extension_jar(cache_dir)
    except ImportError:  # no pyspark here (`omni spark-config` for another machine): nothing to compile against
        log.warning("Spark runs without omni's extension: pyspark is not installed here to compile it against")
        return None
    except ConfigError as e:
        log.warning("Spark runs without omni's extension (read feature tables keep their per-key "
                    "aggregate): %s", e)
        return None


#: the listener class ``spark.sql.queryExecutionListeners`` names
LISTENER_CLASS = "omni.spark.QueryLogListener"
#: unflushed events past this many bytes are dropped (and counted) instead of appended
MAX_EVENT_BYTES = 64 << 20


def add_to_conf(conf: dict[str, str], catalog_prefix: str, jar: str | os.PathLike[str],
                config: OmniConfig | None = None) -> None:
    """Spark settings ``conf`` with the extension: its class before Iceberg's, omni's catalog
    class for ``catalog_prefix`` (``spark.sql.catalog.<name>``) and ``jar`` on ``spark.jars``;
    with ``config``, the query-log listener writing to that catalog's spool.

    Before: omni's view pruning is a resolution rule that must see a query's view names
    before Iceberg's rule (injected by Iceberg's extension) resolves them in the same pass.
    """
    conf["spark.sql.extensions"] = ",".join(filter(None, [EXTENSION_CLASS, conf.get("spark.sql.extensions")]))
    conf[catalog_prefix] = CATALOG_CLASS
    conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), str(Path(jar).resolve())]))
    if config is not None:
        conf.update(query_log_conf(config, conf.get("spark.sql.queryExecutionListeners")))


def query_log_conf(config: OmniConfig, listeners: str | None = None) -> dict[str, str]:
    """The settings that make a session record its queries on omni's views in ``config``'s query log."""
    from catalog_ext import system_tables
    from catalog_ext.log_spool import spool_for

    spool = spool_for(config, system_tables.QUERY_LOG)
    try:
        spool.dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # the listener tries again (and counts its failures): never the session's problem
        log.warning("the query-log spool %s cannot be created (%s): Spark queries are not recorded", spool.dir, e)
    return {"spark.sql.queryExecutionListeners": ",".join(filter(None, [listeners, LISTENER_CLASS])),
            "spark.omni.queryLog.events": str(spool.events_path),
            "spark.omni.queryLog.maxBytes": str(MAX_EVENT_BYTES)}


if __name__ == "__main__":  # pragma: no cover - `make jars`
    print(ensure_extension_jar())
