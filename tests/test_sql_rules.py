"""The logical SQL planner, rule by rule, against a fixed mapping (no catalog needed).

tests/fixtures/sql_rewrites.json holds input logical SQL and the expected physical SQL.
"""

import json
from pathlib import Path

import pytest

from omni_iceberg.explore import rules
from omni_iceberg.explore.planner import QueryPlan, plan_query
from omni_iceberg.explore.rules import QueryError
from tests.test_family_model import _state

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "sql_rewrites.json").read_text())


class _MappingOnly:
    """Serves one fixed FamilyState the way FamilyStore.load does: the rules only need the mapping."""

    def __init__(self):
        self.state = _state()

    def load(self, ns, name, version=None):
        return self.state

    def list_tables(self):
        return ["aidata.web"]


class _Omni:
    store = _MappingOnly()


@pytest.mark.parametrize("case", FIXTURES, ids=[c["name"] for c in FIXTURES])
def test_rewrite_fixtures(case):
    plan: QueryPlan = plan_query(_Omni(), case["sql"])
    for dialect in ("duckdb", "spark", "trino"):
        if dialect in case:
            assert plan.sql(dialect) == case[dialect]
    assert plan.tables() == case["tables"]
    if "batches" in case:
        assert plan.ctx.batches == {"web": case["batches"]}
    for table, pushed in case.get("pushed", {}).items():
        scan = next(s for s in plan.scans if s.table.identifier.endswith(table))
        assert [f.sql() for f in scan.filters] == pushed


def _ctx(sql):
    return rules.run_rules(sql, _MappingOnly().load, _MappingOnly().list_tables)


def test_parse_read_only_rejects_writes_and_multiple_statements():
    for bad, word in [("DELETE FROM web", "DELETE"), ("INSERT INTO web SELECT * FROM web", "INSERT"),
                      ("CREATE TABLE x AS SELECT 1", "CREATE"), ("DROP TABLE web", "DROP")]:
        with pytest.raises(QueryError, match=f"not {word}"):
            _ctx(bad)
    with pytest.raises(QueryError, match="exactly one statement, got 2"):
        _ctx("SELECT 1 FROM web; SELECT 2 FROM web")
    with pytest.raises(QueryError, match=r"syntax error at line 1, column \d+"):
        _ctx("SELECT FROM WHERE web (")


def test_bind_tables_refuses_physical_system_and_unknown_tables():
    with pytest.raises(QueryError, match="web__base at line 1, column 22 is a physical table"):
        _ctx("SELECT * FROM aidata.web__base")
    with pytest.raises(QueryError, match="system table"):
        _ctx("SELECT * FROM omni_sys.rejects")
    with pytest.raises(QueryError, match="did you mean 'aidata.web'"):
        _ctx("SELECT * FROM webb")
    with pytest.raises(QueryError, match="without a catalog"):
        _ctx("SELECT * FROM omni.aidata.web")


def test_resolve_columns_nested_unknown_and_ambiguous():
    ctx = _ctx("SELECT RawData.raw_data, w.quality FROM web AS w")
    assert sorted(ctx.resolved.values()) == [("w", "RawData.raw_data"), ("w", "quality")]
    with pytest.raises(QueryError, match=r"unknown column 'qualty' at line 1, column 8; did you mean 'quality'"):
        _ctx("SELECT qualty FROM web")
    with pytest.raises(QueryError, match=r"ambiguous column 'quality' .* a \(aidata.web\), b \(aidata.web\)"):
        _ctx("SELECT quality FROM web AS a JOIN web AS b ON a._ai_unique_id_ = b._ai_unique_id_")


def test_check_types_names_the_position():
    with pytest.raises(QueryError, match=r"type error at line 1, column 35: quality is double, compared with text 'high'"):
        _ctx("SELECT 1 FROM web WHERE quality > 'high'")
    with pytest.raises(QueryError, match="string, compared with number 5"):
        _ctx("SELECT 1 FROM web WHERE _ai_append_name_ = 5")
    _ctx("SELECT 1 FROM web WHERE quality > '0.5'")  # numeric text is fine


def test_prune_and_push():
    ctx = _ctx("SELECT count(*) FROM web WHERE _ai_append_name_ IN ('a', 'b') AND quality IS NOT NULL "
               "AND (quality > 1 OR quality < 0)")
    assert ctx.columns["web"] == ["_ai_unique_id_", "_ai_append_name_", "quality"]
    assert ctx.batches["web"] == ["a", "b"]
    assert [c.sql() for c in ctx.pushed["web"]] == ["_ai_append_name_ IN ('a', 'b')", "NOT quality IS NULL"]
    assert _ctx("SELECT * FROM web").columns["web"][:3] == ["_ai_unique_id_", "_ai_append_name_", "RawData"]
