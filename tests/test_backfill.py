"""Backfills on the local engine over real documents: closure, fusion, isolation, resume, lineage."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from omni_iceberg.backfill.run import ErrorBudgetExceededError
from omni_iceberg.backfill.plan_picture import plan_graph
from omni_iceberg.backfill.planner import plan_backfill
from omni_iceberg.backfill.worker import WorkerCrashedError
from omni_iceberg.features.udf import feature
from omni_iceberg.ui.graphs import to_mermaid, to_svg
from tests import feature_udfs as U

CHAIN = [U.t_parse, U.t_lang, U.t_math, U.t_len, U.t_digits]


@pytest.fixture(scope="module")
def pages():
    return sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:48]


@pytest.fixture
def omni(tmp_path, pages):
    o = Omni(home=tmp_path / "home")
    o.create_table("web")
    o.submit("web", [str(p) for p in pages[:24]], batch="cc")
    o.submit("web", [str(p) for p in pages[24:]], batch="wiki")
    o.register_features("web", CHAIN)
    return o


def test_minimal_closure_reproduces_the_papers_example(omni):
    plan = omni.plan("web", ["t_math"], ["cc"], has_gpu=False)
    assert [(s.features, s.batches) for s in plan.stages] == [
        (["t_parse"], ["cc"]), (["t_lang"], ["cc"]), (["t_math"], ["cc"])]
    omni.backfill("web", ["t_lang"], ["cc"], isolation="inline")  # ancestors now present on cc
    plan = omni.plan("web", ["t_math"], ["cc"], has_gpu=False)
    assert [s.features for s in plan.stages] == [["t_math"]]
    assert plan.features["t_parse"].present == ["cc"] and plan.features["t_parse"].batches == []
    plan = omni.plan("web", ["t_math"], has_gpu=False)  # wiki still needs everything, cc only math
    assert plan.features["t_parse"].batches == ["wiki"] and plan.features["t_math"].batches == ["cc", "wiki"]


def test_features_sharing_inputs_are_fused_into_one_stage(omni):
    plan = omni.plan("web", ["t_len", "t_digits", "t_lang"], has_gpu=False)
    assert [s.features for s in plan.stages] == [["t_parse"], ["t_digits", "t_lang", "t_len"]]
    assert plan.stages[1].inputs == ["ProcessedData.parsed_text"]


def test_routing_falls_back_to_cpu_and_auto_uses_model_size(omni):
    from omni_iceberg.backfill.planner import route

    gpu = U.t_len.definition.model_copy(update={"engine": "gpu"})
    assert route(gpu, has_gpu=False) == ("cpu", "engine=gpu, no GPU present: CPU fallback")
    assert route(gpu, has_gpu=True)[0] == "gpu"
    big = U.t_len.definition.model_copy(update={"engine": "auto", "model_size_mb": 500})
    small = big.model_copy(update={"model_size_mb": 5})
    assert route(big, True)[0] == "gpu" and route(small, True)[0] == "cpu" and route(big, False)[0] == "cpu"


def test_dry_run_picture_marks_missing_and_present(omni, tmp_path):
    omni.backfill("web", ["t_parse"], isolation="inline")
    plan = omni.plan("web", ["t_math"], has_gpu=False)
    nodes, edges = plan_graph(plan)
    status = {n.label.split("@")[0]: n.status for n in nodes}
    assert status == {"t_parse": "present", "t_lang": "missing", "t_math": "requested",
                      "RawData.raw_data": "source"}
    assert ("f:t_lang", "f:t_math") in edges
    svg, mmd = to_svg(nodes, edges, "plan"), to_mermaid(nodes, edges)
    assert svg.startswith("<svg") and svg.count("<rect") >= len(nodes) and ":::requested" in mmd
    from omni_iceberg.cli import main

    assert main(["--home", str(omni.config.home), "backfill", "web", "--features", "t_math", "--dry-run",
                 "--dag", str(tmp_path / "p.svg")]) == 0
    # the CLI's picture has one box per missing node of the plan (t_lang: t_parse is computed)
    missing = [n.label for n in nodes if n.status == "missing"]
    assert len(missing) == 1 and missing[0].startswith("t_lang@")
    assert (tmp_path / "p.svg").read_text().count('<g class="missing">') == len(missing)


def test_backfill_values_one_commit_and_nothing_recomputed(omni, pages):
    before = omni.state("web").version
    report = omni.backfill("web", ["t_math", "t_len"], isolation="process")
    assert report.status == "succeeded" and report.logical_version == before + 1
    assert report.rows == 4 * 48 and report.errors == 0
    data = omni.read("web", columns=["_ai_unique_id_", "ProcessedData", "t_lang", "t_math", "t_len"])
    assert data.num_rows == 48 and None not in data.column("t_len").to_pylist()
    texts = [r["parsed_text"] for r in data.column("ProcessedData").to_pylist()]
    assert all(t and "<" not in t[:200] for t in texts)
    for t, lang, m in zip(texts, data.column("t_lang").to_pylist(), data.column("t_math").to_pylist()):
        assert lang == U.t_lang(t) and m == U.t_math(t, lang)
    again = omni.backfill("web", ["t_math", "t_len"], isolation="process")
    assert again.status == "nothing to do" and omni.state("web").version == before + 1


def test_bisection_isolates_bad_records_and_keeps_neighbours(tmp_path):
    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    rows = [f"record {i}" + (" POISON" if i in (7, 130) else "") for i in range(200)]
    src.write_text("".join(json.dumps({"raw_data": r}) + "\n" for r in rows))
    o.submit("web", [str(src)], batch="b")
    o.register_features("web", [U.t_fragile])
    report = o.backfill("web", ["t_fragile"], isolation="process")
    assert (report.rows, report.errors) == (198, 2)
    data = o.read("web", columns=["RawData", "t_fragile"])
    values = dict(zip([r["raw_data"] for r in data.column("RawData").to_pylist()], data.column("t_fragile").to_pylist()))
    assert values["record 7 POISON"] is None and values["record 8"] == len("record 8")
    errors = o.errors("web").to_pylist()
    assert sorted(e["exception_class"] for e in errors) == ["ValueError", "ValueError"]
    e = errors[0]
    assert e["feature"] == "t_fragile" and e["version"] == U.t_fragile.definition.version and e["batch"] == "b"
    assert e["run_id"] == report.run_id and e["attempt"] == 1 and len(e["traceback_digest"]) == 16
    assert e["message"] == "poisoned record in batch"
    from omni_iceberg.ingest.identity import content_id

    assert {x["_ai_unique_id_"] for x in errors} == {content_id(rows[7]), content_id(rows[130])}


def _flaky_table(tmp_path, monkeypatch):
    """50 records, every tenth POISON, and t_flaky registered: it fails on POISON while ``marker`` exists."""
    marker = tmp_path / "busy"
    marker.write_text("x")
    monkeypatch.setenv("OMNI_TEST_FLAKY_MARKER", str(marker))
    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"r{i}" + (" POISON" if i % 10 == 0 else "")}) + "\n"
                           for i in range(50)))
    o.submit("web", [str(src)], batch="b")
    o.register_features("web", [U.t_flaky])
    return marker, o


def test_error_budget_and_retry_of_only_failed_records(tmp_path, monkeypatch):
    marker, o = _flaky_table(tmp_path, monkeypatch)
    before = o.state("web").version
    with pytest.raises(ErrorBudgetExceededError, match=r"5 of 50 records"):
        o.backfill("web", ["t_flaky"], isolation="inline", max_error_ratio=0.05)
    assert o.state("web").version == before
    first = o.backfill("web", ["t_flaky"], isolation="inline", max_error_ratio=0.2)
    assert (first.rows, first.errors) == (45, 5)
    assert o.retry_failed("web", ["t_flaky"], ["ValueError"], isolation="inline").status == "nothing to do"
    marker.unlink()  # the transient cause is gone
    signature = o.state("web").coverage_signature(["t_flaky"])
    retry = o.retry_failed("web", ["t_flaky"], ["TimeoutError"], isolation="inline")
    assert (retry.rows, retry.errors) == (5, 0)
    # the unit's values changed: its record says so, and copies / the hot store see it as stale
    [unit] = o.state("web").computed
    assert (unit.retried, unit.errors) == (1, 0)
    assert o.state("web").coverage_signature(["t_flaky"]) != signature
    values = o.read("web", columns=["RawData", "t_flaky"]).to_pylist()
    assert all(r["t_flaky"] == len(r["RawData"]["raw_data"]) for r in values)
    assert o.retry_failed("web", ["t_flaky"], isolation="inline").status == "nothing to do"


def test_a_crashing_udf_gives_a_clear_error_and_an_intact_table(tmp_path):
    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"raw_data": "fine"}) + "\n" + json.dumps({"raw_data": "SEGV here"}) + "\n")
    o.submit("web", [str(src)], batch="b")
    o.register_features("web", [U.t_segv])
    before = o.state("web")
    with pytest.raises(WorkerCrashedError, match=r"died with signal 11 .* nothing was committed"):
        o.backfill("web", ["t_segv"], isolation="process")
    assert o.state("web") == before
    assert o.read("web", columns=["t_segv"]).column("t_segv").to_pylist() == [None, None]


RESUME_SCRIPT = r"""
import sys
from omni_iceberg.api import Omni
from tests import feature_udfs as U
omni = Omni(home=sys.argv[1])
r = omni.backfill("web", ["t_die"], isolation="inline", progress=False)
print(r.resumed_units, r.rows, r.logical_version)
"""


def test_resume_after_kill_skips_finished_units(tmp_path):
    home = tmp_path / "h"
    o = Omni(home=home)
    o.create_table("web")
    for batch in ("a", "b", "c"):
        src = tmp_path / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"{batch} doc {i}" + (" DIE" if batch == "b" and i == 3 else "")})
                               + "\n" for i in range(20)))
        o.submit("web", [str(src)], batch=batch)
    o.register_features("web", [U.t_die])
    marker = tmp_path / "die"
    marker.write_text("x")
    env = dict(os.environ, OMNI_TEST_DIE_MARKER=str(marker))
    root = Path(__file__).resolve().parents[1]
    killed = subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(home)], cwd=root, env=env,
                            capture_output=True, text=True)
    assert killed.returncode == 13  # the process died mid-run (batch b)
    state = o.state("web")
    assert state.computed == () and o.read("web", columns=["t_die"]).column("t_die").null_count == 60
    marker.unlink()
    done = subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(home)], cwd=root, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    resumed, rows, version = map(int, done.stdout.split())
    assert resumed == 1  # batch a was checkpointed before the crash and not recomputed
    assert rows == 60 and version == state.version + 1
    assert o.read("web", columns=["t_die"]).column("t_die").null_count == 0


def test_lineage_rows_tree_and_openlineage(omni, tmp_path):
    report = omni.backfill("web", ["t_math"], ["cc"], isolation="inline")
    rows = omni.catalog.load_table("omni_sys.lineage").scan().to_arrow().to_pylist()
    mine = [r for r in rows if r["run_id"] == report.run_id]
    assert {r["output_column"] for r in mine} == {"ProcessedData.parsed_text", "t_lang", "t_math"}
    m = next(r for r in mine if r["output_column"] == "t_math")
    assert m["version"] == U.t_math.definition.version and m["batch"] == "cc" and m["rows"] == 24
    inputs = json.loads(m["input_columns"])
    assert {"column": "t_lang", "producer": U.t_lang.definition.key} in inputs
    state = omni.state("web")
    assert m["logical_version"] == state.version and m["output_snapshot"] == state.physical_table(
        state.feature("t_math").table_key).snapshot_id
    # the physical snapshots read: what this run wrote for t_math's inputs, and what the version pins
    upstream = {r["output_table"]: r["output_snapshot"] for r in mine
                if r["output_column"] in ("ProcessedData.parsed_text", "t_lang")}
    assert json.loads(m["input_snapshots"]) == upstream
    assert len(upstream) == 2 and {t.identifier: t.snapshot_id for t in state.tables
                                   if t.identifier in upstream} == upstream
    tree = omni.lineage("web", "t_math")
    assert tree.producer == U.t_math.definition.key
    assert [c.column for c in tree.inputs] == ["ProcessedData.parsed_text", "t_lang"]
    assert tree.inputs[0].inputs[0].column == "RawData.raw_data" and tree.inputs[0].inputs[0].producer is None
    assert f"t_math  <- {U.t_math.definition.key}" in tree.render()
    from omni_iceberg.backfill.lineage import emit, openlineage_events

    events = openlineage_events(omni, "web", report.run_id)
    assert len(events) == 1 and events[0]["eventType"] == "COMPLETE"
    fields = events[0]["outputs"][0]["facets"]["columnLineage"]["fields"]
    assert fields["t_math"]["inputFields"][1]["field"] == "t_lang"
    assert emit(events, str(tmp_path / "ol.jsonl")) == 1
    runs = omni.catalog.load_table("omni_sys.runs").scan().to_arrow().to_pylist()
    assert any(r["run_id"] == report.run_id and r["status"] == "succeeded" for r in runs)


@pytest.mark.parametrize("index", ["lmdb", "off"])
def test_reuse_by_content_across_logical_tables(tmp_path, pages, monkeypatch, index):
    from omni_iceberg.backfill import reuse

    monkeypatch.setenv("OMNI_INDEX", index)
    through_index = []
    original = reuse._read_through_index

    def spy(*args):
        out = original(*args)
        through_index.append(out is not None)
        return out

    monkeypatch.setattr(reuse, "_read_through_index", spy)
    o = Omni(home=tmp_path / "h")
    for name in ("web", "mirror"):
        o.create_table(name)
        o.register_features(name, [U.t_parse, U.t_len])
    o.submit("web", [str(p) for p in pages[:20]], batch="a")
    o.submit("mirror", [str(p) for p in pages[10:30]], batch="m")  # 10 pages in common
    o.backfill("web", ["t_len"], isolation="inline")
    report = o.backfill("mirror", ["t_len"], isolation="inline")
    assert report.reused == 2 * 10  # both features, for the 10 shared pages
    # with an index the source rows are read by position; without one, scanned
    assert (all(through_index) and through_index) if index == "lmdb" else not through_index
    web = dict(
               zip(*o.read("web", columns=["_ai_unique_id_", "t_len"]).to_pydict().values()))
    mirror = o.read("mirror", columns=["_ai_unique_id_", "t_len"]).to_pylist()
    shared = [r for r in mirror if r["_ai_unique_id_"] in web]
    assert len(shared) == 10 and all(r["t_len"] == web[r["_ai_unique_id_"]] for r in shared)
    assert None not in [r["t_len"] for r in mirror]


def test_plan_on_unknown_feature_or_batch(omni):
    from omni_iceberg.features.spec import FeatureDefinitionError

    with pytest.raises(FeatureDefinitionError, match="did you mean 't_math'"):
        plan_backfill(omni.state("web"), ["t_mth"])
    with pytest.raises(FeatureDefinitionError, match="no batch 'zz'"):
        plan_backfill(omni.state("web"), ["t_math"], ["zz"])


def test_concurrent_backfills_needing_the_same_ancestor_append_it_once(tmp_path, pages):
    """Two runs (different targets, same missing ancestor t_parse) both compute it; the
    race is forced: B computes, A computes and commits, then B commits. B's commit must
    drop its copy of t_parse/cc instead of appending a second one."""
    from omni_iceberg.backfill.local import LocalExecutor
    from omni_iceberg.backfill.run import BackfillRun, start_report

    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    o.submit("web", [str(p) for p in pages[:24]], batch="cc")
    o.register_features("web", CHAIN)
    state = o.state("web")
    plan_b = plan_backfill(state, ["t_len"], has_gpu=False)
    assert [s.features for s in plan_b.stages] == [["t_parse"], ["t_len"]]
    run_b = BackfillRun(o, state, plan_b, start_report(state, plan_b, "local", "test"), LocalExecutor("inline"),
                        progress=False)
    run_b.execute()  # B has computed t_parse and t_len on its staging branches, not committed
    a = o.backfill("web", ["t_lang"], isolation="inline", progress=False)
    assert a.status == "succeeded" and {u["feature"] for u in a.units} == {"t_parse", "t_lang"}
    b = run_b.run_to_commit("backfill web --features t_len")

    final = o.state("web")
    parse = final.physical_table(final.feature("t_parse").table_key)
    ids = o.catalog.load_table(parse.identifier).scan(snapshot_id=parse.snapshot_id).to_arrow().column(
        "_ai_unique_id_").to_pylist()
    assert len(ids) == 24 and len(set(ids)) == 24  # one row per id, not two copies
    assert [(u.feature, u.batch, u.run_id) for u in final.computed if u.feature == "t_parse"] == [
        ("t_parse", "cc", a.run_id)]
    data = o.read("web", columns=["_ai_unique_id_", "ProcessedData", "t_lang", "t_len"])
    assert data.num_rows == 24 and None not in data.column("t_len").to_pylist()
    got = o.query("SELECT count(*) AS n, count(t_len) AS l FROM web WHERE t_lang IS NOT NULL").to_pylist()
    assert got == [{"n": 24, "l": 24}]
    assert b.status == "succeeded" and b.raced_units == ["t_parse/cc"]
    assert {u["feature"] for u in b.units} == {"t_len"} and b.rows == 24
    runs = [r for r in o.catalog.load_table("omni_sys.runs").scan().to_arrow().to_pylist() if r["run_id"] == b.run_id]
    assert runs[-1]["status"] == "succeeded" and "t_parse/cc" in runs[-1]["message"]


def test_failed_budget_keeps_its_records_readable_with_the_runs_status(tmp_path, monkeypatch):
    from omni_iceberg.backfill.errors import run_errors

    marker, o = _flaky_table(tmp_path, monkeypatch)
    with pytest.raises(ErrorBudgetExceededError) as info:
        o.backfill("web", ["t_flaky"], isolation="inline", max_error_ratio=0.05, progress=False)
    run_id = next(r["run_id"] for r in o.catalog.load_table("omni_sys.runs").scan().to_arrow().to_pylist())
    assert f"see 'omni errors {o.state('web').table.identifier} --run {run_id}'" in str(info.value)
    rows = run_errors(o, "web", run_id).to_pylist()
    assert len(rows) == 5 and {r["run_status"] for r in rows} == {"failed"}
    assert {r["exception_class"] for r in rows} == {"TimeoutError"}
    # a failed run's records are not "unresolved failures" of a computed unit: retry finds nothing
    assert o.retry_failed("web", ["t_flaky"], isolation="inline").status == "nothing to do"
    ok = o.backfill("web", ["t_flaky"], isolation="inline", max_error_ratio=0.2, progress=False)
    statuses = {(r["run_id"], r["run_status"]) for r in run_errors(o, "web", all_attempts=True).to_pylist()}
    assert statuses == {(run_id, "failed"), (ok.run_id, "succeeded")}
    assert {r["run_status"] for r in run_errors(o, "web").to_pylist()} == {"succeeded"}  # the latest attempt


@feature(outputs={"p_words": "long"}, inputs=["RawData.raw_data"], name="p_words", form="pandas", batch_size=16)
def p_words(raw_data):
    """A Spark-style pandas UDF: a Series in, a Series out; one poisoned record fails its whole batch."""
    if raw_data.str.contains("POISON").any():
        raise ValueError("poisoned record in batch")
    return raw_data.str.split().str.len()


@feature(outputs={"p_len": "double"}, inputs=["RawData.raw_data"], name="p_len", form="pandas")
def p_len(raw_data):
    """NaN out is null, as Spark reads a pandas UDF's result."""
    return raw_data.str.len().astype("float64").where(~raw_data.str.startswith("skip"))


