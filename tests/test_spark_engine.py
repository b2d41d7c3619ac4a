"""The Spark engine runs the local engine's plan unchanged and ends in the same state.

Real components: PostgreSQL catalog, Spark 3.5 with the official Iceberg runtime (the
session's ``spark`` fixture, local[2]), a real standalone master + worker started from
pyspark's own jars, real HTML pages. Each comparison runs the local engine on a twin
table in its own embedded catalog: same table name, same data, so run ids, physical
table names and values must match exactly. Page ranges differ between tests so that
reuse-by-content never links two tests' tables.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from catalog_ext.contract import ID_COLUMN
from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from omni_iceberg.backfill.choose import choose_engine, measure_input_bytes, run_backfill, run_retry_failed
from omni_iceberg.backfill.run import ErrorBudgetExceededError
from omni_iceberg.backfill.worker import WorkerCrashedError
from catalog_ext.errors import ConfigError
from omni_iceberg.features import feature
from omni_iceberg.features.placement import planned_device
from omni_iceberg.features.spec import FeatureDefinitionError
from tests import feature_udfs as U

REPO = Path(__file__).resolve().parents[1]
JARS = (Path(os.environ["OMNI_CACHE"]) if os.environ.get("OMNI_CACHE") else REPO / ".cache") / "jars"


def _on_spark(omni: Omni, session: Any, name: str, features: list[str], batches: list[str] | None = None,
              **kwargs: Any) -> Any:
    """A backfill on Spark the way every command runs one: planned once, the plan run on the engine."""
    return run_backfill(omni.context, name, features, batches, engine="spark", engine_options={"spark": session},
                        **kwargs)


# ---- test UDFs: importable by Spark's Python workers as tests.test_spark_engine ---------------
@feature(outputs={"s_len": "long"}, inputs=["RawData.raw_data"], name="s_len")
def s_len(raw_data):
    """Length; on a cluster, dies hard on a KILL record in a task's first attempt, and holds on HOLD."""
    if "KILL" in raw_data and os.environ.get("OMNI_TEST_KILL_FIRST_ATTEMPT"):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0:
            _log("kill", attempt=0)
            os._exit(17)  # not catchable: the Python worker dies, Spark retries the task
    marker = os.environ.get("OMNI_TEST_HOLD_MARKER", "")
    deadline = time.monotonic() + 300
    while "HOLD" in raw_data and marker and os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return len(raw_data)


@feature(outputs={"s_short": "long"}, inputs=["RawData.raw_data"], name="s_short", filter="length(raw_data) < 6000")
def s_short(raw_data):
    return len(raw_data.split())


@feature(outputs={"s_model": "long"}, inputs=["RawData.raw_data"], name="s_model", form="class", engine="gpu",
         batch_size=4, model_size_mb=100)
class SModel:
    """A 'model' that logs its loads and calls, to show it loads once per Python worker process."""

    def setup(self):
        _log("setup")
        self.modulus = 7

    def __call__(self, raw_data):
        _log("call", rows=len(raw_data), gpu=os.environ.get("CUDA_VISIBLE_DEVICES"), task=_task_gpus(),
             planned=planned_device())
        return [len(v) % self.modulus for v in raw_data.to_pylist()]


@feature(outputs={"sp_words": "long"}, inputs=["RawData.raw_data"], name="sp_words", form="pandas", batch_size=8)
def sp_words(raw_data):
    """A Spark-style pandas UDF (Series in, Series out); a poisoned record fails its whole batch."""
    if raw_data.str.contains("POISON").any():
        raise ValueError("poisoned record in batch")
    return raw_data.str.split().str.len()


@feature(outputs={"sp_len": "double"}, inputs=["RawData.raw_data"], name="sp_len", form="pandas",
         filter="length(raw_data) < 6000")
def sp_len(raw_data):
    """NaN out is null on both engines."""
    return raw_data.str.len().astype("float64").where(~raw_data.str.startswith("skip"))


@feature(outputs={"sp_gpu": "long"}, inputs=["RawData.raw_data"], name="sp_gpu", form="pandas", engine="gpu",
         batch_size=4, model_size_mb=100)
def sp_gpu(raw_data):
    """A pandas UDF on the GPU route: logs the batch it got, the GPUs its process sees, the GPUs
    Spark assigned its task and the device the plan gave it."""
    _log("pandas-call", rows=len(raw_data), gpu=os.environ.get("CUDA_VISIBLE_DEVICES"), task=_task_gpus(),
         planned=planned_device())
    return raw_data.str.len() % 7


def _task_gpus() -> str | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    gpus = ctx.resources().get("gpu") if ctx is not None else None
    return ",".join(gpus.addresses) if gpus is not None else None


def _log(event: str, **extra) -> None:
    path = os.environ.get("OMNI_TEST_MODEL_LOG")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"event": event, "pid": os.getpid(), **extra}) + "\n")


CHAIN = [U.t_parse, U.t_lang, U.t_math, U.t_len, U.t_digits, U.t_fragile, s_short]


