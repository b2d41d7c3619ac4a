"""A local SparkSession wired to the same Iceberg catalog and warehouse as pyiceberg.

:func:`spark_catalog_conf` turns an :class:`~catalog_ext.config.OmniConfig` into Spark
settings (pure, no Spark needed); :func:`build_spark_session` starts Spark with them.

Catalog sharing (Iceberg Java ``JdbcCatalog`` <-> pyiceberg ``SqlCatalog``), as measured
with pyspark 3.5.9 + Iceberg 1.10.2 + pyiceberg 0.12.0:

- the catalog name is a column (``catalog_name``) of the catalog tables, so Spark's
  catalog is registered under ``config.catalog_name`` - the same name pyiceberg uses -
  and made the default catalog, so ``SELECT * FROM ns.t`` works without a prefix;
- ``jdbc.schema-version=V1`` makes Java create/upgrade ``iceberg_tables`` with the
  ``iceberg_type`` column, without which Java's JdbcCatalog has no views. pyiceberg
  0.12 ``SqlCatalog`` creates the same V1 layout on a fresh database, writes
  ``iceberg_type='TABLE'`` and filters out ``VIEW`` rows from its table calls (rows with
  NULL are read as tables by both sides);
- ``cache-enabled=false``: otherwise Spark keeps serving the table state it loaded
  first and never sees pyiceberg's later commits.

.. warning::
   Spark on a **SQLite** catalog deadlocks pyiceberg writers: the JdbcCatalog keeps
   metadata result sets open, which holds a read lock on the SQLite file for the whole
   Spark session, and every pyiceberg commit fails with ``database is locked`` (with WAL,
   Spark's own commits fail instead). :func:`build_spark_session` therefore refuses a
   SQLite catalog unless ``allow_sqlite_catalog=True`` (only for sessions where no
   Python writer runs at the same time). Use PostgreSQL (``OMNI_CATALOG=
   postgresql+psycopg://...``) or REST whenever both sides write; tests do.

Views: with V1, Spark's ``CREATE VIEW`` writes a ``VIEW`` row whose metadata is
gzipped (``*.gz.metadata.json``, ``file:/`` path, ``default-namespace: []``, the SQL text
exactly as written, so write ``ns.t`` - never ``omni.ns.t`` - in view bodies). A view
written from Python (plain ``.metadata.json`` + a row with ``iceberg_type='VIEW'`` and
NULL ``previous_metadata_location``) is read by Spark: ``SELECT``, ``SHOW VIEWS``,
``SHOW TBLPROPERTIES``. pyiceberg's SqlCatalog has no view API (NotImplementedError).

JVM: a session runs with :data:`PRODUCTION_JVM_FLAGS` (the optimising C2 JIT, the G1
collector) and a driver heap of ``OMNI_SPARK_MEMORY_MB`` (by default a quarter of the
machine's memory; a local master's executors live in the driver's JVM), what long work
wants. ``OMNI_SPARK_JVM=fast-start`` swaps in :data:`FAST_JVM_FLAGS` (C1 only, serial
collector), which start faster and run long work slower: the test suite opts into it
(tests/conftest.py), nothing else does. The first query also pays for loading the
Iceberg catalog classes, the JDBC connection and the scan planning; what a session's
start costs is measured in benchmarks/RESULTS.md (``spark_fusion``).
"""

from __future__ import annotations

from catalog_ext.redact import redact

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from catalog_ext.config import OmniConfig, resolve_catalog_uri
from catalog_ext.errors import ConfigError
from spark_udfs.jars import ensure_jars

if TYPE_CHECKING:  # pragma: no cover - typing only; pyspark stays an optional extra
    from pyspark.sql import SparkSession