def test_pandas_form_runs_series_in_series_out_with_record_isolation(tmp_path):
    import pandas as pd

    assert p_words(pd.Series(["a b", "c"])).tolist() == [2, 1]  # a decorated UDF runs as plain pandas code
    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    rows = [("skip " if i % 7 == 0 else "") + f"doc{i} " + " ".join(["w"] * (i % 5 + 1)) + (" POISON" if i in (3, 40) else "")
            for i in range(60)]
    src.write_text("".join(json.dumps({"raw_data": r}) + "\n" for r in rows))
    o.submit("web", [str(src)], batch="b")
    o.register_features("web", [p_words, p_len])
    report = o.backfill("web", ["p_words", "p_len"], isolation="process", progress=False)
    assert report.status == "succeeded" and report.errors == 2  # only the two poisoned records, not their batches
    got = {r["RawData"]["raw_data"]: (r["p_words"], r["p_len"])
           for r in o.read("web", columns=["RawData", "p_words", "p_len"]).to_pylist()}
    for r in rows:
        words, length = got[r]
        assert words == (None if "POISON" in r else len(r.split()))
        assert length == (None if r.startswith("skip") else float(len(r)))
    assert sorted(e["exception_class"] for e in o.errors("web").to_pylist()) == ["ValueError", "ValueError"]


