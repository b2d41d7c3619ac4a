"""``omni sql --engine spark --spark-master URL``: the option reaches the Spark SQL executor.

The run on a real standalone cluster is in tests/test_spark_engine.py
(test_pandas_udf_gpu_stage_gets_its_gpu_from_a_resource_profile); these check the
plumbing and its errors without starting a JVM.
"""

from __future__ import annotations

import json

import pytest

from catalog_ext.errors import ConfigError
from omni_iceberg.api import Omni
from omni_iceberg.cli.parser import build_parser


@pytest.fixture
def omni(tmp_path):
    o = Omni(home=tmp_path / "home")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"doc {i}"}) + "\n" for i in range(3)))
    o.submit("web", [str(src)], batch="a")
    return o


def test_sql_takes_a_spark_master():
    args = build_parser().parse_args(["sql", "SELECT 1", "--engine", "spark", "--spark-master", "spark://h:7077"])
    assert (args.engine, args.spark_master) == ("spark", "spark://h:7077")
    assert build_parser().parse_args(["sql", "SELECT 1"]).spark_master is None


def test_a_spark_master_without_the_spark_engine_is_refused(omni):
    with pytest.raises(ConfigError, match=r"a Spark master \(spark://h:7077\) was given for engine 'local'"):
        omni.query("SELECT count(*) AS n FROM web", spark_master="spark://h:7077")
    assert omni.query("SELECT count(*) AS n FROM web").to_pylist() == [{"n": 3}]


def test_an_unreachable_master_fails_before_a_jvm_starts(omni):
    pytest.importorskip("pyspark")
    with pytest.raises(ConfigError, match=r"Spark master spark://127\.0\.0\.1:1 is unreachable"):
        omni.query("SELECT count(*) AS n FROM web", engine="spark", spark_master="spark://127.0.0.1:1")
