"""Re-bucketing (governance/rebucket.py): the family's id-bucket count changes by a rewrite.

Every reader answers as before, at the new version and at old ones; every file of the
new version holds only rows of its bucket under the new count; writers of the old
count are refused instead of mixing counts; a bad count is a clear error.
Embedded SQLite catalog, real Parquet.
"""

from __future__ import annotations

import json

import pytest

from catalog_ext.errors import CommitConflictError
from catalog_ext.iceberg_io import bucket_position, read_data_files, spec_bucket_count
from governance.rebucket import RebucketError, plan_rebucket, rebucket
from omni_iceberg.api import Omni
from omni_iceberg.cli import main as cli_main
from omni_iceberg.index.lookup import lookup_rows
from omni_iceberg.index.scan import buckets_of
from tests import feature_udfs as U
from tests.pages import pages_jsonl as _jsonl

QUERY = ("SELECT _ai_append_name_ AS b, count(*) AS n, sum(t_len) AS words, round(sum(t_digits), 6) AS digits "
         "FROM {t} GROUP BY 1 ORDER BY 1")
COLUMNS = ["_ai_unique_id_", "_ai_append_name_", "t_len", "t_digits", "RawData.raw_data"]


@pytest.fixture
def omni(omni_home, tmp_path):
    """Two tables with the same rows and features: ``web`` is re-bucketed, ``ref`` never is."""
    o = Omni(config=omni_home)
    for name in ("web", "ref"):
        o.create_table(name)
        o.register_features(name, [U.t_parse, U.t_len, U.t_digits])
        for tag, n in (("a", 30), ("b", 40)):
            o.submit(name, [str(_jsonl(tmp_path, tag, n))], batch=tag, progress=False)
        o.backfill(name, ["t_len", "t_digits"], isolation="inline", progress=False)
    return o


def _rows(omni: Omni, name: str, as_of: int | None = None):
    return sorted(omni.read(name, columns=COLUMNS, as_of=as_of).to_pylist(), key=lambda r: r["_ai_unique_id_"])


def _same_as_ref(omni: Omni) -> None:
    rows = _rows(omni, "web")
    assert rows and all(r["t_len"] is not None and r["t_digits"] is not None for r in rows)
    assert rows == _rows(omni, "ref")
    assert omni.query(QUERY.format(t="web")).to_pylist() == omni.query(QUERY.format(t="ref")).to_pylist()
    ids = [r["_ai_unique_id_"] for r in _rows(omni, "ref")]
    picked = ids[::7] + ["0" * 32]
    want = omni.get("ref", picked, columns=["t_len", "t_digits"]).to_pylist()
    assert omni.get("web", picked, columns=["t_len", "t_digits"]).to_pylist() == want  # through the index
    assert _scanned(omni, "web", picked, ["t_len", "t_digits"]) == want  # the bucket-pruned scan trusts the count


def _scanned(omni: Omni, name: str, ids: list[str], columns: list[str], as_of: int | None = None) -> list[dict]:
    """Rows by id through the bucket-pruned scan alone (what a lagging index falls back to)."""
    state = omni.state(name, as_of)
    rows = lookup_rows(omni.catalog, state, omni.store.open_index(state), ids, columns, force_scan=True).rows
    return rows.to_pylist()


def _files_agree_with_count(omni: Omni, name: str) -> int:
    """Every live file of every table is labelled bucket(N) of the version's N and holds only its bucket's ids."""
    state = omni.state(name)
    n = state.table.bucket_count
    files = 0
    for t in state.tables:
        ice = omni.catalog.load_table(t.identifier)
        specs = ice.metadata.specs()
        for task in ice.scan(snapshot_id=t.snapshot_id).plan_files():
            spec = specs[task.file.spec_id]
            assert spec_bucket_count(spec) == n, (t.identifier, str(spec))
            bucket = task.file.partition[bucket_position(spec)]
            got = read_data_files(ice, [task.file], ("_ai_unique_id_",)).column(0).to_pylist()
            assert buckets_of(got, n) == {bucket}, (t.identifier, task.file.file_path)
            files += 1
    return files