def test_pandas_form_rejects_a_shared_parameter():
    from omni_iceberg.features.spec import FeatureDefinitionError

    with pytest.raises(FeatureDefinitionError, match="form='pandas' takes a function of pandas Series"):
        @feature(outputs={"x": "long"}, form="pandas")
        def x(raw_data, shared=None):
            return raw_data.str.len()


# ---- the engine registry -------------------------------------------------------------------------
@pytest.fixture
def empty_registry(monkeypatch):
    """The registry as in a fresh process (the core registers its local engine before its first lookup)."""
    from omni_iceberg import engines

    monkeypatch.setattr(engines, "_PROVIDERS", {capability: {} for capability in engines.CAPABILITIES})
    monkeypatch.setattr(engines, "_load_errors", {})
    monkeypatch.setattr(engines, "_loaded", False)
    return engines


PLUGIN = '''
from omni_iceberg.engines import register

class DummyEngine:
    def __init__(self, ctx, **options):
        self.ctx, self.options = ctx, options

def register_dummy():
    register("backfill", "dummy", DummyEngine)
    register("sql", "dummy", lambda ctx, sql: "ran " + sql)

def broken():
    raise ImportError("no module named dummy_runtime")
'''


def test_engines_register_their_capabilities_through_the_entry_point_group(tmp_path, monkeypatch, empty_registry):
    from catalog_ext.errors import ConfigError
    from governance.rewrite import LocalRewrite, RewriteEngine, rewrite_engine
    from omni_iceberg.backfill.local import LocalBackfill

    (tmp_path / "omni_dummy_engine.py").write_text(PLUGIN)
    info = tmp_path / "omni_dummy_engine-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: omni-dummy-engine\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[omni_iceberg.engines]\ndummy = omni_dummy_engine:register_dummy\nshaky = omni_dummy_engine:broken\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from omni_iceberg.backfill.choose import backfill_engine
    from omni_iceberg.backfill.local import LocalExecutor
    from omni_iceberg.backfill.protocol import BackfillEngine, UnitExecutor

    engines = empty_registry
    assert backfill_engine("local") is LocalBackfill  # the core registers its own engine before a lookup
    assert isinstance(LocalExecutor(), UnitExecutor) and isinstance(LocalBackfill(None), BackfillEngine)
    with rewrite_engine("local") as rewriter:
        assert type(rewriter) is LocalRewrite and isinstance(rewriter, RewriteEngine)
    runner = engines.lookup("backfill", "dummy")("ctx", master="x")
    assert type(runner).__name__ == "DummyEngine" and runner.options == {"master": "x"}
    assert engines.sql_executor("dummy")(None, "SELECT 1") == "ran SELECT 1"
    assert {"dummy", "local"} <= set(engines.offering("backfill")) and "dummy" not in engines.offering("rewrite")
    assert engines.capabilities_of("dummy") == ["backfill", "sql"]
    with pytest.raises(ConfigError, match=r"no backfill engine named 'shaky' is installed .* its entry point "
                                          r"failed to load: omni_dummy_engine:broken: ImportError"):
        engines.lookup("backfill", "shaky")
    # an engine registers only what it can do: asking it for more says what it offers
    with pytest.raises(ConfigError, match=r"no rewrite engine named 'dummy' is installed \(installed: local[^)]*\); "
                                          r"dummy offers backfill, sql only"):
        rewrite_engine("dummy")
    # an engine that does not offer ingest is not looked up for it, and a lookup says who does
    assert "dummy" not in engines.offering("ingest") and "dummy" not in engines.offering("export")
    with pytest.raises(ConfigError, match=r"no ingest engine named 'dummy' is installed \(installed: [^)]*spark"):
        engines.lookup("ingest", "dummy")
    with pytest.raises(ValueError, match="unknown engine capability 'paint'"):
        engines.register("paint", "dummy", object())