def _own(features):
    """This module's own feature versions: the session's Spark catalog is shared with other test
    modules that compute the same features on the same pages, and values would otherwise be
    reused from their tables (correctly - but these tests count what is computed)."""
    return [f.definition.model_copy(update={"version": f"{f.definition.version}-se"}) for f in features]


@pytest.fixture(scope="module")
def pages():
    return sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:72]


def _fill(omni: Omni, name: str, pages_a, pages_b, tmp: Path, extra_a=(), extra_b=()) -> None:
    omni.create_table(name)
    for batch, pages_, extra in (("a", pages_a, extra_a), ("b", pages_b, extra_b)):
        sources = [str(p) for p in pages_]
        if extra:
            src = tmp / f"{name}-{batch}.jsonl"
            src.write_text("".join(json.dumps({"raw_data": r}) + "\n" for r in extra))
            sources.append(str(src))
        omni.submit(name, sources, batch=batch, progress=False)


def _facts(omni: Omni, name: str, columns: list[str]) -> dict:
    """Values, error rows and lineage rows of ``name``, without what legitimately differs."""
    ident = omni.state(name).table.identifier
    values = omni.read(name, columns=[ID_COLUMN] + columns).sort_by(ID_COLUMN).to_pylist()
    errors = sorted((e["run_id"], e["feature"], e["version"], e[ID_COLUMN], e["batch"], e["exception_class"],
                     e["message"], e["traceback_digest"], e["attempt"]) for e in omni.errors(name).to_pylist())
    lineage = sorted(
        (r["run_id"], r["output_column"], r["feature"], r["version"], r["batch"], r["input_columns"],
         tuple(sorted(json.loads(r["input_snapshots"]))), r["output_table"], r["logical_version"], r["code_hash"],
         r["rows"], r["errors"], r["reused"])
        for r in omni.catalog.load_table("omni_sys.lineage").scan(
            row_filter=f"logical_table == '{ident}'").to_arrow().to_pylist())
    return {"values": values, "errors": errors, "lineage": lineage}


def _units(report) -> list[tuple]:
    return sorted((u["feature"], u["batch"], u["rows"], u["errors"], u["reused"], u["filtered"]) for u in report.units)


# ---- engine choice: no Spark needed ------------------------------------------------------------
def test_choose_engine_from_input_size_and_threshold(tmp_path, pages, monkeypatch):
    assert choose_engine(None, None, "local", 0) == ("local", "requested --engine local")
    assert choose_engine(None, None, "spark", 0)[0] == "spark"
    engine, why = choose_engine(None, None, "auto", 1000, input_size=999)
    assert engine == "local" and "999 B, below the Spark threshold of 1000 B" in why
    assert choose_engine(None, None, "auto", 1000, input_size=4096)[0] == "spark"
    monkeypatch.setenv("OMNI_SPARK_THRESHOLD_BYTES", "5000")
    assert choose_engine(None, None, "auto", input_size=4096)[0] == "local"
    monkeypatch.setenv("OMNI_SPARK_THRESHOLD_BYTES", "lots")
    with pytest.raises(ConfigError, match=r"OMNI_SPARK_THRESHOLD_BYTES='lots' \(environment\): expected a whole number"):
        choose_engine(None, None, "auto", input_size=1)
    with pytest.raises(ConfigError, match="unknown engine 'fast'"):
        choose_engine(None, None, "fast", 0)
    monkeypatch.delenv("OMNI_SPARK_THRESHOLD_BYTES")

    o = Omni(home=tmp_path / "h")
    _fill(o, "web", pages[64:68], pages[68:72], tmp_path)
    o.register_features("web", _own([U.t_parse, U.t_len]))
    plan = o.plan("web", ["t_len"], has_gpu=False)
    size = measure_input_bytes(o.catalog, o.state("web"), plan)
    raw = sum(len(p.read_bytes()) for p in pages[64:72])
    assert 0 < size < raw  # stored (compressed) raw_data column only, both batches
    assert 0 < measure_input_bytes(o.catalog, o.state("web"), o.plan("web", ["t_len"], ["a"], has_gpu=False)) < size
    report = run_backfill(o, "web", ["t_len"], engine="auto", threshold_bytes=1, isolation="inline", progress=False)
    assert report.status == "succeeded" and report.engine == "local"
    assert "Spark cannot run here: the catalog is embedded SQLite" in report.engine_reason
    dry = run_backfill(o, "web", ["t_len"], engine="auto", threshold_bytes=10**12, dry_run=True)
    assert dry.status == "nothing to do" and dry.engine == "local"


