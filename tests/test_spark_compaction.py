"""Compaction on Spark (spark_udfs/compaction.py): the same plan and ONE logical commit, Spark's writer.

Real Spark with the official Iceberg runtime on the PostgreSQL catalog (the ``spark``
fixture); the engine choice itself is also checked on the embedded catalog, where
``auto`` must stay local and say why.
"""

from __future__ import annotations

from collections import Counter

import pytest

from omni_iceberg.api import Omni
from tests.pages import small_family
from tests.pages import sorted_rows as _rows


def _files(omni: Omni, name: str, as_of: int | None = None) -> dict[str, list[str]]:
    state = omni.state(name, as_of)
    return {t.key: sorted(task.file.file_path for task in omni.catalog.load_table(t.identifier)
                          .scan(snapshot_id=t.snapshot_id).plan_files())
            for t in state.tables if t.snapshot_id is not None}


def _bucket_dir(path: str) -> str:
    return path.rsplit("/", 2)[-2]  # .../data/_ai_id_bucket=3/file.parquet


def _small_batches(omni: Omni, tmp_path, name: str, batches: int = 5) -> None:
    small_family(omni, tmp_path, name, batches, records=12)


def test_auto_stays_local_where_spark_cannot_run_and_says_why(omni_home, tmp_path, monkeypatch):
    omni = Omni(config=omni_home)
    _small_batches(omni, tmp_path, "web", 3)
    plan = omni.compact("web", dry_run=True, engine="auto")
    assert plan["engine"] == "local" and "below the Spark threshold" in plan["engine_reason"]
    monkeypatch.setenv("OMNI_SPARK_THRESHOLD_BYTES", "0")  # big enough for Spark, but Spark cannot run here
    plan = omni.compact("web", dry_run=True, engine="auto")
    assert plan["engine"] == "local" and "SQLite" in plan["engine_reason"]
    assert plan["plan"]["bytes_to_rewrite"] > 0
    before = _rows(omni, "web")
    report = omni.compact("web", engine="auto", progress=False)
    assert report["engine"] == "local" and _rows(omni, "web") == before


def test_a_failed_spark_rewrite_commits_nothing_and_leaves_no_branch(omni_home, tmp_path, monkeypatch):
    """The Spark path's failure undo, without Spark: the rewrite dies after its branch exists."""
    import spark_udfs.compaction as SC

    omni = Omni(config=omni_home)
    _small_batches(omni, tmp_path, "web", 3)
    before_rows, version = _rows(omni, "web"), omni.state("web").version

    def dies_midway(spark, catalog_name, writer, snapshot_id, paths, properties):
        writer.ensure_branch()  # what a real rewrite does first
        raise RuntimeError("executor lost")

    monkeypatch.setattr(SC, "rewrite_partitions_on_spark", dies_midway)
    from governance.compaction import compact

    with pytest.raises(RuntimeError, match="executor lost"):
        compact(omni.store, "web", engine="spark", spark=lambda: object(), progress=False)
    assert omni.state("web").version == version and _rows(omni, "web") == before_rows
    for t in omni.state("web").tables:
        refs = omni.catalog.load_table(t.identifier).metadata.refs
        assert not [r for r in refs if r.startswith("omni-stage")], t.identifier


@pytest.mark.spark
@pytest.mark.postgres
def test_spark_compaction_rewrites_on_the_staging_branch_and_commits_once(spark, tmp_path):
    name = "cmp_spark"
    omni = Omni(config=spark.config)
    _small_batches(omni, tmp_path, name)
    before_rows, before_files = _rows(omni, name), _files(omni, name)
    old = omni.state(name).version
    assert all(len(f) > 1 for f in before_files.values())

    # the rows of a chosen partition are picked by a partition predicate Iceberg prunes with
    from spark_udfs.compaction import partition_predicate

    first = omni.state(name).tables[0]
    paths = before_files[first.key][:3]
    predicate = partition_predicate(omni.catalog.load_table(first.identifier), first.snapshot_id, paths, "omni")
    assert predicate.count("`omni`.system.bucket(") == len({_bucket_dir(p) for p in paths})

    plan = omni.compact(name, dry_run=True, engine="spark", spark=spark.session)
    assert plan["engine"] == "spark" and plan["logical_version"] == old  # a dry run changes nothing
    assert omni.state(name).version == old

    report = omni.compact(name, engine="spark", spark=spark.session, progress=False)
    assert report["engine"] == "spark" and report["engine_reason"] == "requested --engine spark"
    assert report["logical_version"] == old + 1  # ONE logical commit for every table
    after_files = _files(omni, name)
    for key, files in after_files.items():
        assert len(files) < len(before_files[key]), key
        # a partition the plan chose was rewritten whole; only partitions of one file keep theirs
        per_bucket = Counter(_bucket_dir(p) for p in before_files[key])
        assert all(per_bucket[_bucket_dir(p)] == 1 for p in set(files) & set(before_files[key])), key
        assert len({_bucket_dir(p) for p in files}) == len(files), key  # one file per partition now
    # the same rows, from omni, from the index and from Spark's view; the old version still reads its files
    assert _rows(omni, name) == before_rows
    assert _rows(omni, name, as_of=old) == before_rows and _files(omni, name, as_of=old) == before_files
    assert omni.verify_index(name).ok
    some = [r["_ai_unique_id_"] for r in before_rows[::7]]
    assert omni.get(name, some, columns=["t_len"]).column("t_len").to_pylist() == \
        [r["t_len"] for r in before_rows[::7]]
    spark_rows = spark.sql(f"SELECT _ai_unique_id_, t_len FROM omni.aidata.{name} ORDER BY _ai_unique_id_")
    assert spark_rows == [(r["_ai_unique_id_"], r["t_len"]) for r in before_rows]
    # Spark's snapshot on each table says who wrote it, and no staging branch is left behind
    state = omni.state(name)
    for t in state.tables:
        if t.key not in before_files:
            continue
        table = omni.catalog.load_table(t.identifier)
        summary = table.snapshot_by_id(t.snapshot_id).summary.additional_properties
        assert summary.get("omni.engine") == "spark" and summary.get("omni.operation") == "compact"
        assert not [r for r in table.metadata.refs if r.startswith("omni-stage")]
    assert [e.operation for e in omni.log(name)][-1] == "compact"