def test_a_missing_engine_names_the_extra_to_install(tmp_path, monkeypatch, empty_registry):
    import importlib.metadata

    from catalog_ext.errors import ConfigError
    from governance.rewrite import rewrite_unavailable
    from omni_iceberg.backfill.choose import run_backfill, spark_blocker

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [])  # nothing installed but the core
    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"r{i}"}) + "\n" for i in range(5)))
    o.submit("web", [str(src)], batch="b")
    o.register_features("web", [U.t_fragile])
    with pytest.raises(ConfigError, match=r"no backfill engine named 'spark' is installed \(installed: local\); "
                                          r"install it: pip install 'omni-iceberg\[spark\]'"):
        run_backfill(o, "web", ["t_fragile"], engine="spark")
    assert "pip install 'omni-iceberg[spark]'" in spark_blocker(o.config)
    assert "no rewrite engine named 'spark'" in rewrite_unavailable("spark", o.config)
    report = run_backfill(o, "web", ["t_fragile"], engine="auto", threshold_bytes=0, isolation="inline",
                          progress=False)
    assert report.engine == "local" and "Spark cannot run here: no backfill engine named 'spark'" in \
        report.engine_reason and report.rows == 5


def test_the_spark_plugin_registers_without_importing_pyspark(tmp_path):
    code = ("import sys\n"
            "import omni_iceberg.api, omni_iceberg.backfill.choose, omni_iceberg.explore.planner, governance.verbs\n"
            "from omni_iceberg.engines import capabilities_of, lookup\n"
            "assert not [m for m in sys.modules if m.startswith(('spark_udfs', 'pyspark'))], 'core imported an engine'\n"
            "import spark_udfs.plugin as p\n"
            "p.register()\n"
            "assert lookup('backfill', 'spark') is p.spark_engine and lookup('rewrite', 'spark') is p.spark_rewrite\n"
            "assert capabilities_of('spark') == ['backfill', 'rewrite', 'ingest', 'export', 'sql', 'settings'], capabilities_of('spark')\n"
            "assert not [m for m in sys.modules if m.startswith('pyspark')], 'registration imported pyspark'\n"
            "print('ok')\n")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(root)))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    from spark_udfs.plugin import unavailable

    assert "embedded SQLite" in unavailable(Omni(home=tmp_path / "h").config)


