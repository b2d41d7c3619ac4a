"""The logical view costs what a query reads, in real Spark and real Trino.

A family of 60 physical tables (the base + 60 one-feature tables, ``omni_iceberg.demo.wide``)
on the shared PostgreSQL catalog. EXPLAIN must name only the tables a query reads -
the engines' optimizers drop the rest because of the shape of each dialect's view body
(catalog_ext/view_sql.py) - and the rows must equal what omni's own planner returns.
"""

from __future__ import annotations

import json
import re

import pytest

from omni_iceberg.api import Omni
from omni_iceberg.demo.wide import feature_name, wide_features

pytestmark = [pytest.mark.spark, pytest.mark.trino]

WIDTH = 60
NAME = "vp_wide"


@pytest.fixture(scope="module")
def wide(spark, trino, tmp_path_factory):
    omni = Omni(config=spark.config)
    omni.create_table(NAME)
    src = tmp_path_factory.mktemp("vp") / "rows.jsonl"
    src.write_text("".join(json.dumps({"raw_data": "<p>" + "x" * (i % 37) + f" row {i}</p>"}) + "\n"
                           for i in range(300)))
    omni.submit(NAME, [str(src)], batch="a", progress=False)
    features = wide_features(WIDTH)
    omni.register_features(NAME, features)
    omni.backfill(NAME, [f.name for f in features], isolation="inline", progress=False)
    state = omni.store.load("aidata", NAME)
    assert len(state.tables) == WIDTH + 1  # one physical table per feature: the width this is about
    return omni, {c.path: pc.table for c in state.columns for pc in state.physical_columns_of(c.path)}, \
        {t.key: t.identifier.split(".")[1] for t in state.tables}


def _spark_tables(spark, sql: str) -> set[str]:
    plan = spark.session.sql("EXPLAIN " + sql).collect()[0][0]
    return set(re.findall(r"BatchScan omni\.aidata\.(\w+)", plan))


def _trino_tables(trino, sql: str) -> set[str]:
    plan = "\n".join(r[0] for r in trino.query("EXPLAIN " + sql))
    return set(re.findall(r"table = omni:aidata\.(\w+)\$data", plan))


def _tables_of(wide, *columns: str) -> set[str]:
    _omni, table_of, names = wide
    return {names[table_of[c]] for c in columns}


QUERY = (f"SELECT count(*), avg({feature_name(7)}), max(RawData.raw_data) FROM omni.aidata.{NAME} "
         f"WHERE {feature_name(41)} > 100 AND _ai_append_name_ = 'a'")


def test_spark_reads_only_the_tables_a_query_needs(wide, spark):
    assert _spark_tables(spark, QUERY) == {f"{NAME}__base"} | _tables_of(wide, feature_name(7), feature_name(41))
    # nothing but the base: the count is answered from it (or from Iceberg metadata)
    assert _spark_tables(spark, f"SELECT count(*) FROM omni.aidata.{NAME}") <= {f"{NAME}__base"}


def test_spark_reads_the_needed_feature_tables_without_their_per_key_aggregate(wide, spark):
    """omni's session extension (spark_udfs/java) removes the view's ``GROUP BY keys`` around
    each feature table a query reads - after Spark used it to drop the unread ones - on tables
    that declare their keys unique; a table that does not declare them keeps its aggregate."""
    from catalog_ext.physical import UNIQUE_KEYS_PROPERTY
    from spark_udfs.extension import EXTENSION_CLASS

    def per_key_aggregates(sql: str) -> int:  # the view's any_value runs as first() in Spark's plan
        return spark.session.sql("EXPLAIN " + sql).collect()[0][0].count("first(")

    assert EXTENSION_CLASS in spark.session.conf.get("spark.sql.extensions")
    assert per_key_aggregates(QUERY) == 0
    expected = spark.sql(QUERY)
    omni, table_of, names = wide
    name = names[table_of[feature_name(7)]]
    undeclared = omni.catalog.load_table(f"aidata.{name}")
    with undeclared.transaction() as tx:
        tx.remove_properties(UNIQUE_KEYS_PROPERTY)
    # omni's catalog keeps tables loaded at a snapshot for the session: REFRESH TABLE drops them
    assert per_key_aggregates(QUERY) == 0
    spark.session.sql(f"REFRESH TABLE omni.aidata.{name}")
    try:
        assert per_key_aggregates(QUERY) > 0  # that table's aggregate stays; the answer does not change
        assert spark.sql(QUERY) == expected
    finally:
        with undeclared.transaction() as tx:
            tx.set_properties({UNIQUE_KEYS_PROPERTY: "_ai_unique_id_,_ai_append_name_"})
        spark.session.sql(f"REFRESH TABLE omni.aidata.{name}")
    assert per_key_aggregates(QUERY) == 0