@pytest.mark.parametrize("count", [4, 32])
def test_rebucket_rewrites_every_table_and_every_reader_answers_the_same(omni, count):
    before = omni.state("web")
    assert before.table.bucket_count == 16
    dry = omni.rebucket("web", buckets=count, dry_run=True)
    assert dry["plan"]["target"] == count and omni.state("web").version == before.version  # nothing changed
    assert f"16 -> {count}" in dry["describe"]

    report = omni.rebucket("web", buckets=count)
    state = omni.state("web")
    assert report["logical_version"] == state.version == before.version + 1
    assert state.table.bucket_count == count
    assert state.operation == "rebucket"
    assert _files_agree_with_count(omni, "web") <= (count if count < 16 else 2 * count) * len(state.tables)
    _same_as_ref(omni)
    assert omni.verify_index("web").ok
    # the old version keeps its layout, its count and its answers
    old = omni.state("web", as_of=before.version)
    assert old.table.bucket_count == 16
    assert _rows(omni, "web", as_of=before.version) == _rows(omni, "ref")
    ids = [r["_ai_unique_id_"] for r in _rows(omni, "ref")][:5]
    assert _scanned(omni, "web", ids, ["t_len"], as_of=before.version) == omni.get("ref", ids, columns=["t_len"]).to_pylist()
    assert any(e.operation == "rebucket" for e in omni.log("web"))


def test_writes_after_a_rebucket_use_the_new_count_and_a_feature_added_later_too(omni, tmp_path):
    omni.rebucket("web", buckets=4)
    omni.rebucket("ref", buckets=4)
    for name in ("web", "ref"):
        omni.submit(name, [str(_jsonl(tmp_path, "c", 25))], batch="c", progress=False)
        omni.register_features(name, [U.t_lang])
        omni.backfill(name, ["t_len", "t_digits", "t_lang"], isolation="inline", progress=False)
    _files_agree_with_count(omni, "web")
    _same_as_ref(omni)
    # back to 16: the table reuses its first spec, and still agrees
    omni.rebucket("web", buckets=16)
    assert omni.state("web").table.bucket_count == 16
    _files_agree_with_count(omni, "web")
    _same_as_ref(omni)


def test_a_writer_of_the_old_count_is_refused_and_commits_nothing(omni, tmp_path):
    """A submit staged under 16 buckets that commits after the table went to 4 fails cleanly."""
    store = omni.store
    state = store.load("aidata", "web")
    writer = store.staged_write(state, state.base_table.identifier, state.base_table.snapshot_id, "late-writer",
                                {"omni.operation": "test"})
    base = omni.catalog.load_table(state.base_table.identifier)
    rows = base.scan(snapshot_id=state.base_table.snapshot_id, limit=3).to_arrow()
    writer.write(rows.cast(base.schema().as_arrow()))
    writer.stage()
    omni.rebucket("web", buckets=4)
    after = omni.state("web")
    from catalog_ext.updates import PinSnapshot

    with pytest.raises(CommitConflictError, match="re-bucketed from 16 to 4"):
        store.commit("aidata", "web",
                     lambda latest: (PinSnapshot(latest.base_table.key, writer.staged_snapshot_id,
                                                 latest.base_table.snapshot_id),),
                     operation="test", staged=[writer])
    assert omni.state("web").version == after.version
    _same_as_ref(omni)


def test_bad_counts_are_clear_errors(omni, capsys):
    with pytest.raises(RebucketError, match="neither divides nor is a multiple.*Use one of: .*32"):
        plan_rebucket(omni.store, "aidata.web", 12)
    with pytest.raises(RebucketError, match="counts go from 1 to 1024"):
        plan_rebucket(omni.store, "aidata.web", 0)
    assert cli_main(["rebucket", "web", "--buckets", "12"]) != 0
    assert "neither divides" in capsys.readouterr().err