# ---- fixed cost of a run: phases, one worker across stages, one commit per checkpoint ----------
@feature(outputs={"w_pid": "long"}, inputs=["RawData.raw_data"], name="w_pid")
def w_pid(raw_data):
    """The id of the process computing the record: tells which worker ran a stage."""
    return os.getpid()


@feature(outputs={"w_pid_next": "long"}, inputs=["w_pid"], name="w_pid_next")
def w_pid_next(w_pid):
    """Stage 2 (reads stage 1's output): same process as ``w_pid`` when the worker was handed on."""
    return os.getpid()


@feature(outputs={"w_model_pid": "long"}, inputs=["RawData.raw_data"], name="w_model_pid", form="class")
class WModelPid:
    """A class UDF: holds a 'model' (here a byte buffer), so its worker ends with its stage."""

    def setup(self):
        self.model = bytearray(1 << 20)

    def __call__(self, raw_data):  # a batch of records in, one value per record out
        return [os.getpid()] * len(raw_data)


@feature(outputs={"w_after_model": "long"}, inputs=["w_model_pid"], name="w_after_model")
def w_after_model(w_model_pid):
    return os.getpid()


@pytest.fixture
def small(tmp_path):
    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"doc {i}"}) + "\n" for i in range(12)))
    o.submit("web", [str(src)], batch="b")
    return o


