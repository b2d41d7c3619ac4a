"""The logical SQL planner, rule by rule, against a fixed mapping (no catalog needed).

tests/fixtures/sql_rules/<rule>.yaml holds each rule's cases: logical SQL in, what the
rule decided (or the error it raised) out; rewrite.yaml holds logical SQL in and the
physical SQL per dialect out. Every rule's docstring example runs here too.
"""

import doctest
import importlib
import re
from pathlib import Path

import pytest
import yaml

from omni_iceberg.explore import rules
from omni_iceberg.explore.planner import QueryPlan, plan_query
from omni_iceberg.explore.rules import QueryError
from omni_iceberg.explore.rules.examples import example_context, load_example

FIXTURES = Path(__file__).parent / "fixtures" / "sql_rules"
RULE_NAMES = [r.__name__ for r in rules.RULES]


def _cases(name):
    return [(name, c) for c in yaml.safe_load((FIXTURES / f"{name}.yaml").read_text())]


ALL_CASES = [pair for name in RULE_NAMES for pair in _cases(name)]


def test_every_rule_has_a_module_a_fixture_file_and_several_cases():
    for name in RULE_NAMES:
        module = importlib.import_module(f"omni_iceberg.explore.rules.{name}")
        assert getattr(module, name) in rules.RULES
        assert len(_cases(name)) >= 3, f"{name}.yaml needs several cases"
    assert {p.stem for p in FIXTURES.glob("*.yaml")} == set(RULE_NAMES) | {"rewrite"}


def _observed(ctx, key):
    if key == "tree":
        return ctx.tree.sql()
    if key == "tables":
        return {a: t.identifier for a, t in ctx.tables.items()}
    if key == "system":
        return {a: t.identifier for a, t in ctx.system.items()}
    if key == "resolved":
        return sorted([list(v) for v in ctx.resolved.values()])
    if key == "star":
        return sorted(ctx.star)
    if key == "pushed":
        return {a: [c.sql() for c in conds] for a, conds in ctx.pushed.items()}
    return getattr(ctx, key)


@pytest.mark.parametrize("rule,case", ALL_CASES, ids=[f"{r}: {c['name']}" for r, c in ALL_CASES])
def test_rule_fixtures(rule, case):
    run = lambda: example_context(case["sql"], through=rule, row_counts=case.get("row_counts"))  # noqa: E731
    if "error" in case:
        with pytest.raises(QueryError, match=case["error"]):
            run()
        return
    ctx = run()
    for key, expected in case["expect"].items():
        assert _observed(ctx, key) == expected, key


class _Store:
    """Serves one fixed FamilyState the way FamilyStore.load does: the rules only need the mapping."""

    def load(self, ns, name, version=None):
        return load_example(ns, name, version)

    def list_tables(self):
        return ["aidata.web"]


class _Omni:
    store = _Store()  # no catalog: planning needs none, and row counts are then unknown


REWRITES = yaml.safe_load((FIXTURES / "rewrite.yaml").read_text())


@pytest.mark.parametrize("case", REWRITES, ids=[c["name"] for c in REWRITES])
def test_rewrite_fixtures(case):
    plan: QueryPlan = plan_query(_Omni(), case["sql"])
    for dialect in ("duckdb", "spark", "trino"):
        if dialect in case:
            assert plan.sql(dialect) == case[dialect], dialect
    assert plan.tables() == case["tables"]
    assert [[s.table.identifier, [f.sql() for f in s.filters]] for s in plan.scans] == case["pushed"]
    assert all(re.fullmatch(r"__omni_scan_\d+", s.local_name) for s in plan.scans)


def test_run_rules_runs_the_rules_tuple_in_order(monkeypatch):
    seen = []

    def spy(rule):
        def wrapped(ctx):
            seen.append(rule.__name__)
            return rule(ctx)
        wrapped.__name__ = rule.__name__
        return wrapped

    monkeypatch.setattr(rules, "RULES", tuple(spy(r) for r in rules.RULES))
    rules.run_rules("SELECT quality FROM web", _Store().load, _Store().list_tables)
    assert seen == RULE_NAMES


DOCTEST_MODULES = ["omni_iceberg.read.guard", "omni_iceberg.read.sandbox", "omni_iceberg.explore.export",
                   "omni_iceberg.read.scope",
                   "omni_iceberg.explore.results", "omni_iceberg.ui.formatting", "catalog_ext.redact"] + \
    [f"omni_iceberg.explore.rules.{n}" for n in RULE_NAMES]


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL, verbose=False)
    assert result.attempted > 0, f"{name} has no runnable example"
    assert result.failed == 0