# ---- Spark, local[2] -------------------------------------------------------------------------------
def test_spark_and_local_engines_produce_identical_values_errors_and_lineage(spark, tmp_path, pages):
    from spark_udfs.engine import UNIT_READ_CONF, read_unit, session_conf

    poison = ["alpha POISON record", "the plain record", "another POISON one"]
    features = ["t_math", "t_len", "t_digits", "t_fragile", "s_short"]
    columns = ["ProcessedData.parsed_text", "t_lang", "t_math", "t_len", "t_digits", "t_fragile", "s_short"]
    on_spark = Omni(config=spark.config)
    local = Omni(home=tmp_path / "local")
    for o in (on_spark, local):
        _fill(o, "se_parity", pages[:12], pages[12:24], tmp_path, extra_a=poison)
        o.register_features("se_parity", _own(CHAIN))
    before = on_spark.state("se_parity").version

    t0 = time.perf_counter()
    lr = local.backfill("se_parity", features, isolation="inline", progress=False, max_error_ratio=None)
    t1 = time.perf_counter()
    sr = _on_spark(on_spark, spark.session, "se_parity", features, progress=False, has_gpu=False)
    t2 = time.perf_counter()
    print(f"\nparity: local {t1 - t0:.1f} s, spark {t2 - t1:.1f} s ({sr.rows} values, 27 records, "
          f"{len(sr.units)} units)")

    assert sr.status == lr.status == "succeeded" and sr.engine == "spark" and lr.engine == "local"
    assert sr.run_id == lr.run_id and sr.logical_version == lr.logical_version == before + 1  # ONE commit
    assert (sr.rows, sr.errors, sr.reused) == (lr.rows, lr.errors, lr.reused) and sr.errors == 2
    assert _units(sr) == _units(lr) and any(u[5] for u in _units(sr))  # s_short's filter skipped records
    assert set(sr.plan["spark"]["stages"].values()) == {"mapInArrow (CPU)"}
    s_facts, l_facts = _facts(on_spark, "se_parity", columns), _facts(local, "se_parity", columns)
    assert s_facts["values"] == l_facts["values"] and len(s_facts["values"]) == 27
    assert s_facts["errors"] == l_facts["errors"] and len(s_facts["errors"]) == 2
    assert s_facts["lineage"] == l_facts["lineage"] and len(s_facts["lineage"]) == 2 * 7
    engines = {r["engine"] for r in on_spark.catalog.load_table("omni_sys.lineage").scan(
        row_filter=f"run_id == '{sr.run_id}'").to_arrow().to_pylist()}
    assert engines == {"spark:cpu"}
    runs = [r for r in on_spark.catalog.load_table("omni_sys.runs").scan().to_arrow().to_pylist()
            if r["run_id"] == sr.run_id]
    assert [(r["engine"], r["status"]) for r in runs] == [("spark", "succeeded")]

    # every unit is one labelled snapshot on the way to the pinned one, as on the local engine
    state = on_spark.state("se_parity")
    t_len = on_spark.catalog.load_table(state.physical_table(state.feature("t_len").table_key).identifier)
    snap = t_len.snapshot_by_id(state.physical_table(state.feature("t_len").table_key).snapshot_id)
    labels = []
    while snap is not None and snap.summary.additional_properties.get("omni.unit"):
        labels.append(snap.summary.additional_properties["omni.unit"])
        snap = t_len.snapshot_by_id(snap.parent_snapshot_id)
    assert sorted(labels) == ["t_len/a", "t_len/b"]
    assert _on_spark(on_spark, spark.session, "se_parity", features).status == "nothing to do"
    # files Spark's executors wrote are indexed before the commit, like the local engine's
    assert on_spark.verify_index("se_parity").ok
    ids = [r["_ai_unique_id_"] for r in on_spark.read("se_parity", columns=["_ai_unique_id_"]).to_pylist()][:5]
    looked_up = on_spark.get("se_parity", ids, columns=["t_len"], explain=True)
    assert {t.method for t in looked_up.tables} == {"index"}, looked_up.explain_text()

    # a unit's inputs from three physical tables join without a shuffle (co-partitioned family); small
    # tables would be broadcast, so broadcasting is off here to see the plan big tables get
    with session_conf(spark.session, {**UNIT_READ_CONF, "spark.sql.autoBroadcastJoinThreshold": "-1"}):
        frame = read_unit(spark.session, "omni", state, ["ProcessedData.parsed_text", "t_lang", "RawData.raw_data"],
                          "a")
        plan_text = frame._jdf.queryExecution().executedPlan().toString()
    assert plan_text.count("BatchScan") == 3 and "Exchange" not in plan_text, plan_text
    assert frame.count() == 15


def test_a_unit_reading_one_table_splits_by_row_group_not_by_bucket(spark, tmp_path, pages, monkeypatch):
    """#38: tasks scale with the data. Two buckets, one row per row group, one row per slice: a unit
    reading only the base table runs one task per row group (it was one per bucket holding data)."""
    from catalog_ext.row_groups import ROW_GROUP_LIMIT_PROPERTY
    from omni_iceberg.backfill import run as run_module

    on_spark, local = Omni(config=spark.config), Omni(home=tmp_path / "local")
    docs = [f"document number {i} " + "word " * i for i in range(9)]
    for o in (on_spark, local):
        o.create_table("se_split", bucket_count=2)
        base = o.catalog.load_table(o.state("se_split").base_table.identifier)
        with base.transaction() as tx:
            tx.set_properties({ROW_GROUP_LIMIT_PROPERTY: "1"})
        src = tmp_path / "split.jsonl"
        src.write_text("".join(json.dumps({"raw_data": d}) + "\n" for d in docs))
        o.submit("se_split", [str(src)], batch="a", progress=False)
        o.register_features("se_split", _own([s_len]))
    monkeypatch.setattr(run_module, "SLICE_ROWS", 1)  # the rows ask for 9 tasks
    report = _on_spark(on_spark, spark.session, "se_split", ["s_len"], progress=False, has_gpu=False)
    assert report.status == "succeeded"
    assert report.plan["spark"]["tasks"] == {"1/a": 9}  # grouped by bucket: 2
    lr = local.backfill("se_split", ["s_len"], isolation="inline", progress=False, has_gpu=False)
    assert _facts(on_spark, "se_split", ["s_len"])["values"] == _facts(local, "se_split", ["s_len"])["values"]
    assert lr.rows == report.rows == 9