def test_report_phases_account_for_the_run(small, capsys):
    small.register_features("web", [w_pid])
    report = small.backfill("web", ["w_pid"], isolation="process", progress=False)
    phases = report.phases
    for name in ("plan_s", "setup_s", "worker_start_s", "read_s", "compute_s", "write_s", "checkpoint_s",
                 "worker_stop_s", "commit_s", "lineage_append_s", "runs_append_s", "other_s"):
        assert name in phases and phases[name] >= 0, name
    assert "errors_append_s" not in phases  # no record failed: no append to omni_sys.errors at all
    # the phases do not overlap: with other_s they add up to the run's seconds (rounding aside)
    assert abs(sum(phases.values()) - report.seconds) < 0.01 * len(phases)
    from omni_iceberg.cli import main

    small.register_features("web", [w_pid_next])
    capsys.readouterr()
    assert main(["--home", str(small.config.home), "backfill", "web", "--features", "w_pid_next", "--json"]) == 0
    assert {"compute_s", "commit_s", "other_s"} <= set(json.loads(capsys.readouterr().out)["phases"])


def test_one_worker_process_serves_stages_of_plain_functions(small):
    small.register_features("web", [w_pid, w_pid_next])
    report = small.backfill("web", ["w_pid_next"], isolation="process", progress=False)
    assert len(report.plan["stages"]) == 2
    data = small.read("web", columns=["w_pid", "w_pid_next"])
    pids = set(data.column("w_pid").to_pylist()) | set(data.column("w_pid_next").to_pylist())
    assert len(pids) == 1 and os.getpid() not in pids  # one child, both stages


