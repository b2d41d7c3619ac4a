"""Fixture tests: a family state renders to the expected Spark and Trino view SQL."""

from catalog_ext.view_sql import render_view_sql, view_schema
from tests.test_family_model import _state

SPARK = (
    "SELECT t0.`_ai_unique_id_` AS `_ai_unique_id_`, t0.`_ai_append_name_` AS `_ai_append_name_`, "
    "named_struct('raw_data', t0.`RawData`.`raw_data`) AS `RawData`, "
    "named_struct('parsed_text', CAST(NULL AS STRING)) AS `ProcessedData`, "
    "t1.`quality` AS `quality` "
    "FROM `aidata`.`web__base` VERSION AS OF 10 AS t0 "
    "LEFT JOIN (SELECT `_ai_unique_id_`, `_ai_append_name_`, any_value(p.`quality`) AS `quality` "
    "FROM `aidata`.`web__f1` VERSION AS OF 20 AS p GROUP BY `_ai_unique_id_`, `_ai_append_name_`) AS t1 "
    "ON t1.`_ai_unique_id_` = t0.`_ai_unique_id_` AND t1.`_ai_append_name_` = t0.`_ai_append_name_`"
)
TRINO = (
    'SELECT t0."_ai_unique_id_" AS "_ai_unique_id_", t0."_ai_append_name_" AS "_ai_append_name_", '
    'CAST(ROW(t0."RawData"."raw_data") AS ROW("raw_data" VARCHAR)) AS "RawData", '
    'CAST(ROW(CAST(NULL AS VARCHAR)) AS ROW("parsed_text" VARCHAR)) AS "ProcessedData", '
    'l1."quality" AS "quality" '
    'FROM "aidata"."web__base" FOR VERSION AS OF 10 AS t0 '
    'CROSS JOIN LATERAL (SELECT arbitrary(p."quality") AS "quality" FROM "aidata"."web__f1" FOR VERSION AS OF 20 AS p '
    'WHERE p."_ai_unique_id_" = t0."_ai_unique_id_" AND p."_ai_append_name_" = t0."_ai_append_name_") AS l1'
)


def test_spark_sql():
    assert render_view_sql(_state(), "spark") == SPARK


def test_trino_sql():
    assert render_view_sql(_state(), "trino") == TRINO


def test_schema_matches_select_list():
    schema = view_schema(_state())
    assert [f["name"] for f in schema["fields"]] == [
        "_ai_unique_id_", "_ai_append_name_", "RawData", "ProcessedData", "quality"]
    raw = schema["fields"][2]["type"]
    assert raw["type"] == "struct" and [f["name"] for f in raw["fields"]] == ["raw_data"]
    ids = [f["id"] for f in schema["fields"]] + [f["id"] for f in raw["fields"]]
    assert len(ids) == len(set(ids))


def test_feature_tables_without_columns_are_not_joined():
    s = _state()
    s = s.model_copy(update={"physical_columns": s.physical_columns[:1]})
    sql = render_view_sql(s, "spark")
    assert "web__f1" not in sql and "CAST(NULL AS DOUBLE) AS `quality`" in sql
    sql = render_view_sql(s, "trino")
    assert "web__f1" not in sql and 'CAST(NULL AS DOUBLE) AS "quality"' in sql