def test_pandas_udf_stage_matches_the_local_engine(spark, tmp_path, pages):
    from omni_iceberg.backfill.planner import definitions_of
    from omni_iceberg.features.udf import get_udf
    from spark_udfs import pandas_stage
    from spark_udfs.engine import read_unit, table_name

    extra = ["alpha POISON record"] + [f"skip record {i}" for i in range(3)] + [f"plain record {i}" for i in range(9)]
    on_spark, local = Omni(config=spark.config), Omni(home=tmp_path / "local")
    for o in (on_spark, local):
        _fill(o, "se_pandas", pages[:6], pages[6:10], tmp_path, extra_a=extra)
        o.register_features("se_pandas", _own([sp_words, sp_len]))
    lr = local.backfill("se_pandas", ["sp_words", "sp_len"], isolation="inline", progress=False, max_error_ratio=None)
    sr = _on_spark(on_spark, spark.session, "se_pandas", ["sp_words", "sp_len"], progress=False, has_gpu=False)
    assert sr.status == lr.status == "succeeded" and sr.run_id == lr.run_id
    assert set(sr.plan["spark"]["stages"].values()) == {"pandas_udf (CPU)"}
    assert (sr.rows, sr.errors) == (lr.rows, lr.errors) and sr.errors == 1  # the poisoned record, isolated
    assert _units(sr) == _units(lr) and any(u[5] for u in _units(sr))  # sp_len's filter skipped pages
    columns = ["RawData.raw_data", "sp_words", "sp_len"]
    s_facts, l_facts = _facts(on_spark, "se_pandas", columns), _facts(local, "se_pandas", columns)
    assert s_facts == l_facts and len(s_facts["values"]) == 10 + len(extra)
    assert {r["sp_len"] for r in s_facts["values"] if r["RawData.raw_data"].startswith("skip")} == {None}

    # the stage is a real pandas UDF: one Arrow-evaluated Python node for both features, no mapInArrow
    state = on_spark.state("se_pandas")
    defs = [d for d in definitions_of(state).values() if d.name in ("sp_words", "sp_len")]
    frame = read_unit(spark.session, "omni", state, ["RawData.raw_data"], "a")
    tagged = pandas_stage.run_stage(frame, defs, {d.name: get_udf(d.udf) for d in defs}, ["RawData.raw_data"])
    plan_text = tagged._jdf.queryExecution().executedPlan().toString()
    assert plan_text.count("ArrowEvalPython") == 1 and "MapInArrow" not in plan_text, plan_text

    # Spark's SQL executor, as the explore planner reaches it: through the registry, by name
    from omni_iceberg.engines import sql_executor
    from spark_udfs import plugin

    plugin.register()  # what the omni_iceberg.engines entry point does in an installed package
    got = sql_executor("spark")(on_spark, "SELECT count(*) AS n FROM " + table_name(
        "omni", state.physical_table(state.feature("sp_words").table_key).identifier))
    assert got.to_pylist() == [{"n": 10 + len(extra) - 1}]  # every record but the poisoned one has a value


PY_FILE_FEATURES = '''
from omni_iceberg.features import feature
from omni_iceberg.features.placement import planned_device


@feature(outputs={"py_words": "long"}, inputs=["RawData.raw_data"], name="py_words")
def py_words(raw_data):
    return len(raw_data.split())


@feature(outputs={"py_chars": "long"}, inputs=["RawData.raw_data"], name="py_chars", form="pandas")
def py_chars(raw_data):
    return raw_data.str.len()
'''


def test_features_from_a_py_file_run_on_spark(spark, tmp_path):
    """A user's .py file is imported under a generated module name that executors cannot import:
    its code must travel by value in PySpark's own (vendored) cloudpickle."""
    from spark_udfs.arrow_stage import ship_user_modules
    path = tmp_path / "user_code" / "my_py_features.py"  # not on sys.path, so not on the workers'
    path.parent.mkdir()
    path.write_text(PY_FILE_FEATURES)
    records = [f"user record {i} " + "word " * i for i in range(9)]
    on_spark, local = Omni(config=spark.config), Omni(home=tmp_path / "local")
    for o in (on_spark, local):
        _fill(o, "se_pyfile", [], [], tmp_path, extra_a=records[:5], extra_b=records[5:])
        o.register_features("se_pyfile", [str(path)])
    binding = on_spark.state("se_pyfile").feature("py_words")
    assert json.loads(binding.definition)["source"]["module"] in ship_user_modules()
    for features in (["py_words"], ["py_chars"]):  # a mapInArrow stage, then a pandas_udf stage
        sr = _on_spark(on_spark, spark.session, "se_pyfile", features, progress=False, has_gpu=False)
        lr = local.backfill("se_pyfile", features, isolation="inline", progress=False)
        assert sr.status == lr.status == "succeeded" and (sr.rows, sr.errors) == (lr.rows, lr.errors) == (9, 0)
    columns = [ID_COLUMN, "RawData.raw_data", "py_words", "py_chars"]
    got = on_spark.read("se_pyfile", columns=columns).sort_by(ID_COLUMN).to_pylist()
    assert sorted((r["py_words"], r["py_chars"]) for r in got) == sorted((len(t.split()), len(t)) for t in records)
    assert got == local.read("se_pyfile", columns=columns).sort_by(ID_COLUMN).to_pylist()