#: JVM flags for a faster start (C1 only, no parallel GC threads): short-lived sessions
#: such as the test suite's (``OMNI_SPARK_JVM=fast-start``); long work runs slower with them.
FAST_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: What a user's session gets: tiered compilation up to the optimising C2 JIT (the JVM's
#: default) and G1 named explicitly, because a JVM that sees fewer than 2 CPUs or less
#: than 1792 MiB picks the serial collector on its own.
PRODUCTION_JVM_FLAGS = "-XX:+UseG1GC"

#: Spark's own default driver heap; the floor of the share-of-memory default below.
_MIN_DRIVER_MB = 1024


def jvm_flags() -> str:
    """The driver's and executors' JVM flags for ``OMNI_SPARK_JVM`` (production or fast-start)."""
    from catalog_ext import settings

    return FAST_JVM_FLAGS if str(settings.value("OMNI_SPARK_JVM")).lower() == "fast-start" else PRODUCTION_JVM_FLAGS


def driver_memory_mb() -> int:
    """``OMNI_SPARK_MEMORY_MB``, or when it is 0 a quarter of this machine's memory (at least 1 GiB).

    The driver's heap is sized up front because a JVM cannot grow past its ``-Xmx``:
    Spark's 1 GiB default spills or fails on inputs a bigger machine holds easily.
    """
    from catalog_ext import settings

    wanted = float(settings.value("OMNI_SPARK_MEMORY_MB"))
    if wanted > 0:
        return int(wanted)
    total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    return max(_MIN_DRIVER_MB, int(total_mb // 4))

#: Settings that make a join of tables bucketed alike (e.g. ``(append_name,
#: bucket(16, id))``) a storage-partitioned join: no Exchange (shuffle) on either side.
#: Partially clustered distribution stays off: with it, a join of three family members
#: was planned with two Exchanges (benchmarks/spark_join), without it with none.
STORAGE_PARTITIONED_JOIN_CONF: dict[str, str] = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.sources.v2.bucketing.pushPartValues.enabled": "true",
    "spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled": "false",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    "spark.sql.iceberg.planning.preserve-data-grouping": "true",
}

#: Runtime filters off. Spark 3.5 plans a dynamic-partition-pruning subquery and a runtime
#: bloom filter for each join it can, and their planning grows exponentially with the joins
#: of one query: a query on the logical view naming 8 feature tables spent 17 s in EXPLAIN
#: (0.7 s with both off), 11 tables did not finish in minutes. The view joins on the unique
#: id, which buckets files but prunes no partition, so neither filter pays for itself there.
#: Sessions that also join partitioned fact tables can turn them back on (``overrides``).
VIEW_JOIN_CONF: dict[str, str] = {
    "spark.sql.optimizer.dynamicPartitionPruning.enabled": "false",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
}

_SQLITE_DEADLOCK = (
    "Spark on a SQLite catalog locks out pyiceberg writers (`database is locked`) for the "
    "whole Spark session; use a PostgreSQL catalog (OMNI_CATALOG=postgresql+psycopg://...) "
    "or REST, or pass allow_sqlite_catalog=True if no Python writer runs meanwhile"
)


def catalog_properties(config: OmniConfig) -> dict[str, str]:
    """Iceberg catalog properties (without the ``spark.sql.catalog.<name>.`` prefix).

    ``postgresql+psycopg://u:p@h:5432/db?sslmode=require`` becomes ``type=jdbc``,
    ``uri=jdbc:postgresql://h:5432/db?sslmode=require``, ``jdbc.user=u``,
    ``jdbc.password=p``; ``sqlite:////abs/catalog.db`` becomes
    ``uri=jdbc:sqlite:/abs/catalog.db``; ``http(s)://`` becomes ``type=rest``.

    >>> from pathlib import Path
    >>> cfg = OmniConfig(Path("/h"), "postgresql+psycopg://bob:s%40cret@db:5433/cat", "file:///w")
    >>> p = catalog_properties(cfg)
    >>> p["uri"], p["jdbc.user"], p["jdbc.password"], p["jdbc.schema-version"]
    ('jdbc:postgresql://db:5433/cat', 'bob', 's@cret', 'V1')
    """
    uri = resolve_catalog_uri(config.catalog_uri)
    props: dict[str, str] = {}
    if uri.startswith(("http://", "https://")):
        props["type"] = "rest"
        props["uri"] = uri
    else:
        props.update(_jdbc_properties(uri))
        props["jdbc.schema-version"] = "V1"
    props["warehouse"] = config.warehouse
    props["cache-enabled"] = "false"
    # pyiceberg-side extras (credentials, tokens...) share Iceberg's property names;
    # Java ignores the ones it does not know. Never let them replace the catalog's identity.
    for key, value in config.extra_properties.items():
        props.setdefault(key, str(value))
    return props


def _jdbc_properties(sqlalchemy_uri: str) -> dict[str, str]:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(sqlalchemy_uri)
    except ArgumentError as e:
        raise ConfigError(f"catalog URI {sqlalchemy_uri!r} is not a SQLAlchemy URL: {e}") from e
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ConfigError(
                f"catalog URI {sqlalchemy_uri!r}: an in-memory SQLite catalog cannot be shared with "
                "Spark; give a file path (sqlite:////abs/path/catalog.db)"
            )
        return {"type": "jdbc", "uri": f"jdbc:sqlite:{Path(url.database).resolve()}"}
    if backend in ("postgresql", "postgres"):
        host = url.host or "localhost"
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        port = f":{url.port}" if url.port else ""
        query = f"?{urlencode(url.query, doseq=True)}" if url.query else ""
        props = {
            "type": "jdbc",
            "uri": f"jdbc:postgresql://{host}{port}/{quote(url.database or '', safe='')}{query}",
        }
        if url.username:
            props["jdbc.user"] = url.username
        if url.password is not None:
            props["jdbc.password"] = str(url.password)
        return props
    raise ConfigError(
        f"catalog URI {sqlalchemy_uri!r}: Spark supports PostgreSQL, SQLite and REST catalogs here, "
        f"not {backend!r}"
    )


def spark_catalog_conf(
    config: OmniConfig,
    *,
    master: str = "local[2]",
    app_name: str = "omni",
    jars: Sequence[os.PathLike[str] | str] = (),
    overrides: Mapping[str, Any] | None = None,
    extension_jar: os.PathLike[str] | str | None = None,
) -> dict[str, str]:
    """Every Spark setting :func:`build_spark_session` uses, ``overrides`` applied last.

    ``extension_jar`` (see :mod:`spark_udfs.extension`) adds omni's session extension
    before Iceberg's, and makes the catalog omni's subclass of Iceberg's ``SparkCatalog``.
    An override whose value is ``None`` removes that setting.
    """
    name = config.catalog_name
    prefix = f"spark.sql.catalog.{name}"
    python = sys.executable
    conf: dict[str, str] = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.defaultCatalog": name,
        # small local machine: few partitions, no UI, loopback only
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "2",
        "spark.driver.memory": f"{driver_memory_mb()}m",
        "spark.driver.extraJavaOptions": jvm_flags(),
        "spark.executor.extraJavaOptions": jvm_flags(),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        # Spark's own (non-Iceberg) warehouse goes under omni's home, not the current folder
        "spark.sql.warehouse.dir": str(config.home / "spark-warehouse"),
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.executorEnv.PYSPARK_PYTHON": python,
        **STORAGE_PARTITIONED_JOIN_CONF,
        **VIEW_JOIN_CONF,
    }
    if jars:
        conf["spark.jars"] = ",".join(str(Path(j).resolve()) for j in jars)
    if extension_jar is not None:
        from spark_udfs.extension import add_to_conf

        add_to_conf(conf, prefix, extension_jar, config)
    for key, value in catalog_properties(config).items():
        conf[f"{prefix}.{key}"] = value
    for key, value in (overrides or {}).items():
        if value is None:
            conf.pop(key, None)
        else:
            conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return conf


