"""Spark and pyiceberg share one PostgreSQL JDBC catalog and one warehouse, both ways.

Real components only: a throwaway PostgreSQL, pyiceberg's SqlCatalog, and a local
Spark 3.5 with the official Iceberg runtime (see ``spark_udfs.session``). The pure
URI-to-JDBC conversion tests at the bottom start nothing.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_ext.config import OmniConfig
from catalog_ext.errors import ConfigError
from spark_udfs.session import catalog_properties, spark_catalog_conf

NS = "interop"
_names = itertools.count()


def _schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(
        NestedField(1, "_ai_unique_id_", StringType(), required=True),
        NestedField(2, "_ai_append_name_", StringType(), required=True),
        NestedField(3, "text", StringType(), required=False),
        NestedField(4, "n", LongType(), required=False),
    )


def _spec(schema):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import BucketTransform, IdentityTransform

    return PartitionSpec(
        PartitionField(source_id=schema.find_field("_ai_append_name_").field_id, field_id=1000,
                       transform=IdentityTransform(), name="_ai_append_name_"),
        PartitionField(source_id=schema.find_field("_ai_unique_id_").field_id, field_id=1001,
                       transform=BucketTransform(16), name="_ai_unique_id__bucket"),
    )


def _create_table(spark, stem: str):
    """A fresh pyiceberg table ``interop.<stem>_<k>`` partitioned like omni's physical tables."""
    catalog = spark.iceberg_catalog()
    catalog.create_namespace_if_not_exists(NS)
    schema = _schema()
    name = f"{stem}_{next(_names)}"
    return catalog.create_table(f"{NS}.{name}", schema=schema, partition_spec=_spec(schema)), name


def _rows(append_name: str, ids: range, text: str = "doc") -> list[tuple]:
    return [(f"id{i:04d}", append_name, f"{text} {i}", i) for i in ids]


def _append(table, rows: list[tuple]) -> None:
    arrow_schema = table.schema().as_arrow()
    columns = list(zip(*rows))
    table.append(pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema)],
                                      schema=arrow_schema))