def test_reuse_error_budget_and_retry_behave_as_on_the_local_engine(spark, tmp_path, pages, monkeypatch):
    omni = Omni(config=spark.config)
    for name, batch, chunk in (("se_web", "a", pages[24:36]), ("se_mirror", "m", pages[30:42])):  # 6 shared
        omni.create_table(name)
        omni.register_features(name, _own([U.t_parse, U.t_len]))
        omni.submit(name, [str(p) for p in chunk], batch=batch, progress=False)
    assert _on_spark(omni, spark.session, "se_web", ["t_len"]).reused == 0
    report = _on_spark(omni, spark.session, "se_mirror", ["t_len"])
    assert report.reused == 2 * 6 and report.rows == 2 * 12
    web = dict(zip(*omni.read("se_web", columns=[ID_COLUMN, "t_len"]).to_pydict().values()))
    mirror = omni.read("se_mirror", columns=[ID_COLUMN, "t_len"]).to_pylist()
    assert sum(r[ID_COLUMN] in web for r in mirror) == 6 and None not in [r["t_len"] for r in mirror]
    assert all(r["t_len"] == web[r[ID_COLUMN]] for r in mirror if r[ID_COLUMN] in web)

    marker = tmp_path / "busy"
    marker.write_text("x")
    # Spark's Python workers see the function environment, not this process's
    monkeypatch.setitem(spark.session.sparkContext.environment, "OMNI_TEST_FLAKY_MARKER", str(marker))
    omni.create_table("se_flaky")
    src = tmp_path / "flaky.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"r{i}" + (" POISON" if i % 10 == 0 else "")}) + "\n"
                           for i in range(50)))
    omni.submit("se_flaky", [str(src)], batch="b", progress=False)
    omni.register_features("se_flaky", _own([U.t_flaky]))
    before = omni.state("se_flaky").version
    with pytest.raises(ErrorBudgetExceededError, match=r"5 of 50 records"):
        _on_spark(omni, spark.session, "se_flaky", ["t_flaky"], max_error_ratio=0.05)
    assert omni.state("se_flaky").version == before
    table = omni.catalog.load_table(omni.state("se_flaky").physical_table(
        omni.state("se_flaky").feature("t_flaky").table_key).identifier)
    assert not [r for r in table.metadata.refs if r.startswith("omni-stage-")]  # breach: the work is dropped
    first = _on_spark(omni, spark.session, "se_flaky", ["t_flaky"], max_error_ratio=0.2)
    assert (first.rows, first.errors) == (45, 5)
    assert {e["exception_class"] for e in omni.errors("se_flaky").to_pylist()} == {"TimeoutError"}
    on_spark = {"engine": "spark", "engine_options": {"spark": spark.session}}
    assert run_retry_failed(omni.context, "se_flaky", ["t_flaky"], ["ValueError"], **on_spark).status == "nothing to do"
    marker.unlink()
    retry = run_retry_failed(omni.context, "se_flaky", ["t_flaky"], ["TimeoutError"], **on_spark)
    assert (retry.rows, retry.errors) == (5, 0) and retry.run_id.startswith("rt-")
    values = omni.read("se_flaky", columns=["RawData", "t_flaky"]).to_pylist()
    assert all(r["t_flaky"] == len(r["RawData"]["raw_data"]) for r in values)