def test_a_worker_that_loaded_a_model_ends_with_its_stage(small):
    small.register_features("web", [WModelPid, w_after_model])
    small.backfill("web", ["w_after_model"], isolation="process", progress=False)
    data = small.read("web", columns=["w_model_pid", "w_after_model"])
    first, second = set(data.column("w_model_pid").to_pylist()), set(data.column("w_after_model").to_pylist())
    assert len(first) == 1 and len(second) == 1 and first != second


def test_a_checkpoint_creates_its_branch_then_its_snapshot_on_the_base(small):
    small.register_features("web", [w_pid])
    state = small.state("web")
    pinned = state.physical_table(state.feature("w_pid").table_key)
    ident = pinned.identifier
    before = len(small.catalog.load_table(ident).metadata.metadata_log)
    small.backfill("web", ["w_pid"], isolation="inline", progress=False)
    table = small.catalog.load_table(ident)
    # branch, snapshot, publishing main: three metadata versions. The branch is not created in
    # the snapshot's transaction: pyiceberg's retry would drop it and commit a parentless snapshot
    # (tests/test_staged_write.py has the race)
    assert len(table.metadata.metadata_log) - before == 3
    assert table.snapshot_by_id(small.state("web").physical_table(pinned.key).snapshot_id).parent_snapshot_id \
        == pinned.snapshot_id
    assert table.scan().to_arrow().num_rows == 12 and not [r for r in table.metadata.refs if r != "main"]


def test_a_worker_killed_for_memory_reruns_with_smaller_batches(tmp_path):
    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"record {i}"}) + "\n" for i in range(50)))
    o.submit("web", [str(src)], batch="b")
    o.register_features("web", [U.t_hungry])
    report = o.backfill("web", ["t_hungry"], isolation="process")
    # 64 rows a batch: killed; 32: killed; 16: fits
    assert report.status == "succeeded" and (report.rows, report.errors) == (50, 0)
    assert len(report.tuning) == 2 and "divided by 4" in report.tuning[-1] and "died with signal 9" in report.tuning[0]
    values = o.read("web", columns=["RawData", "t_hungry"]).to_pylist()
    assert all(r["t_hungry"] == len(r["RawData"]["raw_data"]) for r in values)
    # (a crash that is not about memory is not retried: test_a_crashing_udf_gives_a_clear_error...)


