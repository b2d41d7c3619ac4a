"""Re-bucketing on Spark (spark_udfs/rebucket.py): the same plan and ONE logical commit, Spark's writer.

Real Spark with the official Iceberg runtime on the PostgreSQL catalog (the ``spark``
fixture); the engine choice itself is also checked on the embedded catalog, where
``auto`` must stay local and say why.
"""

from __future__ import annotations

import pytest

from omni_iceberg.api import Omni
from tests.pages import pages_jsonl as _jsonl
from tests.pages import small_family as _family
from tests.pages import sorted_rows as _rows


def _buckets_of_files(omni: Omni, name: str) -> dict[str, set[tuple[int, int]]]:
    """Per physical table: the (bucket count, bucket) of every live file at the pinned snapshot."""
    from catalog_ext.iceberg_io import bucket_position

    out = {}
    for t in omni.state(name).tables:
        if t.snapshot_id is None:
            continue
        ice = omni.catalog.load_table(t.identifier)
        specs = ice.metadata.specs()
        found = set()
        for task in ice.scan(snapshot_id=t.snapshot_id).plan_files():
            spec = specs[task.file.spec_id]
            at = bucket_position(spec)
            found.add((spec.fields[at].transform.num_buckets, task.file.partition[at]))
        out[t.key] = found
    return out


def test_auto_stays_local_where_spark_cannot_run_and_says_why(omni_home, tmp_path, monkeypatch):
    omni = Omni(config=omni_home)
    _family(omni, tmp_path, "web")
    current = omni.state("web").table.bucket_count
    plan = omni.rebucket("web", current * 2, dry_run=True, engine="auto")
    assert plan["engine"] == "local" and "below the Spark threshold" in plan["engine_reason"]
    monkeypatch.setenv("OMNI_SPARK_THRESHOLD_BYTES", "0")
    report = omni.rebucket("web", current * 2, engine="auto", progress=False)
    assert report["engine"] == "local" and "SQLite" in report["engine_reason"]
    assert omni.state("web").table.bucket_count == current * 2


@pytest.mark.spark
@pytest.mark.postgres
def test_spark_rebucket_rewrites_on_the_staging_branch_and_commits_once(spark, tmp_path):
    name = "rb_spark"
    omni = Omni(config=spark.config)
    _family(omni, tmp_path, name)
    state = omni.state(name)
    old, current = state.version, state.table.bucket_count
    target = current // 4 if current >= 4 else current * 2
    before_rows, before_buckets = _rows(omni, name), _buckets_of_files(omni, name)
    assert all(n == current for found in before_buckets.values() for n, _ in found)

    report = omni.rebucket(name, target, engine="spark", spark=spark.session, progress=False)
    assert report["engine"] == "spark" and report["engine_reason"] == "requested --engine spark"
    new = omni.state(name)
    assert report["logical_version"] == new.version == old + 1 and new.table.bucket_count == target
    assert new.operation == "rebucket"
    after = _buckets_of_files(omni, name)
    for key, found in after.items():
        assert found and all(n == target for n, _ in found), key  # every file in the new spec
        assert all(0 <= b < target for _, b in found), key
    # the same rows, from omni, the index and Spark's view; the old version reads its old layout
    assert _rows(omni, name) == before_rows
    assert _rows(omni, name, as_of=old) == before_rows and _buckets_of_files(omni, name) != before_buckets
    assert omni.verify_index(name).ok
    some = [r["_ai_unique_id_"] for r in before_rows[::5]]
    assert omni.get(name, some, columns=["t_len"]).column("t_len").to_pylist() == \
        [r["t_len"] for r in before_rows[::5]]
    assert omni.get(name, some, columns=["t_len"], as_of=old).column("t_len").to_pylist() == \
        [r["t_len"] for r in before_rows[::5]]
    spark_rows = spark.sql(f"SELECT _ai_unique_id_, t_len FROM omni.aidata.{name} ORDER BY _ai_unique_id_")
    assert spark_rows == [(r["_ai_unique_id_"], r["t_len"]) for r in before_rows]
    for t in new.tables:
        if t.snapshot_id is None or t.key not in before_buckets:
            continue
        table = omni.catalog.load_table(t.identifier)
        summary = table.snapshot_by_id(t.snapshot_id).summary.additional_properties
        assert summary.get("omni.engine") == "spark" and summary.get("omni.operation") == "rebucket"
        assert not [r for r in table.metadata.refs if r.startswith("omni-stage")]
    # a write after it lands in the new count's buckets
    omni.submit(name, [str(_jsonl(tmp_path, f"{name}-late", 6))], batch="late", progress=False)
    omni.backfill(name, ["t_len"], isolation="inline", progress=False)
    assert all(n == target for found in _buckets_of_files(omni, name).values() for n, _ in found)
