"""Logical time travel from plain Spark SQL and Trino: pinned views of a version and of a tag.

Real PostgreSQL catalog, real Spark (official Iceberg runtime), real Trino.
"""

from __future__ import annotations

import json

import pytest

from omni_iceberg.api import Omni
from tests import feature_udfs as U

pytestmark = [pytest.mark.spark, pytest.mark.trino]

NAME = "tt_web"


@pytest.fixture(scope="module")
def history(spark, trino, tmp_path_factory):
    omni = Omni(config=spark.config)
    omni.create_table(NAME)
    folder = tmp_path_factory.mktemp("tt")
    for b, n in (("a", 4), ("b", 3), ("c", 5)):
        path = folder / f"{b}.jsonl"
        path.write_text("".join(json.dumps({"raw_data": f"<p>{b} the row {i} {'7' * i}</p>"}) + "\n"
                                for i in range(n)))
        omni.submit(NAME, [str(path)], batch=b, progress=False)  # versions 2, 3, 4
    omni.tag(NAME, "first-two", version=3)  # version 5; its view: tt_web__tag_first_two
    omni.pin(NAME, 2)
    omni.register_features(NAME, [U.t_parse, U.t_len])
    omni.backfill(NAME, ["t_len"], isolation="inline", progress=False)  # the latest gains a column
    return omni


@pytest.mark.parametrize("view, rows, batches", [
    (f"omni.aidata.{NAME}__v2", 4, ["a"]),
    (f"omni.aidata.{NAME}__tag_first_two", 7, ["a", "b"]),
    (f"omni.aidata.{NAME}", 12, ["a", "b", "c"]),
])
def test_spark_and_trino_read_a_version_and_a_tag(history, spark, trino, view, rows, batches):
    sql = f"SELECT _ai_append_name_, count(*) FROM {view} GROUP BY _ai_append_name_ ORDER BY 1"
    expected = [(b, c) for b, c in (("a", 4), ("b", 3), ("c", 5)) if b in batches]
    assert spark.sql(sql) == expected == trino.query(sql)
    assert sum(c for _b, c in expected) == rows


def test_a_pinned_view_has_the_schema_of_its_version(history, spark, trino):
    old = [r[0] for r in spark.sql(f"DESCRIBE omni.aidata.{NAME}__v2")]
    new = [r[0] for r in spark.sql(f"DESCRIBE omni.aidata.{NAME}")]
    assert "t_len" in new and "t_len" not in old
    assert "t_len" not in [r[0] for r in trino.query(f"SHOW COLUMNS FROM omni.aidata.{NAME}__tag_first_two")]
    # the same rows as omni's own --as-of
    ours = sorted(r["_ai_unique_id_"] for r in history.read(NAME, as_of="first-two",
                                                              columns=["_ai_unique_id_"]).to_pylist())
    theirs = sorted(r[0] for r in trino.query(f"SELECT _ai_unique_id_ FROM omni.aidata.{NAME}__tag_first_two"))
    assert ours == theirs and len(ours) == 7
