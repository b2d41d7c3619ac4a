"""Analysts' queries return the same rows from Trino, Spark SQL and `omni sql`.

Real PostgreSQL catalog, real Spark (official Iceberg runtime), real Trino 476.
"""

import json

import pytest

from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from tests import feature_udfs as U

pytestmark = [pytest.mark.spark, pytest.mark.trino]


@pytest.fixture(scope="module")
def table(spark, trino, tmp_path_factory):
    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:30]
    omni = Omni(config=spark.config)
    omni.create_table("xe")
    omni.submit("xe", [str(p) for p in pages[:20]], batch="cc", progress=False)
    omni.submit("xe", [str(p) for p in pages[20:]], batch="wiki", progress=False)
    bad = tmp_path_factory.mktemp("xe") / "bad.jsonl"
    bad.write_text("".join(json.dumps({"raw_data": f"<p>row {i}{' POISON' if i % 4 == 0 else ''}</p>"}) + "\n"
                           for i in range(12)))
    omni.submit("xe", [str(bad)], batch="junk", progress=False)
    omni.register_features("xe", [U.t_parse, U.t_lang, U.t_len, U.t_digits, U.t_fragile])
    omni.backfill("xe", ["t_len", "t_lang", "t_digits"], isolation="inline", progress=False)
    omni.backfill("xe", ["t_fragile"], isolation="inline", progress=False, max_error_ratio=0.5)
    return omni


def _all_three(omni, spark, trino, sql_logical: str):
    ours = [tuple(r.values()) for r in omni.query(sql_logical).to_pylist()]
    engine_sql = sql_logical.replace(" FROM xe", " FROM omni.aidata.xe")
    return ours, [tuple(r) for r in spark.sql(engine_sql)], [tuple(r) for r in trino.query(engine_sql)]


def test_view_filtered_by_batch_and_feature_value(table, spark, trino):
    ours, sp, tr = _all_three(table, spark, trino,
                              "SELECT _ai_unique_id_, t_len, t_lang FROM xe "
                              "WHERE _ai_append_name_ = 'cc' AND t_len > 300 ORDER BY _ai_unique_id_")
    assert ours and ours == sp == tr


def test_aggregations_over_features(table, spark, trino):
    ours, sp, tr = _all_three(table, spark, trino,
                              "SELECT _ai_append_name_, count(*), count(t_fragile), sum(t_len), "
                              "round(avg(t_digits) * 1000000) FROM xe GROUP BY _ai_append_name_ "
                              "ORDER BY _ai_append_name_")
    norm = lambda rows: [tuple(int(v) if isinstance(v, (int, float)) or hasattr(v, "to_integral") else v  # noqa: E731
                               for v in r) if r[4] is not None else r for r in rows]
    assert norm(ours) == norm(sp) == norm(tr)
    assert [r[0] for r in ours] == ["cc", "junk", "wiki"] and ours[1][2] == 9  # 3 poisoned rows isolated


@pytest.mark.parametrize("sql, key", [
    ("SELECT name, version FROM omni.omni_sys.features WHERE logical_table = 'aidata.xe' ORDER BY name", "features"),
    ("SELECT feature, batch, rows, errors FROM omni.omni_sys.lineage WHERE logical_table = 'aidata.xe' "
     "AND output_column = 't_fragile' ORDER BY batch", "lineage"),
    ("SELECT _ai_unique_id_, exception_class FROM omni.omni_sys.errors WHERE logical_table = 'aidata.xe' "
     "ORDER BY _ai_unique_id_", "errors"),
    ("SELECT status, count(*) FROM omni.omni_sys.runs WHERE logical_table = 'aidata.xe' GROUP BY status", "runs"),
])
def test_metadata_tables(table, spark, trino, sql, key):
    sp, tr = [tuple(r) for r in spark.sql(sql)], [tuple(r) for r in trino.query(sql)]
    assert sp == tr and sp
    if key == "features":
        assert sp == sorted((f["name"], f["version"]) for f in table.features("xe"))
    if key == "errors":
        assert sorted(e["_ai_unique_id_"] for e in table.errors("xe").to_pylist()) == [r[0] for r in sp]
        assert {r[1] for r in sp} == {"ValueError"}
    if key == "runs":
        assert sp == [("succeeded", 2)]


def test_omni_sql_executes_on_spark_on_request(table):
    sql = ("SELECT _ai_append_name_, count(*) AS n, sum(t_len) AS words FROM xe "
           "WHERE t_lang = 'en' GROUP BY _ai_append_name_ ORDER BY _ai_append_name_")
    local = table.query(sql).to_pylist()
    on_spark = table.query(sql, engine="spark").to_pylist()
    assert [(r["_ai_append_name_"], r["n"], int(r["words"])) for r in local] == \
        [(r["_ai_append_name_"], r["n"], int(r["words"])) for r in on_spark]
    table.flush_query_log()  # queries spool their log rows
    log = table.catalog.load_table("omni_sys.query_log").scan().to_arrow().to_pylist()
    assert max(log, key=lambda r: r["at"])["engine"] == "spark"
