"""Shared fixtures: real PostgreSQL, real Spark, and a fresh embedded omni home.

Everything heavy is lazy: a test that does not ask for ``spark`` or ``pg_server``
starts neither. Markers follow the fixtures: a test using ``spark`` is marked
``spark`` and ``postgres``, one using ``pg_server`` is marked ``postgres``, so
``pytest -m "not spark"`` deselects exactly the tests that would start Spark.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from catalog_ext.config import OmniConfig
from tests.services.postgres import PostgresServer

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[1]

# The suite starts many short Spark sessions: it opts into the fast-start JVM (C1 only,
# serial collector) and Spark's own 1 GiB driver heap. A user's session (and every
# benchmark) gets the production defaults instead; see spark_udfs.session.
os.environ.setdefault("OMNI_SPARK_JVM", "fast-start")
os.environ.setdefault("OMNI_SPARK_MEMORY_MB", "1024")


def _jar_cache() -> Path:
    """``$OMNI_CACHE/jars`` when set, else the repository's ``.cache/jars`` (not the cwd's)."""
    root = os.environ.get("OMNI_CACHE")
    return (Path(root) if root else REPO_ROOT / ".cache") / "jars"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "trino" in names:  # fixturenames is transitive: postgres is added below too
            item.add_marker(pytest.mark.trino)
        if "spark" in names:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.postgres)
        elif "pg_server" in names:
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def hot_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The hot store (embedded chdb) every test shares: chdb opens one folder per process.

    Names in it are scoped by each test's warehouse, as for catalogs sharing one server.
    """
    return f"chdb://{tmp_path_factory.mktemp('hot-store')}"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server (database ``omni``) for the whole test session."""
    with PostgresServer() as server:
        yield server


@dataclass
class SparkHandle:
    """The test session's Spark, and the catalog settings it shares with pyiceberg."""

    session: "SparkSession"
    config: OmniConfig
    _catalog: Any = field(default=None, repr=False)

    def iceberg_catalog(self) -> "SqlCatalog":
        """pyiceberg's SqlCatalog on the same PostgreSQL catalog, name and warehouse."""
        if self._catalog is None:
            from pyiceberg.catalog.sql import SqlCatalog

            self._catalog = SqlCatalog(
                self.config.catalog_name,
                uri=self.config.catalog_uri,
                warehouse=self.config.warehouse,
            )
        return self._catalog

    def sql(self, query: str) -> list[tuple]:
        """Run Spark SQL and return plain tuples (easy to compare with pyiceberg rows)."""
        return [tuple(row) for row in self.session.sql(query).collect()]


@pytest.fixture(scope="session")
def spark(pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkHandle]:
    """One SparkSession per test session on a PostgreSQL Iceberg catalog named ``omni``.

    The warehouse is a session temp dir; pyiceberg reaches the same tables through
    ``spark.iceberg_catalog()``. Spark is stopped at the end of the session.
    """
    from spark_udfs.session import build_spark_session

    home = tmp_path_factory.mktemp("spark-omni-home")
    config = OmniConfig.resolve(
        catalog=pg_server.sqlalchemy_uri,
        warehouse=(home / "warehouse").as_uri(),
        home=home,
        catalog_name="omni",
    )
    session = build_spark_session(config, app_name="omni-tests", jar_cache_dir=_jar_cache())
    handle = SparkHandle(session=session, config=config)
    try:
        yield handle
    finally:
        if handle._catalog is not None:
            handle._catalog.engine.dispose()
        session.stop()


@pytest.fixture
def omni_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> OmniConfig:
    """A fresh home folder with the embedded SQLite catalog: ``OmniConfig.resolve(home=tmp)``.

    The ``OMNI_*`` environment is pointed at that folder for the test (``OMNI_HOME`` set,
    ``OMNI_CATALOG``/``OMNI_WAREHOUSE``/``OMNI_CATALOG_NAME`` removed), so code that
    resolves its own config lands there too and never touches a developer's catalog.
    ``config.home`` is the folder.
    """
    home = tmp_path / "omni-home"
    home.mkdir()
    for var in ("OMNI_CATALOG", "OMNI_WAREHOUSE", "OMNI_CATALOG_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMNI_HOME", str(home))
    return OmniConfig.resolve(home=home)


@pytest.fixture(scope="session")
def trino(pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A :class:`tests.services.trino.TrinoServer` for the session, on the ``spark`` fixture's catalog.

    Same PostgreSQL database and catalog name (``omni``) as ``spark``, so Trino, Spark
    and pyiceberg see the same tables and views; Spark itself is not started. Trino's
    catalog has the same name too (``omni.aidata.t``: views resolve their tables through
    it); ``trino.config`` is an OmniConfig for ``Omni(config=...)`` with its own warehouse.
    """
    from tests.services.trino import TrinoServer

    home = tmp_path_factory.mktemp("trino-omni-home")
    config = OmniConfig.resolve(
        catalog=pg_server.sqlalchemy_uri,
        warehouse=(home / "warehouse").as_uri(),
        home=home,
        catalog_name="omni",
    )
    with TrinoServer(config) as server:
        yield server