def test_lost_commit_race_rebases_the_same_files_without_recomputing(spark, tmp_path, pages, monkeypatch):
    from catalog_ext.physical import StagedWrite
    omni = Omni(config=spark.config)
    _fill(omni, "se_race", pages[42:46], pages[46:48], tmp_path)
    omni.register_features("se_race", _own([U.t_parse, U.t_len]))
    rival = Omni(config=spark.config)  # another writer, its own store
    tracker = spark.session.sparkContext.statusTracker()
    seen: dict = {"rebases": 0}
    real_commit, real_rebase = omni.store.commit, StagedWrite.rebase

    def racing_commit(*args, **kwargs):
        if "files" not in seen:
            seen["files"] = {w.identifier: {f.file_path for f in w.data_files} for w in kwargs["staged"]}
            seen["jobs"] = max(tracker.getJobIdsForGroup(), default=-1)
            assert rival.backfill("se_race", ["t_len"], ["b"], isolation="inline").status == "succeeded"
        return real_commit(*args, **kwargs)

    def counting_rebase(self, onto):
        seen["rebases"] += 1
        return real_rebase(self, onto)

    monkeypatch.setattr(omni.store, "commit", racing_commit)
    monkeypatch.setattr(StagedWrite, "rebase", counting_rebase)
    report = _on_spark(omni, spark.session, "se_race", ["t_len"], ["a"])
    assert report.status == "succeeded" and seen["rebases"] == 2  # both tables moved under us
    assert max(tracker.getJobIdsForGroup(), default=-1) == seen["jobs"]  # no Spark job since: nothing recomputed
    state = omni.state("se_race")
    assert state.computed_batches("t_len", state.feature("t_len").version) == {"a", "b"}
    for ident, files in seen["files"].items():
        pinned = next(t for t in state.tables if t.identifier == ident)
        table = omni.catalog.load_table(ident)
        live = {t.file.file_path for t in table.scan(snapshot_id=pinned.snapshot_id).plan_files()}
        assert files and files <= live  # the very files Spark wrote, re-committed on the winner's snapshot
    values = omni.read("se_race", columns=["t_len"]).column("t_len").to_pylist()
    assert len(values) == 6 and None not in values
    assert omni.verify_index("se_race").ok  # the rebased files stay indexed under the visible runs


def test_udf_bugs_and_crashes_end_as_on_the_local_engine(spark, tmp_path):
    omni = Omni(config=spark.config)
    omni.create_table("se_bugs")
    src = tmp_path / "bugs.jsonl"
    src.write_text(json.dumps({"raw_data": "fine"}) + "\n" + json.dumps({"raw_data": "SEGV here"}) + "\n")
    omni.submit("se_bugs", [str(src)], batch="b", progress=False)
    omni.register_features("se_bugs", _own([U.t_badtype, U.t_segv]))
    before = omni.state("se_bugs")
    with pytest.raises(FeatureDefinitionError, match=r"t_badtype@[\w-]+: output 't_badtype' must be double"):
        _on_spark(omni, spark.session, "se_bugs", ["t_badtype"])
    with pytest.raises(WorkerCrashedError, match=r"Spark Python worker .* died .* rerun the same command"):
        _on_spark(omni, spark.session, "se_bugs", ["t_segv"])
    assert omni.state("se_bugs") == before
    runs = [r for r in omni.catalog.load_table("omni_sys.runs").scan().to_arrow().to_pylist()
            if r["logical_table"] == "aidata.se_bugs"]
    assert sorted(r["status"] for r in runs) == ["failed", "failed"]


def test_misconfiguration_gives_one_clear_error(spark, tmp_path, monkeypatch):
    from tests.services import free_port
    from spark_udfs.engine import SparkBackfill

    omni = Omni(config=spark.config)
    port = free_port()
    with pytest.raises(ConfigError, match=rf"Spark master spark://127.0.0.1:{port} is unreachable .* --spark-master"):
        _ = SparkBackfill(omni, master=f"spark://127.0.0.1:{port}").spark
    monkeypatch.setenv("OMNI_MAVEN_REPO", f"http://127.0.0.1:{free_port()}/maven2")
    with pytest.raises(ConfigError, match=r"jar org.apache.iceberg:iceberg-spark-runtime.* is missing .*`python -m "
                                          r"spark_udfs.jars`"):
        _ = SparkBackfill(omni, master="local[1]", jar_cache_dir=tmp_path / "no-jars").spark
    with pytest.raises(ConfigError, match="SQLite"):
        _ = SparkBackfill(Omni(home=tmp_path / "embedded"), master="local[1]").spark

    elsewhere = Omni(config=dataclasses.replace(spark.config, catalog_name="elsewhere"))
    with pytest.raises(ConfigError, match=r"no Iceberg catalog named 'elsewhere' .* both sides must use the same"):
        _ = SparkBackfill(elsewhere, spark=spark.session).spark
    moved = spark.config.catalog_uri.rsplit("/", 1)[0] + "/other_db"
    with pytest.raises(ConfigError, match=r"catalog 'omni' points at 'jdbc:postgresql://.*/omni' but omni's "
                                          r"catalog is 'jdbc:postgresql://.*/other_db'"):
        _ = SparkBackfill(Omni(config=dataclasses.replace(spark.config, catalog_uri=moved)), spark=spark.session).spark
    dead_port = free_port()  # nothing listens there: the catalog database is unreachable
    settings = {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "jdbc", ".jdbc.user": "postgres",
                ".uri": f"jdbc:postgresql://127.0.0.1:{dead_port}/omni", ".warehouse": spark.config.warehouse}
    for key, value in settings.items():
        spark.session.conf.set("spark.sql.catalog.broken" + key, value)
    try:
        broken = Omni(config=dataclasses.replace(
            spark.config, catalog_name="broken", catalog_uri=f"postgresql+psycopg://postgres@127.0.0.1:{dead_port}/omni"))
        with pytest.raises(ConfigError, match=r"Spark cannot open Iceberg catalog 'broken' .* reachable"):
            _ = SparkBackfill(broken, spark=spark.session).spark
    finally:
        for key in settings:
            spark.session.conf.unset("spark.sql.catalog.broken" + key)