PRUNING = "spark.omni.viewPruning.enabled"
PRUNED_MARK = "#omni-columns("  # OmniSparkCatalog.PRUNED_MARK: the name a pruned view is read under
V = f"omni.aidata.{NAME}"
F1, F7, F41 = feature_name(1), feature_name(7), feature_name(41)


def _analyzed(spark, sql: str) -> str:
    return spark.session.sql(sql)._jdf.queryExecution().analyzed().toString()


def _pruned_and_whole(spark, sql: str) -> tuple[list[tuple], list[tuple]]:
    """The rows of ``sql`` with omni's view pruning on, then off."""
    out = []
    for on in ("true", "false"):
        spark.session.conf.set(PRUNING, on)
        try:
            out.append([tuple(r) for r in spark.session.sql(sql).collect()])
        finally:
            spark.session.conf.unset(PRUNING)
    return out[0], out[1]


@pytest.mark.parametrize("sql", [
    QUERY,
    f"SELECT count(*) FROM {V}",
    f"SELECT RawData.raw_data, {F7} FROM {V} WHERE {F41} > 100 ORDER BY _ai_unique_id_ LIMIT 5",
    f"SELECT x.{F7}, count(*) FROM {V} x GROUP BY x.{F7} ORDER BY 1, 2",
    f"SELECT {NAME}.{F1} FROM {V} WHERE {NAME}.{F7} IN (SELECT max({F7}) FROM {V}) ORDER BY 1",
    f"WITH c AS (SELECT _ai_unique_id_ AS id, {F1} FROM {V}) SELECT count(*), sum({F1}) FROM c",
    f"SELECT a.{F7}, b.{F41} FROM {V} a JOIN {V} b ON a._ai_unique_id_ = b._ai_unique_id_ "
    f"ORDER BY 1, 2 LIMIT 7",
    f"SELECT {F7}, rank() OVER (ORDER BY {F41}, _ai_unique_id_) FROM {V} ORDER BY 2 LIMIT 4",
], ids=["aggregate", "count", "struct-field", "alias", "subquery", "cte", "self-join", "window"])
def test_spark_analyses_only_the_view_columns_a_query_names(wide, spark, sql):
    """omni's resolution rule (spark_udfs/java/omni/spark/PruneOmniViews.java) hands Spark the
    view's body cut to the columns the query names: its analysis no longer grows with the
    family (benchmarks/view_pruning). The rows must be those of the whole view."""
    assert PRUNED_MARK in _analyzed(spark, sql)
    pruned, whole = _pruned_and_whole(spark, sql)
    assert pruned == whole and pruned


@pytest.mark.parametrize("sql", [
    f"SELECT * FROM {V} ORDER BY _ai_unique_id_ LIMIT 2",
    f"SELECT count(*) FROM (TABLE {V} UNION ALL TABLE {V})",
    f"SELECT count(*) FROM (SELECT DISTINCT * FROM {V})",
    f"SELECT count(*), sum({F7}) FROM {V} NATURAL JOIN (SELECT _ai_unique_id_, {F7} FROM {V})",
    # PIVOT groups by every column it is not told about: cut, it would merge rows
    f"SELECT count(*) FROM {V} PIVOT (count({F1}) AS c FOR _ai_append_name_ IN ('a' AS a))",
], ids=["star", "union", "distinct", "natural-join", "pivot"])
def test_spark_reads_the_whole_view_when_a_query_may_read_unnamed_columns(wide, spark, sql):
    assert PRUNED_MARK not in _analyzed(spark, sql)
    pruned, whole = _pruned_and_whole(spark, sql)
    assert pruned == whole and pruned