@contextlib.contextmanager
def _spark_conf(session, **settings: str) -> Iterator[None]:
    """Set runtime SQL settings for one block, restoring the previous values."""
    old = {k: session.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        session.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                session.conf.unset(k)
            else:
                session.conf.set(k, v)


@pytest.mark.spark
def test_pyiceberg_writes_spark_reads(spark) -> None:
    table, name = _create_table(spark, "py_to_spark")
    first = _rows("batch_a", range(0, 40)) + _rows("batch_b", range(40, 60))
    _append(table, first)

    got = spark.sql(f"SELECT _ai_unique_id_, _ai_append_name_, text, n FROM omni.{NS}.{name} ORDER BY _ai_unique_id_")
    assert got == sorted(first)

    # cache-enabled=false: a later pyiceberg commit is visible to the same Spark session.
    more = _rows("batch_c", range(60, 65))
    _append(table, more)
    assert spark.sql(f"SELECT count(*) FROM {NS}.{name}") == [(65,)]  # default catalog = omni


@pytest.mark.spark
def test_spark_writes_pyiceberg_reads(spark) -> None:
    table, name = _create_table(spark, "spark_to_py")
    spark.session.sql(
        f"INSERT INTO omni.{NS}.{name} VALUES "
        "('id0001', 'batch_s', 'from spark 1', 1), ('id0002', 'batch_s', 'from spark 2', 2), "
        "('id0003', 'batch_t', NULL, 3)"
    )

    table = spark.iceberg_catalog().load_table(f"{NS}.{name}")
    rows = sorted(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())
    assert rows == [
        ("id0001", "batch_s", "from spark 1", 1),
        ("id0002", "batch_s", "from spark 2", 2),
        ("id0003", "batch_t", None, 3),
    ]
    # Spark wrote the same partition layout pyiceberg declared: identity + bucket(16).
    partitions = table.inspect.partitions().to_pylist()
    assert {p["partition"]["_ai_append_name_"] for p in partitions} == {"batch_s", "batch_t"}
    # pyiceberg's bucket pruning agrees with the bucket values Spark computed: one file of
    # several (two identity partitions at least, so "1" is a real pruning, not the whole table)
    assert len(list(table.scan().plan_files())) >= 2
    only = table.scan(row_filter="_ai_unique_id_ == 'id0002'")
    assert len(list(only.plan_files())) == 1
    assert only.to_arrow().column("n").to_pylist() == [2]


@pytest.mark.spark
def test_join_on_id_and_append_name_is_storage_partitioned(spark) -> None:
    left, left_name = _create_table(spark, "spj_left")
    right, right_name = _create_table(spark, "spj_right")
    rows = _rows("batch_a", range(0, 50)) + _rows("batch_b", range(50, 80))
    _append(left, rows)
    _append(right, [(i, a, f"feature of {i}", n * 10) for i, a, _, n in rows])

    query = (
        f"SELECT l._ai_unique_id_, l.n, r.n AS feature FROM {NS}.{left_name} l "
        f"JOIN {NS}.{right_name} r "
        "ON l._ai_unique_id_ = r._ai_unique_id_ AND l._ai_append_name_ = r._ai_append_name_"
    )
    # A broadcast would hide the question (BroadcastExchange); force a partitioned join.
    with _spark_conf(spark.session, **{"spark.sql.autoBroadcastJoinThreshold": "-1"}):
        plan = spark.sql(f"EXPLAIN {query}")[0][0]
        assert "SortMergeJoin" in plan, plan
        assert "Exchange" not in plan, plan
        joined = spark.sql(query)
        assert sorted(joined) == sorted((i, n, n * 10) for i, _, _, n in rows)

        # Control: without v2 bucketing the same join shuffles both sides.
        with _spark_conf(spark.session, **{"spark.sql.sources.v2.bucketing.enabled": "false"}):
            assert "Exchange" in spark.sql(f"EXPLAIN {query}")[0][0]


@pytest.mark.spark
def test_version_as_of_reads_older_snapshot(spark) -> None:
    table, name = _create_table(spark, "time_travel")
    old_rows = _rows("batch_a", range(0, 3))
    _append(table, old_rows)
    old_snapshot = table.current_snapshot().snapshot_id

    spark.session.sql(f"INSERT INTO {NS}.{name} VALUES ('id0100', 'batch_b', 'new', 100)")

    now = spark.sql(f"SELECT _ai_unique_id_, _ai_append_name_, text, n FROM {NS}.{name} ORDER BY 1")
    assert now == sorted(old_rows + [("id0100", "batch_b", "new", 100)])
    then = spark.sql(
        f"SELECT _ai_unique_id_, _ai_append_name_, text, n FROM {NS}.{name} VERSION AS OF {old_snapshot} ORDER BY 1"
    )
    assert then == sorted(old_rows)
    # pyiceberg sees Spark's commit as the next snapshot, child of its own.
    table = spark.iceberg_catalog().load_table(f"{NS}.{name}")
    assert table.current_snapshot().parent_snapshot_id == old_snapshot


@pytest.mark.spark
def test_spark_view_on_jdbc_v1_catalog_is_hidden_from_pyiceberg_tables(spark, pg_server) -> None:
    import sqlalchemy as sa

    table, name = _create_table(spark, "viewed")
    _append(table, _rows("batch_a", range(0, 4)))
    view = f"{name}_v"
    spark.session.sql(f"CREATE VIEW {NS}.{view} AS SELECT _ai_unique_id_, n FROM {NS}.{name} WHERE n >= 2")

    assert spark.sql(f"SELECT * FROM {NS}.{view} ORDER BY n") == [("id0002", 2), ("id0003", 3)]
    engine = sa.create_engine(pg_server.sqlalchemy_uri)
    try:
        with engine.connect() as conn:
            kinds = dict(conn.execute(sa.text(
                "SELECT table_name, iceberg_type FROM iceberg_tables "
                "WHERE catalog_name = 'omni' AND table_namespace = :ns AND table_name IN (:t, :v)"
            ), {"ns": NS, "t": name, "v": view}).all())
    finally:
        engine.dispose()
    assert kinds == {name: "TABLE", view: "VIEW"}
    catalog = spark.iceberg_catalog()
    assert (NS, view) not in catalog.list_tables(NS)
    assert not catalog.table_exists(f"{NS}.{view}")


# -- pure settings: no Spark, no PostgreSQL -----------------------------------------------

def _cfg(uri: str, name: str = "omni") -> OmniConfig:
    return OmniConfig(home=Path("/h"), catalog_uri=uri, warehouse="file:///w", catalog_name=name)


def test_postgres_uri_becomes_jdbc_with_user_and_password() -> None:
    props = catalog_properties(_cfg("postgresql+psycopg://bob:p%40ss@db.local:5433/cat?sslmode=require"))
    assert props["type"] == "jdbc"
    assert props["uri"] == "jdbc:postgresql://db.local:5433/cat?sslmode=require"
    assert (props["jdbc.user"], props["jdbc.password"]) == ("bob", "p@ss")
    assert props["jdbc.schema-version"] == "V1"
    assert props["cache-enabled"] == "false"
    assert props["warehouse"] == "file:///w"


def test_sqlite_and_rest_uris() -> None:
    assert catalog_properties(_cfg("sqlite:////abs/catalog.db"))["uri"] == "jdbc:sqlite:/abs/catalog.db"
    rest = catalog_properties(_cfg("http://127.0.0.1:8181"))
    assert (rest["type"], rest["uri"]) == ("rest", "http://127.0.0.1:8181")
    assert "jdbc.schema-version" not in rest
    with pytest.raises(ConfigError, match="in-memory"):
        catalog_properties(_cfg("sqlite://"))
    with pytest.raises(ConfigError, match="mysql"):
        catalog_properties(_cfg("mysql://u@h/db"))


def test_conf_names_the_catalog_and_applies_overrides() -> None:
    conf = spark_catalog_conf(
        _cfg("postgresql+psycopg://u@h/db", name="lake"),
        jars=["/j/a.jar", "/j/b.jar"],
        overrides={"spark.sql.shuffle.partitions": 8, "spark.ui.enabled": None},
    )
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://h/db"
    assert conf["spark.sql.defaultCatalog"] == "lake"
    assert conf["spark.jars"] == "/j/a.jar,/j/b.jar"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert "spark.ui.enabled" not in conf
    assert conf["spark.sql.sources.v2.bucketing.enabled"] == "true"


def test_a_session_gets_the_production_jvm_and_a_sized_heap_unless_it_opts_out(monkeypatch) -> None:
    """Issue #42: C2 JIT and G1 with a quarter of the machine's memory by default; the suite's
    fast-start flags (conftest sets them) only when asked for."""
    import os

    from spark_udfs.session import FAST_JVM_FLAGS

    cfg = _cfg("postgresql+psycopg://u@h/db")
    monkeypatch.delenv("OMNI_SPARK_JVM", raising=False)
    monkeypatch.delenv("OMNI_SPARK_MEMORY_MB", raising=False)
    conf = spark_catalog_conf(cfg)
    total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    assert conf["spark.driver.extraJavaOptions"] == conf["spark.executor.extraJavaOptions"] == "-XX:+UseG1GC"
    assert conf["spark.driver.memory"] == f"{max(1024, total_mb // 4)}m"
    monkeypatch.setenv("OMNI_SPARK_JVM", "fast-start")
    monkeypatch.setenv("OMNI_SPARK_MEMORY_MB", "3000")
    conf = spark_catalog_conf(cfg)
    assert FAST_JVM_FLAGS == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert conf["spark.driver.extraJavaOptions"] == conf["spark.executor.extraJavaOptions"] == FAST_JVM_FLAGS
    assert conf["spark.driver.memory"] == "3000m"
    monkeypatch.setenv("OMNI_SPARK_JVM", "turbo")
    with pytest.raises(ConfigError, match="OMNI_SPARK_JVM='turbo' .*expected one of production, fast-start"):
        spark_catalog_conf(cfg)


def test_sqlite_catalog_is_refused_for_spark(omni_home) -> None:
    from spark_udfs.session import build_spark_session

    with pytest.raises(ConfigError, match="database is locked"):
        build_spark_session(omni_home)