def test_the_count_follows_the_data_size(omni):
    """A few KB in 16 buckets: the plan shrinks to 1; with a tiny target it would grow."""
    plan = plan_rebucket(omni.store, "aidata.web")
    assert plan.due and plan.target == 1 and "small files" in plan.reason
    grow = plan_rebucket(omni.store, "aidata.web", target_bucket_bytes=100)
    assert grow.due and grow.target > 16
    report = rebucket(omni.store, "aidata.web")
    assert omni.state("web").table.bucket_count == 1
    assert max(report["files_after"].values()) == 1  # one file per table
    _same_as_ref(omni)
    again = plan_rebucket(omni.store, "aidata.web")
    assert not again.due and again.target == 1


def test_cli_dry_run_json_and_maintain_runs_it_when_due(omni, capsys):
    assert cli_main(["rebucket", "web", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["target"] == 1 and omni.state("web").table.bucket_count == 16
    report = omni.maintain("web")
    assert any(t.startswith("re-bucketing") for t in report.tasks)
    assert omni.state("web").table.bucket_count == 1
    _same_as_ref(omni)


# ---- real engines: Spark writes and both engines read a re-bucketed family ----------------------
def test_spark_and_trino_after_a_rebucket_and_a_spark_backfill_writes_the_new_count(spark, trino, tmp_path):
    from omni_iceberg.backfill.choose import run_backfill

    name = "rb_engines"
    omni = Omni(config=spark.config)
    omni.create_table(name)
    omni.register_features(name, [U.t_parse, U.t_len, U.t_digits])
    omni.submit(name, [str(_jsonl(tmp_path, "a", 40))], batch="a", progress=False)
    omni.backfill(name, ["t_len", "t_digits"], isolation="inline", progress=False)
    full = (f"SELECT _ai_unique_id_, _ai_append_name_, t_len, t_digits FROM omni.aidata.{name} "
            "ORDER BY _ai_unique_id_")
    before = [tuple(r) for r in spark.sql(full)]
    assert len(before) == 40 and all(v is not None for r in before for v in r)

    omni.rebucket(name, buckets=4)
    assert [tuple(r) for r in spark.sql(full)] == before
    assert [tuple(r) for r in trino.query(full)] == before
    # a new batch computed by the Spark engine: Spark writes it with the family's spec (output-spec-id),
    # although the table's default spec may be any
    omni.submit(name, [str(_jsonl(tmp_path, "b", 30))], batch="b", progress=False)
    run_backfill(omni.context, name, ["t_len", "t_digits"], engine="spark", engine_options={"spark": spark.session},
                 progress=False, has_gpu=False)
    assert _files_agree_with_count(omni, name) > 0
    want = [tuple(d.values()) for d in omni.query(full.replace("omni.aidata.", "")).to_pylist()]
    assert len(want) == 70 and all(v is not None for r in want for v in r)
    assert [tuple(r) for r in spark.sql(full)] == want
    assert [tuple(r) for r in trino.query(full)] == want
    # the family still joins bucket by bucket: no shuffle between two of its tables
    state = omni.state(name)
    a, b = (state.physical_table(state.feature(f).table_key) for f in ("t_len", "t_digits"))
    join = (f"SELECT count(*) FROM omni.{a.identifier} x JOIN omni.{b.identifier} y "
            "ON x._ai_unique_id_ = y._ai_unique_id_ AND x._ai_append_name_ = y._ai_append_name_")
    with_spj = {"spark.sql.autoBroadcastJoinThreshold": "-1"}
    old = {k: spark.session.conf.get(k) for k in with_spj}
    try:
        for k, v in with_spj.items():
            spark.session.conf.set(k, v)
        plan = spark.session.sql("EXPLAIN " + join).collect()[0][0]
        assert "SortMergeJoin" in plan and "Exchange hashpartitioning" not in plan, plan
        assert spark.sql(join)[0][0] == 70
    finally:
        for k, v in old.items():
            spark.session.conf.set(k, v)
