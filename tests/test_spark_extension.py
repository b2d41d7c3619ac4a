"""Building omni's Spark session extension (spark_udfs/extension.py), without starting Spark.

Its effect on query plans is tested in real Spark in tests/test_view_pruning.py.
"""

from __future__ import annotations

import shutil
import zipfile

import pytest

from catalog_ext.errors import ConfigError
from spark_udfs import extension as X


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A private copy of the Java sources, so a test may break them."""
    copy = tmp_path / "java"
    shutil.copytree(X.SOURCES, copy)
    monkeypatch.setattr(X, "SOURCES", copy)
    return copy


def test_the_jar_holds_the_extension_classes_and_is_built_once(tmp_path):
    jar = X.ensure_extension_jar(tmp_path / "jars")
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert {"omni/spark/OmniSparkSessionExtensions.class", "omni/spark/UniqueKeyAggregates.class",
            "omni/spark/OmniSparkCatalog.class"} <= names
    before = jar.stat().st_mtime_ns
    assert X.ensure_extension_jar(tmp_path / "jars") == jar and jar.stat().st_mtime_ns == before
    assert not list((tmp_path / "jars").glob("*.part"))


def test_an_edited_source_gets_a_new_jar_and_a_compile_error_names_the_file(tmp_path, sources, monkeypatch):
    good = X.jar_name()
    rule = sources / "omni" / "spark" / "UniqueKeyAggregates.java"
    rule.write_text(rule.read_text().replace("return plan;", "return plan", 1))  # a missing semicolon
    assert X.jar_name() != good  # an edit never reuses the old jar
    with pytest.raises(ConfigError, match=r"did not compile(.|\n)*UniqueKeyAggregates\.java"):
        X.ensure_extension_jar(tmp_path / "jars")
    assert not list((tmp_path / "jars").glob("omni-spark-extensions-*"))  # nothing half-built left
    # a session then runs without it, and says so in the log instead of failing
    monkeypatch.setattr(X, "default_cache_dir", lambda: tmp_path / "jars")
    assert X.extension_jar() is None


def test_the_switch_leaves_the_extension_out(monkeypatch):
    from catalog_ext.config import OmniConfig
    from omni_iceberg.engine_config import spark_properties

    monkeypatch.setenv(X.SWITCH, "0")
    assert X.extension_jar() is None
    conf = spark_properties(OmniConfig.resolve(catalog="postgresql+psycopg://u@h/db", warehouse="file:///wh"))
    assert X.EXTENSION_CLASS not in conf["spark.sql.extensions"] and "spark.jars" not in conf
    assert conf["spark.sql.catalog.omni"] == "org.apache.iceberg.spark.SparkCatalog"
    monkeypatch.setenv(X.SWITCH, "1")
    conf = spark_properties(OmniConfig.resolve(catalog="postgresql+psycopg://u@h/db", warehouse="file:///wh"))
    assert conf["spark.sql.extensions"].startswith(X.EXTENSION_CLASS + ",")  # before Iceberg's (its view rule)
    assert conf["spark.sql.catalog.omni"] == X.CATALOG_CLASS
    assert conf["spark.jars"].endswith(X.jar_name())
    # runtime filters off: their planning grew exponentially with the view's joins (test_view_pruning)
    assert conf["spark.sql.optimizer.dynamicPartitionPruning.enabled"] == "false"
    assert conf["spark.sql.optimizer.runtime.bloomFilter.enabled"] == "false"


def test_without_pyspark_the_settings_are_made_without_the_extension(monkeypatch):
    """`omni spark-config` for another machine needs no pyspark here: nothing to compile against."""
    import sys

    from catalog_ext.config import OmniConfig
    from omni_iceberg.engine_config import spark_properties

    monkeypatch.setitem(sys.modules, "pyspark", None)  # `import pyspark` now raises ImportError
    assert X.extension_jar() is None
    conf = spark_properties(OmniConfig.resolve(catalog="postgresql+psycopg://u@h/db", warehouse="file:///wh"))
    assert conf["spark.sql.catalog.omni"] == "org.apache.iceberg.spark.SparkCatalog" and "spark.jars" not in conf
