"""The Java jars a Spark session needs, fetched once from Maven Central into a cache.

Why these versions: pyspark 3.5.9 with ``iceberg-spark-runtime-3.5_2.12`` 1.10.2 is the
pair measured on this workplace's machines to share one JDBC catalog and one ``file://``
warehouse with pyiceberg 0.12.0 in both directions (tables, schema evolution, snapshots,
merge-on-read deletes, Iceberg views with ``jdbc.schema-version=V1``). The runtime's
Scala suffix (``_2.12``) and Spark line (``3.5``) must match the pyspark wheel, which is
built for Scala 2.12. Newer Iceberg releases exist but were not verified against
pyiceberg here; bump :data:`ICEBERG_VERSION` only together with the interop tests in
``tests/test_spark_catalog.py``. The official runtime jar is used, not a repackaged copy
from PyPI (that one lacks Iceberg's shaded Jackson and fails at start-up).

Each jar is checked against the ``.sha1`` Maven Central publishes beside it, downloaded
to a temporary file and renamed into place, so a crash never leaves a half jar that
later looks valid. A second call finds the jars and does no network I/O.

Example::

    >>> from spark_udfs.jars import ensure_jars
    >>> [p.name for p in ensure_jars()]  # doctest: +SKIP
    ['iceberg-spark-runtime-3.5_2.12-1.10.2.jar', 'postgresql-42.7.14.jar', 'sqlite-jdbc-3.54.1.0.jar']
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from omni_iceberg.toolchain.downloads import download_verified
from catalog_ext.errors import ConfigError

#: Spark line the runtime jar is built for; must match the installed pyspark.
SPARK_MINOR_VERSION = "3.5"
#: Scala binary version of the pyspark 3.5 wheels.
SCALA_BINARY_VERSION = "2.12"
#: Iceberg release verified with pyspark 3.5.9 and pyiceberg 0.12.0 (see module docstring).
ICEBERG_VERSION = "1.10.2"
#: PostgreSQL JDBC driver, for the shared PostgreSQL catalog (the one tests use).
POSTGRES_JDBC_VERSION = "42.7.14"
#: SQLite JDBC driver, for the embedded catalog (read-only use from Spark; see session.py).
SQLITE_JDBC_VERSION = "3.54.1.0"

#: Where jars are fetched from. Overridable with ``OMNI_MAVEN_REPO`` (e.g. a local mirror).
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

_TIMEOUT_S = 60
_CHUNK = 1 << 20


@dataclass(frozen=True)
class MavenJar:
    """One jar on a Maven repository, named by its coordinates."""

    group: str
    artifact: str
    version: str

    @property
    def filename(self) -> str:
        """The jar's file name, as Maven lays it out."""
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repo: str) -> str:
        """The jar's address on ``repo``."""
        return f"{repo.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.filename}"

    @property
    def coordinates(self) -> str:
        """``group:artifact:version``."""
        return f"{self.group}:{self.artifact}:{self.version}"


#: The jars :func:`ensure_jars` provides, in classpath order.
JARS: tuple[MavenJar, ...] = (
    MavenJar(
        "org.apache.iceberg",
        f"iceberg-spark-runtime-{SPARK_MINOR_VERSION}_{SCALA_BINARY_VERSION}",
        ICEBERG_VERSION,
    ),
    MavenJar("org.postgresql", "postgresql", POSTGRES_JDBC_VERSION),
    MavenJar("org.xerial", "sqlite-jdbc", SQLITE_JDBC_VERSION),
)

_FIX = "run `python -m spark_udfs.jars` where Maven Central is reachable, or point OMNI_CACHE at a folder whose jars/ holds them"


def default_cache_dir() -> Path:
    """``$OMNI_CACHE/jars`` when ``OMNI_CACHE`` is set, else ``./.cache/jars``."""
    root = os.environ.get("OMNI_CACHE")
    return (Path(root) if root else Path(".cache")).resolve() / "jars"


def ensure_jars(cache_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Return the paths of the Iceberg runtime and JDBC driver jars, downloading missing ones.

    Idempotent: jars already in ``cache_dir`` are trusted (they were verified before the
    rename that put them there) and no network is used. Raises
    :class:`~catalog_ext.errors.ConfigError` when a jar is missing and cannot be fetched
    or fails its checksum.
    """
    cache = Path(cache_dir).resolve() if cache_dir is not None else default_cache_dir()
    repo = os.environ.get("OMNI_MAVEN_REPO", MAVEN_CENTRAL)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the jar cache {cache}: {e}; set OMNI_CACHE to a writable folder") from e
    return [_ensure_one(jar, cache, repo) for jar in JARS]


def _ensure_one(jar: MavenJar, cache: Path, repo: str) -> Path:
    target = cache / jar.filename
    if target.is_file() and target.stat().st_size > 0:
        return target
    return download_verified(jar.url(repo), target, f"jar {jar.coordinates}", _FIX)


if __name__ == "__main__":  # pragma: no cover - convenience for set-up scripts (`make jars`)
    for path in ensure_jars():
        print(path)