def build_spark_session(
    config: OmniConfig,
    *,
    master: str = "local[2]",
    app_name: str = "omni",
    overrides: Mapping[str, Any] | None = None,
    jar_cache_dir: str | os.PathLike[str] | None = None,
    allow_sqlite_catalog: bool = False,
) -> "SparkSession":
    """Start (or reuse) a SparkSession whose default catalog is ``config``'s Iceberg catalog.

    Tables are then reachable as ``<catalog_name>.ns.t`` or just ``ns.t``. Jars come
    from :func:`~spark_udfs.jars.ensure_jars` (``jar_cache_dir``). Any setting of
    :func:`spark_catalog_conf` can be replaced through ``overrides``.

    Only one SparkContext can live in a process: when one is already running, its
    session is returned with the SQL settings applied, but static settings (jars, JVM
    flags, master) are those it was started with - stop it first to change them.

    Raises :class:`~catalog_ext.errors.ConfigError` when java is missing, when the
    session cannot start, or for a SQLite catalog unless ``allow_sqlite_catalog`` (see
    the module warning: Spark + SQLite catalog blocks pyiceberg writers).

    Example::

        spark = build_spark_session(OmniConfig.resolve(catalog="postgresql+psycopg://u@h/db"))
        spark.sql("SELECT count(*) FROM ns.t").show()
    """
    if config.is_embedded and not allow_sqlite_catalog:
        raise ConfigError(f"catalog {redact(config.catalog_uri)}: {_SQLITE_DEADLOCK}")
    java = _find_java()
    jars = ensure_jars(jar_cache_dir)
    from spark_udfs.extension import extension_jar

    conf = spark_catalog_conf(config, master=master, app_name=app_name, jars=jars, overrides=overrides,
                              extension_jar=extension_jar(jar_cache_dir))

    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise ConfigError("pyspark is not installed; install the extra: pip install 'omni-iceberg[spark]'") from e

    # The Python workers must be this interpreter (the venv with pyarrow/pandas).
    # SPARK_LOCAL_IP: without it Spark resolves the host name and binds the block manager
    # to the first non-loopback interface ("hostname resolves to a loopback address").
    os.environ.setdefault("SPARK_LOCAL_IP", conf.get("spark.driver.bindAddress", "127.0.0.1"))
    os.environ.setdefault("PYSPARK_PYTHON", conf.get("spark.pyspark.python", sys.executable))
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", conf.get("spark.pyspark.driver.python", sys.executable))

    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as e:
        raise ConfigError(
            f"Spark could not start (java: {java}, {_java_version(java)}; master {master}): "
            f"{_first_line(e)}; Spark 3.5 needs Java 8/11/17 - set JAVA_HOME to a JDK 17 "
            "(apt-get install -y openjdk-17-jre-headless)"
        ) from e
    _check_reused_session(session, conf)
    return session


def _find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
        raise ConfigError(f"JAVA_HOME={home} has no bin/java; point JAVA_HOME at a JDK 17 or unset it")
    found = shutil.which("java")
    if found is None:
        raise ConfigError(
            "java not found on PATH; Spark needs a JDK 17: apt-get install -y openjdk-17-jre-headless "
            "(or set JAVA_HOME)"
        )
    return found


def _java_version(java: str) -> str:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
        return (out.stderr or out.stdout).splitlines()[0].strip()
    except Exception as e:  # pragma: no cover - only used to enrich an error message
        return f"version unknown ({e})"


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def _check_reused_session(session: "SparkSession", conf: Mapping[str, str]) -> None:
    """getOrCreate silently returns an existing session; refuse one without our jars."""
    wanted = conf.get("spark.jars")
    if not wanted:
        return
    have = session.sparkContext.getConf().get("spark.jars", "") or ""
    missing = [j for j in wanted.split(",") if Path(j).name not in have]
    if missing:
        raise ConfigError(
            "a SparkSession already runs in this process without the Iceberg jars "
            f"({', '.join(Path(j).name for j in missing)}); call spark.stop() before build_spark_session"
        )