# ---- a real standalone cluster ------------------------------------------------------------------------
DRIVER = r"""
import json, sys
from omni_iceberg.api import Omni
from catalog_ext.config import OmniConfig
from omni_iceberg.backfill.choose import run_backfill
import tests.test_spark_engine  # noqa: F401 - registers the test UDFs
args = json.loads(sys.argv[1])
omni = Omni(config=OmniConfig.resolve(catalog=args["catalog"], warehouse=args["warehouse"], home=args["home"],
                                      catalog_name="omni"))
report = run_backfill(omni.context, args["table"], args["features"], engine="spark", spark_master=args["master"],
                      engine_options={"jar_cache_dir": args["jars"], "overrides": args["overrides"]}, progress=False)
print("REPORT " + json.dumps(report.to_dict(), default=str))
"""


def test_standalone_cluster_kill_resume_task_retry_and_gpu_profile(pg_server, tmp_path, pages):
    from catalog_ext.config import OmniConfig
    from tests.services.spark_cluster import SparkTestCluster

    config = OmniConfig.resolve(catalog=pg_server.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri(),
                                home=tmp_path / "home", catalog_name="omni")
    on_cluster, local = Omni(config=config), Omni(home=tmp_path / "local")
    features = ["s_len", "t_fragile", "t_len", "s_model"]
    for o in (on_cluster, local):
        _fill(o, "se_cluster", pages[48:54], pages[54:60], tmp_path, extra_a=["alpha POISON doc", "plain one"],
              extra_b=["HOLD here", "KILL here", "fine"])
        o.register_features("se_cluster", _own([U.t_parse, U.t_len, U.t_fragile, s_len, SModel]))
    before = on_cluster.state("se_cluster").version
    hold, log = tmp_path / "hold", tmp_path / "events.jsonl"
    hold.write_text("x")
    args = {"catalog": config.catalog_uri, "warehouse": config.warehouse, "home": str(config.home),
            "jars": str(JARS), "table": "se_cluster", "features": features,
            "overrides": {"spark.executor.memory": "512m", "spark.cores.max": "2",
                          "spark.executor.resource.gpu.amount": "1",
                          "spark.executorEnv.OMNI_TEST_KILL_FIRST_ATTEMPT": "1",
                          "spark.executorEnv.OMNI_TEST_HOLD_MARKER": str(hold),
                          "spark.executorEnv.OMNI_TEST_MODEL_LOG": str(log)}}
    with SparkTestCluster(tmp_path / "spark", fake_gpus=1) as cluster:
        args["master"] = cluster.master_url
        command = [sys.executable, "-c", DRIVER, json.dumps(args)]
        t0 = time.perf_counter()
        first = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        parse_table = on_cluster.catalog.load_table(
            on_cluster.state("se_cluster").physical_table(on_cluster.state("se_cluster").feature("t_parse").table_key
                                                          ).identifier)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:  # wait for stage 1's checkpoints of batch a
            parse_table.refresh()
            heads = [parse_table.snapshot_by_id(r.snapshot_id) for n, r in parse_table.metadata.refs.items()
                     if n.startswith("omni-stage-")]
            if any(h.summary.additional_properties.get("omni.unit") == "t_parse/a" for h in heads):
                break
            time.sleep(0.3)
        else:
            first.kill()
            _, err = first.communicate()
            pytest.fail(f"batch a was never checkpointed (rc {first.returncode}):\n{err[-4000:]}\n{cluster.logs()}")
        first.kill()  # SIGKILL the driver while it computes batch b (held by the HOLD record)
        first.communicate()
        hold.unlink()
        assert on_cluster.state("se_cluster").version == before  # nothing committed
        t1 = time.perf_counter()
        second = subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True, timeout=600)
        t2 = time.perf_counter()
        assert second.returncode == 0, second.stderr[-6000:] + cluster.logs()
    report = json.loads(next(line for line in second.stdout.splitlines() if line.startswith("REPORT "))[7:])
    print(f"\ncluster: killed run {t1 - t0:.1f} s, resumed run {t2 - t1:.1f} s")

    assert report["status"] == "succeeded" and report["resumed_units"] == 3  # s_len, t_fragile, t_parse of a
    assert report["logical_version"] == before + 1
    assert report["plan"]["spark"]["master"] == args["master"]
    assert "resource profile" in report["plan"]["spark"]["stages"]["2"]  # s_model's GPU stage

    t0 = time.perf_counter()
    lr = local.backfill("se_cluster", features, isolation="inline", progress=False, has_gpu=False,
                        max_error_ratio=None)
    print(f"cluster twin on the local engine: {time.perf_counter() - t0:.1f} s")
    assert report["run_id"] == lr.run_id and (report["rows"], report["errors"]) == (lr.rows, lr.errors)
    columns = ["ProcessedData.parsed_text", "s_len", "t_fragile", "t_len", "s_model"]
    c_facts, l_facts = _facts(on_cluster, "se_cluster", columns), _facts(local, "se_cluster", columns)
    assert c_facts["values"] == l_facts["values"] and len(c_facts["values"]) == 17
    assert c_facts["errors"] == l_facts["errors"] and len(c_facts["errors"]) == 1  # recorded by the killed run
    assert c_facts["lineage"] == l_facts["lineage"]

    state = on_cluster.state("se_cluster")
    for f in features:  # the retried task wrote nothing twice
        table = on_cluster.catalog.load_table(state.physical_table(state.feature(f).table_key).identifier)
        ids = table.scan(snapshot_id=state.physical_table(state.feature(f).table_key).snapshot_id,
                         selected_fields=(ID_COLUMN,)).to_arrow().column(0).to_pylist()
        assert len(ids) == len(set(ids)) == 17 - (1 if f == "t_fragile" else 0), f

    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e for e in events if e["event"] == "kill"]  # first attempts died and were retried
    setups = [e["pid"] for e in events if e["event"] == "setup"]
    calls = [e for e in events if e["event"] == "call"]
    assert len(setups) == len(set(setups)) and len(calls) > len(setups)  # one model load per worker process
    assert max(c["rows"] for c in calls) <= SModel.definition.batch_size
    assert {c["gpu"] for c in calls} == {"0"}  # the address Spark's resource profile gave the task
    assert {c["planned"] for c in calls} == {"cuda"}  # the plan's GPU route reached the UDF


