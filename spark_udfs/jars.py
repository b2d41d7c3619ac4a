"""The Java jars a Spark session needs, fetched once from Maven Central into a cache.

``jars.lock.toml`` beside this module pins them, with the SHA-1 of each: Iceberg's
Spark runtime and the JDBC drivers of the SQL catalogs (every session's classpath), the
compiler of omni's session extension, and the package ``omni spark-config`` names for S3.

Why these versions: pyspark 3.5.9 with ``iceberg-spark-runtime-3.5_2.12`` 1.10.2 is the
pair verified to share one JDBC catalog and one ``file://`` warehouse with pyiceberg
0.12.0 in both directions (tables, schema evolution, snapshots, merge-on-read deletes,
Iceberg views with ``jdbc.schema-version=V1``). The runtime's Scala suffix (``_2.12``)
and Spark line (``3.5``) must match the pyspark wheel, which is built for Scala 2.12.
Newer Iceberg releases exist but were not verified against pyiceberg; bump the lock's
Iceberg version only together with the interop tests in ``tests/test_spark_catalog.py``.
The official runtime jar is used, not a repackaged copy from PyPI (that one lacks
Iceberg's shaded Jackson and fails at start-up).

Each jar is checked against the SHA-1 the lock pins, downloaded to a temporary file and
renamed into place, so a crash never leaves a half jar that later looks valid. A second
call finds the jars and does no network I/O.

Example::

    >>> from spark_udfs.jars import ensure_jars
    >>> [p.name for p in ensure_jars()]  # doctest: +SKIP
    ['iceberg-spark-runtime-3.5_2.12-1.10.2.jar', 'postgresql-42.7.14.jar', 'sqlite-jdbc-3.54.1.0.jar']
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from catalog_ext.errors import ConfigError
from omni_iceberg.jvm.maven_lock import MavenArtifact, cache_root, maven_repo, read_lock

#: the jars and packages of the Spark engine, with their SHA-1 (package data)
LOCK = Path(__file__).resolve().parent / "jars.lock.toml"
#: Spark line the runtime jar is built for; must match the installed pyspark.
SPARK_MINOR_VERSION = "3.5"
#: Scala binary version of the pyspark 3.5 wheels.
SCALA_BINARY_VERSION = "2.12"

#: The jars :func:`ensure_jars` provides, in classpath order.
JARS: tuple[MavenArtifact, ...] = tuple(read_lock(LOCK))
#: The compiler of omni's session extension (:mod:`spark_udfs.extension`).
ECJ: MavenArtifact = read_lock(LOCK, "compiler")[0]
_RUNTIME = f"iceberg-spark-runtime-{SPARK_MINOR_VERSION}_{SCALA_BINARY_VERSION}"
try:
    #: Iceberg release of the runtime jar (see module docstring).
    ICEBERG_VERSION = next(j.version for j in JARS if j.group == "org.apache.iceberg" and j.artifact == _RUNTIME)
except StopIteration:
    raise ConfigError(f"{LOCK} locks no {_RUNTIME} jar: the Iceberg runtime must match pyspark "
                      f"{SPARK_MINOR_VERSION} (Scala {SCALA_BINARY_VERSION})") from None

_FIX = "run `python -m spark_udfs.jars` where Maven Central is reachable, or point OMNI_CACHE at a folder whose jars/ holds them"


def session_packages(name: str) -> list[str]:
    """The Maven packages a session resolves itself for ``name`` (``s3``), from the lock's ``[packages]``."""
    with open(LOCK, "rb") as f:
        return list(tomllib.load(f)["packages"][name])


def default_cache_dir() -> Path:
    """``$OMNI_CACHE/jars`` (default ``./.cache/jars``)."""
    return cache_root() / "jars"


def ensure_jars(cache_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Return the paths of the Iceberg runtime and JDBC driver jars, downloading missing ones.

    Idempotent: jars already in ``cache_dir`` are trusted (they were verified before the
    rename that put them there) and no network is used. Raises
    :class:`~catalog_ext.errors.ConfigError` when a jar is missing and cannot be fetched
    or fails its checksum.
    """
    cache = Path(cache_dir).resolve() if cache_dir is not None else default_cache_dir()
    repo = maven_repo()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the jar cache {cache}: {e}; set OMNI_CACHE to a writable folder") from e
    return [jar.fetch(cache / jar.filename, _FIX, repo) for jar in JARS]


if __name__ == "__main__":  # pragma: no cover - convenience for set-up scripts (`make jars`)
    for path in ensure_jars():
        print(path)