def test_a_view_read_as_a_dataframe_keeps_every_column(wide, spark):
    df = spark.session.table(V)  # analysed alone: nothing says which columns will be read
    assert len(df.columns) == 5 + WIDTH
    assert df.select(F7).count() == spark.session.sql(f"SELECT {F7} FROM {V}").count()


def test_a_pruned_view_name_loaded_by_another_analysis_is_cut_again(wide, spark):
    """The catalog answers a marked name it did not stage (a re-analysis, another thread) by
    cutting the current view again: the same columns, the same rows."""
    marked = f"omni.aidata.`{NAME}{PRUNED_MARK}_ai_unique_id_,_ai_append_name_,{F7})`"
    rows = spark.session.sql(f"SELECT * FROM {marked} ORDER BY _ai_unique_id_")
    assert rows.columns == ["_ai_unique_id_", "_ai_append_name_", F7]
    assert [tuple(r) for r in rows.collect()] == \
        [tuple(r) for r in spark.session.sql(f"SELECT _ai_unique_id_, _ai_append_name_, {F7} FROM {V} "
                                             f"ORDER BY _ai_unique_id_").collect()]


def test_a_view_query_over_many_feature_tables_plans_no_runtime_filters(wide, spark):
    """Spark 3.5 planned a pruning subquery and a bloom filter per join, and that planning grew
    exponentially with the joins: 8 feature tables took 17 s of EXPLAIN, 11 did not finish in
    minutes. omni's sessions turn both off (spark_udfs.session.VIEW_JOIN_CONF)."""
    names = [feature_name(i) for i in range(1, 13)]
    sql = f"SELECT count(*), " + ", ".join(f"max({n})" for n in names) + f" FROM {V} WHERE {feature_name(0)} >= 0"
    plan = spark.session.sql("EXPLAIN " + sql).collect()[0][0]
    assert "dynamicpruning" not in plan and "might_contain" not in plan
    # the filter keeps only rows with a feature value: the base is dropped (DropContainedDriver)
    assert _spark_tables(spark, sql) == _tables_of(wide, feature_name(0), *names)
    omni = wide[0]
    ours = [tuple(r.values()) for r in omni.query(sql.replace(V, NAME)).to_pylist()]
    assert [tuple(r) for r in spark.session.sql(sql).collect()] == ours and ours[0][0] > 0


DROP_DRIVER = "spark.omni.dropContainedDriver.enabled"


def test_spark_drops_the_base_when_a_filter_keeps_only_rows_of_feature_tables(wide, spark):
    """A NULL-rejecting filter on a feature makes the view's join to its table an inner one; the
    base then only says "this row exists", which every feature row of one logical version does
    (DropContainedDriver). omni's own planner reads the same tables (skip_base_table.py)."""
    sql = f"SELECT count(*), avg({F7}) FROM {V} WHERE {F41} > 100 AND {F1} IS NOT NULL"
    assert _spark_tables(spark, sql) == _tables_of(wide, F7, F41, F1)
    omni = wide[0]
    ours = [tuple(r.values()) for r in omni.query(sql.replace(V, NAME)).to_pylist()]
    spark.session.conf.set(DROP_DRIVER, "false")
    try:
        assert f"{NAME}__base" in _spark_tables(spark, sql)
        kept = [tuple(r) for r in spark.session.sql(sql).collect()]
    finally:
        spark.session.conf.unset(DROP_DRIVER)
    dropped = [tuple(r) for r in spark.session.sql(sql).collect()]
    assert [(n, round(a, 6)) for n, a in dropped] == [(n, round(a, 6)) for n, a in kept] == \
        [(n, round(float(a), 6)) for n, a in ours] and ours[0][0] > 0


@pytest.mark.parametrize("where", [f"{F41} IS NULL OR {F41} > 100", f"coalesce({F41}, 0) >= 0"])
def test_spark_keeps_the_base_when_rows_without_a_feature_value_count(wide, spark, where):
    sql = f"SELECT count(*) FROM {V} WHERE {where}"
    assert f"{NAME}__base" in _spark_tables(spark, sql)
    ours = [tuple(r.values()) for r in wide[0].query(sql.replace(V, NAME)).to_pylist()]
    assert spark.sql(sql) == ours and ours[0][0] > 0


