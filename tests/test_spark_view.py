"""The logical view written by omni is an ordinary Iceberg view to real Spark SQL.

Real PostgreSQL (shared JDBC catalog) + real Spark with the official Iceberg runtime.
"""

import json

import pytest

from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from omni_iceberg.ingest.identity import content_id

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pages():
    return sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:24]


def test_spark_reads_the_logical_view(spark, pages):
    omni = Omni(config=spark.config)
    omni.create_table("sv_web")
    omni.submit("sv_web", [str(p) for p in pages[:16]], batch="a", progress=False)
    omni.submit("sv_web", [str(p) for p in pages[8:]], batch="b", progress=False)  # 8 duplicates
    rows = spark.sql(
        "SELECT _ai_append_name_, count(*), count(DISTINCT _ai_unique_id_) "
        "FROM omni.aidata.sv_web GROUP BY 1 ORDER BY 1"
    )
    assert rows == [("a", 16, 16), ("b", 8, 8)]
    got = spark.sql(
        f"SELECT RawData.raw_data, ProcessedData.parsed_text FROM omni.aidata.sv_web "
        f"WHERE _ai_unique_id_ = '{content_id(pages[0].read_text(encoding='utf-8'))}'"
    )
    assert got == [(pages[0].read_text(encoding="utf-8"), None)]
    cols = [r[0] for r in spark.sql("DESCRIBE omni.aidata.sv_web")]
    assert cols[:5] == ["_ai_unique_id_", "_ai_append_name_", "RawData", "ProcessedData", "TrainableData"]
    props = dict(spark.sql("SHOW TBLPROPERTIES omni.aidata.sv_web"))
    assert props["omni.logical-version"] == "3" and props["omni.format"] == "omni-family/1"


def test_spark_sees_only_committed_logical_versions(spark, pages, monkeypatch):
    omni = Omni(config=spark.config)
    omni.create_table("sv_pin")
    omni.submit("sv_pin", [str(p) for p in pages[:5]], batch="a", progress=False)

    def crash(*a, **k):
        raise RuntimeError("crash between staging and the logical commit")

    monkeypatch.setattr(omni.store, "commit", crash)
    with pytest.raises(RuntimeError):
        omni.submit("sv_pin", [str(p) for p in pages[5:]], batch="b", progress=False)
    monkeypatch.undo()
    assert spark.sql("SELECT count(*) FROM omni.aidata.sv_pin") == [(5,)]
    # a writer that stages data but has not committed yet is invisible too
    from catalog_ext.physical import StagedWrite

    state = omni.state("sv_pin")
    writer = StagedWrite(omni.catalog, state.base_table.identifier, state.base_table.snapshot_id, "probe", {})
    import pyarrow as pa
    from catalog_ext.physical import key_arrow_fields

    rows = omni.read("sv_pin", columns=["_ai_unique_id_", "_ai_append_name_", "RawData"])
    writer.write(rows.cast(pa.schema(key_arrow_fields() + [rows.schema.field("RawData")])))
    writer.stage()
    assert spark.sql("SELECT count(*) FROM omni.aidata.sv_pin") == [(5,)]
    writer.abandon()


def test_spark_reads_new_rawdata_fields_and_rejects_table(spark, tmp_path):
    omni = Omni(config=spark.config)
    omni.create_table("sv_json")
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"body": "hello", "url": "http://x", "n": 3}) + "\n{broken\n")
    omni.submit("sv_json", [str(src)], batch="j", field_map={"body": "raw_data"}, progress=False)
    assert spark.sql("SELECT RawData.raw_data, RawData.url, RawData.n FROM omni.aidata.sv_json") == [
        ("hello", "http://x", 3)]
    assert spark.sql(
        "SELECT line, reason LIKE '%JSON%' FROM omni.omni_sys.rejects WHERE logical_table = 'aidata.sv_json'"
    ) == [(2, True)]


def test_family_join_behind_the_view_needs_no_shuffle(spark, pages):
    """Base and feature tables are co-partitioned (batch, bucket(16, id)): Spark plans no Exchange."""
    from tests import feature_udfs as U
    from tests.test_spark_catalog import _spark_conf

    omni = Omni(config=spark.config)
    omni.create_table("sv_spj")
    omni.submit("sv_spj", [str(p) for p in pages], batch="a", progress=False)
    omni.register_features("sv_spj", [U.t_parse, U.t_len])
    omni.backfill("sv_spj", ["t_len"], isolation="inline", progress=False)
    with _spark_conf(spark.session, **{"spark.sql.autoBroadcastJoinThreshold": "-1"}):
        plan = spark.sql("EXPLAIN SELECT _ai_append_name_, sum(t_len), count(ProcessedData.parsed_text) "
                         "FROM omni.aidata.sv_spj GROUP BY 1")[0][0]
        assert "BatchScan" in plan and "Join" in plan
        join_part = plan.split("Join", 1)[1]
        assert "Exchange hashpartitioning(_ai_unique_id_" not in join_part, plan
        rows = spark.sql("SELECT count(*), count(t_len) FROM omni.aidata.sv_spj")
    assert rows == [(len(pages), len(pages))]