def test_runs_stats_count_first_submit_success_and_failure_causes(tmp_path, monkeypatch, capsys):
    from omni_iceberg.cli import main

    marker, o = _flaky_table(tmp_path, monkeypatch)
    with pytest.raises(ErrorBudgetExceededError):  # first submit of t_flaky fails on its budget
        o.backfill("web", ["t_flaky"], isolation="inline", max_error_ratio=0.05)
    o.backfill("web", ["t_flaky"], isolation="inline", max_error_ratio=0.2)  # the same plan: second attempt
    o.register_features("web", [U.t_hungry])
    o.backfill("web", ["t_hungry"], isolation="process")  # killed twice for memory, rerun by itself: one submit
    stats = o.runs("web", stats=True)
    hungry, flaky = stats["by_features"]["t_hungry"], stats["by_features"]["t_flaky"]
    assert (hungry["runs"], hungry["attempts"], hungry["automatic_reruns"]) == (1, 3, 2)
    assert hungry["first_submit_success"] == 1.0 and hungry["failures"] == {"memory": 2}
    assert (flaky["runs"], flaky["attempts"], flaky["first_submit_success"]) == (1, 2, 0.0)
    assert flaky["failures"] == {"error budget": 1} and flaky["median_rows_per_s"] > 0
    assert stats["overall"]["first_submit_success"] == 0.5
    assert main(["--home", str(tmp_path / "h"), "runs", "web", "--stats"]) == 0
    assert "first-submit success 50%" in capsys.readouterr().out
    assert main(["--home", str(tmp_path / "h"), "runs", "web", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 5


def test_a_rerun_is_a_new_attempt_with_its_own_errors_and_counts(tmp_path, monkeypatch, capsys):
    """Issue #36: a run that failed on its budget and its successful rerun share one run id;
    each error row belongs to one numbered attempt, the default view shows the latest
    attempt's, and each attempt's row in omni_sys.runs says what that attempt did."""
    from omni_iceberg.cli import main

    marker, o = _flaky_table(tmp_path, monkeypatch)
    with pytest.raises(ErrorBudgetExceededError):
        o.backfill("web", ["t_flaky"], isolation="inline", max_error_ratio=0.05, progress=False)
    ok = o.backfill("web", ["t_flaky"], isolation="inline", max_error_ratio=0.2, progress=False)
    latest = o.errors("web").to_pylist()
    assert len(latest) == 5 and {(e["run_id"], e["attempt"]) for e in latest} == {(ok.run_id, 2)}
    every = o.errors("web", all_attempts=True).to_pylist()
    assert sorted(e["attempt"] for e in every) == [1] * 5 + [2] * 5
    assert len({e["_ai_unique_id_"] for e in every}) == 5  # the same 5 records, once per attempt
    runs = [(r["attempt"], r["status"], r["rows"], r["errors"]) for r in o.runs("web")]
    assert runs == [(1, "failed", 45, 5), (2, "succeeded", 45, 5)]
    home = str(tmp_path / "h")
    assert main(["--home", home, "errors", "web"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5 and all("attempt 2" in line for line in lines)
    assert main(["--home", home, "errors", "web", "--all-attempts", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 10
    assert main(["--home", home, "runs", "web"]) == 0
    text = capsys.readouterr().out
    assert "attempt 1 failed" in text and "rows=45 errors=5" in text.splitlines()[0]


@feature(outputs={"ProcessedData.parsed_text": "string"}, inputs=["RawData.raw_data"], name="t_blank36")
def t_blank36(raw_data):
    return None


def test_a_batch_whose_inputs_are_all_null_fails_instead_of_committing_nulls(tmp_path):
    """Issue #36: a run that computed nothing from all-NULL inputs reported success."""
    from omni_iceberg.backfill.run import NullInputsError

    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"doc {i}"}) + "\n" for i in range(5)))
    o.submit("web", [str(src)], batch="b")
    o.register_features("web", [t_blank36, U.t_len])
    before = o.state("web").version
    with pytest.raises(NullInputsError, match=r"feature t_len, batch b: every value of ProcessedData.parsed_text "
                                              r"was NULL on all 5 rows.*nothing committed"):
        o.backfill("web", ["t_len"], isolation="inline", progress=False)
    assert o.state("web").version == before and o.state("web").computed == ()
    [run] = o.runs("web")
    assert run["status"] == "failed" and "NullInputsError" in run["message"]


RESUME_TWO = RESUME_SCRIPT.replace('["t_die"]', '["t_die", "t_fragile"]')


def test_a_unit_resumed_by_the_next_attempt_keeps_the_errors_of_the_attempt_that_computed_it(tmp_path):
    """The killed first attempt finished batch a (one record failed there) and died in batch b;
    its rerun resumes a: that failure is still the unit's, shown once, as attempt 1's."""
    home = tmp_path / "h"
    o = Omni(home=home)
    o.create_table("web")
    for batch in ("a", "b"):
        src = tmp_path / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"{batch} doc {i}" + (" POISON" if batch == "a" and i == 2 else "")
                                           + (" DIE" if batch == "b" and i == 3 else "")}) + "\n" for i in range(10)))
        o.submit("web", [str(src)], batch=batch)
    o.register_features("web", [U.t_die, U.t_fragile])
    marker = tmp_path / "die"
    marker.write_text("x")
    env = dict(os.environ, OMNI_TEST_DIE_MARKER=str(marker))
    root = Path(__file__).resolve().parents[1]
    killed = subprocess.run([sys.executable, "-c", RESUME_TWO, str(home)], cwd=root, env=env,
                            capture_output=True, text=True)
    assert killed.returncode == 13
    marker.unlink()
    done = subprocess.run([sys.executable, "-c", RESUME_TWO, str(home)], cwd=root, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "2"  # both features' units of batch a were resumed
    shown = o.errors("web").to_pylist()
    assert [(e["batch"], e["feature"], e["attempt"]) for e in shown] == [("a", "t_fragile", 1)]
    assert len(o.errors("web", all_attempts=True)) == 1
    [run] = o.runs("web")  # the killed attempt wrote no row; the rerun counts only batch b
    assert (run["attempt"], run["status"], run["rows"], run["errors"]) == (2, "succeeded", 20, 0)