def test_spark_keeps_the_base_in_a_hand_written_join(wide, spark):
    """Only tables a cut view reads carry the proof that they come from one logical version."""
    _omni, table_of, names = wide
    feature = names[table_of[F41]]
    sql = (f"SELECT count(*) FROM omni.aidata.{NAME}__base b JOIN omni.aidata.{feature} f "
           "ON b._ai_unique_id_ = f._ai_unique_id_ AND b._ai_append_name_ = f._ai_append_name_")
    assert _spark_tables(spark, sql) == {f"{NAME}__base", feature}


def test_trino_reads_only_the_tables_a_query_needs(wide, trino):
    assert _trino_tables(trino, QUERY) == {f"{NAME}__base"} | _tables_of(wide, feature_name(7), feature_name(41))
    assert _trino_tables(trino, f"SELECT count(*) FROM omni.aidata.{NAME}") == {f"{NAME}__base"}


def test_pruned_views_return_what_omni_returns(wide, spark, trino):
    omni = wide[0]
    logical = QUERY.replace(f"omni.aidata.{NAME}", NAME)
    ours = [tuple(r.values()) for r in omni.query(logical).to_pylist()]
    sp = [tuple(r) for r in spark.sql(QUERY)]
    tr = [tuple(r) for r in trino.query(QUERY)]
    assert ours[0][0] > 0
    assert [(r[0], round(float(r[1]), 6), r[2]) for r in ours] == \
        [(r[0], round(float(r[1]), 6), r[2]) for r in sp] == [(r[0], round(float(r[1]), 6), r[2]) for r in tr]
    # every value of one row, through every table of the family: the full width still reads right.
    # Trino plans each column lookup as 2-3 stages, past its default cap of 150 at this width:
    # the README's Trino set-up names the session property (or query.max-stage-count) to raise
    one = f"SELECT * FROM omni.aidata.{NAME} ORDER BY _ai_unique_id_ LIMIT 1"
    sp_row, tr_row = spark.sql(one)[0], trino.query(one, session={"query_max_stage_count": "400"})[0]
    assert len(sp_row) == len(tr_row) == 5 + WIDTH
    assert list(sp_row[5:]) == list(tr_row[5:]) and all(v is not None for v in sp_row[5:])


def test_the_engines_still_show_the_logical_schema(wide, spark, trino):
    spark_cols = [r[0] for r in spark.sql(f"DESCRIBE omni.aidata.{NAME}")]
    trino_cols = [r[0] for r in trino.query(f"SHOW COLUMNS FROM omni.aidata.{NAME}")]
    expected = ["_ai_unique_id_", "_ai_append_name_", "RawData", "ProcessedData", "TrainableData"]
    assert spark_cols[:5] == expected and [c.lower() for c in trino_cols[:5]] == [c.lower() for c in expected]
    assert spark_cols[5:5 + WIDTH] == [feature_name(i) for i in range(WIDTH)] == trino_cols[5:5 + WIDTH]


def test_a_materialized_copy_makes_the_whole_width_one_table(wide, spark, trino):
    """Last in this module: it changes the family. With every column copied into one fresh
    materialized table, the view drives from it - a full-width read is one scan in both
    engines (and Trino no longer needs a raised stage cap)."""
    omni = wide[0]
    before = spark.sql(f"SELECT * FROM omni.aidata.{NAME} ORDER BY _ai_unique_id_ LIMIT 3")
    report = omni.materialize(NAME, ["RawData"] + [feature_name(i) for i in range(WIDTH)])
    copy = report["plan"]["identifier"].split(".")[1]
    full = f"SELECT * FROM omni.aidata.{NAME}"
    assert _spark_tables(spark, full) == {copy} == _trino_tables(trino, full)
    assert _spark_tables(spark, QUERY) == {copy} == _trino_tables(trino, QUERY)
    ordered = full + " ORDER BY _ai_unique_id_ LIMIT 3"
    assert spark.sql(ordered) == before
    assert [list(r[5:]) for r in trino.query(ordered)] == [list(r[5:]) for r in before]