def test_pandas_udf_gpu_stage_gets_its_gpu_from_a_resource_profile(pg_server, tmp_path, pages):
    """Two GPUs on the executor, one per task, two tasks per unit and two units: Python workers
    are reused across tasks holding different GPUs, and each task sees exactly its own."""
    from catalog_ext.config import OmniConfig
    from tests.services.spark_cluster import SparkTestCluster

    config = OmniConfig.resolve(catalog=pg_server.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri(),
                                home=tmp_path / "home", catalog_name="omni")
    on_cluster, local = Omni(config=config), Omni(home=tmp_path / "local")
    for o in (on_cluster, local):
        _fill(o, "se_pandas_gpu", pages[60:63], pages[63:66], tmp_path)
        # parallelism 2: each unit's 3 rows run as 2 tasks, each holding one of the executor's 2 GPUs
        o.register_features("se_pandas_gpu", [d.model_copy(update={"parallelism": 2}) for d in _own([sp_gpu])])
    log = tmp_path / "events.jsonl"
    args = {"catalog": config.catalog_uri, "warehouse": config.warehouse, "home": str(config.home),
            "jars": str(JARS), "table": "se_pandas_gpu", "features": ["sp_gpu"],
            "overrides": {"spark.executor.memory": "512m", "spark.cores.max": "2",
                          "spark.executor.resource.gpu.amount": "2",
                          "spark.executorEnv.OMNI_TEST_MODEL_LOG": str(log)}}
    with SparkTestCluster(tmp_path / "spark", fake_gpus=2) as cluster:
        args["master"] = cluster.master_url
        done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(args)], cwd=REPO, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-6000:] + cluster.logs()
        # omni sql on the same cluster (#38): --spark-master, not the hard-wired local[2]
        sql = subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--catalog", config.catalog_uri,
                              "--warehouse", config.warehouse, "--home", str(config.home), "sql",
                              "SELECT sum(sp_gpu) AS s, count(*) AS n FROM se_pandas_gpu", "--engine", "spark",
                              "--spark-master", cluster.master_url, "--format", "json"],
                             cwd=REPO, capture_output=True, text=True, timeout=600)
        assert sql.returncode == 0, sql.stderr[-6000:] + cluster.logs()
        apps = cluster.cluster.log_tail("master", 1 << 20)  # the whole master log: every application
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))[7:])
    assert report["status"] == "succeeded"
    assert set(report["plan"]["spark"]["stages"].values()) == {
        "GPU route: pandas_udf, 1 GPU per task through a stage-level resource profile"}
    lr = local.backfill("se_pandas_gpu", ["sp_gpu"], isolation="inline", progress=False, has_gpu=False)
    c_facts, l_facts = _facts(on_cluster, "se_pandas_gpu", ["sp_gpu"]), _facts(local, "se_pandas_gpu", ["sp_gpu"])
    assert c_facts["values"] == l_facts["values"] and len(c_facts["values"]) == 6
    expected = local.query("SELECT sum(sp_gpu) AS s, count(*) AS n FROM se_pandas_gpu").to_pylist()
    assert [json.loads(line) for line in sql.stdout.splitlines() if line.strip()] == expected
    assert "omni-sql" in apps  # the query's application ran on the standalone master
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [c for c in calls if c["event"] == "pandas-call"]
    assert calls and all(c["gpu"] == c["task"] for c in calls), calls  # exactly the task's GPU, every task
    assert {c["task"] for c in calls} <= {"0", "1"} and all(c["task"] for c in calls)
    assert {c["planned"] for c in calls} == {"cuda"}  # the plan's GPU route reached the UDF
    print(f"\nGPU tasks: {sorted((c['pid'], c['task']) for c in calls)}")
    assert max(c["rows"] for c in calls) <= sp_gpu.definition.batch_size
