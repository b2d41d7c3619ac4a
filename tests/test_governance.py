"""Compaction through Prepare-Execute-Commit: same rows, fewer files, readers keep their version."""

import pytest

from governance.compaction import compact, plan_compaction
from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from omni_iceberg.ingest import pipeline
from tests import feature_udfs as U


@pytest.fixture
def chunk_files(monkeypatch):
    """Every ingest chunk written as its own files (as before writes held their rows): the
    small files compaction exists for, made on purpose with ``chunk_rows``."""
    from catalog_ext import physical

    monkeypatch.setattr(physical, "WRITE_BUFFER_BYTES", 0)


def _files(omni, identifier, snapshot_id):
    return sum(1 for _ in omni.catalog.load_table(identifier).scan(snapshot_id=snapshot_id).plan_files())


def test_compaction_keeps_rows_and_versions(tmp_path, chunk_files):
    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:48]
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    pipeline.submit(omni.store, "aidata", "web", [str(p) for p in pages], "a", chunk_rows=8)  # many small files
    omni.register_features("web", [U.t_parse, U.t_len])
    omni.backfill("web", ["t_len"], isolation="inline")
    query = "SELECT count(*) AS n, sum(t_len) AS words, sum(length(RawData.raw_data)) AS chars FROM web"
    before_version = omni.state("web").version
    before = omni.query(query).to_pylist()
    base = omni.state("web").base_table
    files_before = _files(omni, base.identifier, base.snapshot_id)
    plan = plan_compaction(omni.store, "web")
    assert not plan.empty and "aidata.web__base" in plan.describe()
    report = compact(omni.store, "web")
    assert report["logical_version"] == before_version + 1
    state = omni.state("web")
    assert _files(omni, state.base_table.identifier, state.base_table.snapshot_id) < files_before
    assert omni.query(query).to_pylist() == before
    assert omni.query(query, as_of=before_version).to_pylist() == before  # old version still readable
    assert plan_compaction(omni.store, "web").empty
    main = omni.catalog.load_table(state.base_table.identifier).metadata.refs["main"].snapshot_id
    assert main == state.base_table.snapshot_id
    # one snapshot per table, not per partition group, then one that leaves the deleted
    # entries behind: a query plans one manifest of new files (plus untouched ones)
    ice = omni.catalog.load_table(state.base_table.identifier)
    head = ice.metadata.snapshot_by_id(state.base_table.snapshot_id)  # drops the deleted entries
    overwrite = ice.metadata.snapshot_by_id(head.parent_snapshot_id)
    assert overwrite.parent_snapshot_id == base.snapshot_id
    manifests = head.manifests(ice.io)
    assert len([m for m in manifests if m.added_files_count]) == 1  # every group's new files
    assert not [m for m in manifests if m.deleted_files_count]  # nothing left to skip at planning
    assert len(plan.tables[0].partitions) > 1  # (several groups were rewritten)


def test_compaction_loses_cleanly_to_a_concurrent_writer(tmp_path, monkeypatch, chunk_files):
    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:30]
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    pipeline.submit(omni.store, "aidata", "web", [str(p) for p in pages[:20]], "a", chunk_rows=5)
    real_commit = omni.store.commit

    def ingest_first(*args, **kwargs):  # another writer commits between execute and commit
        monkeypatch.setattr(omni.store, "commit", real_commit)
        omni.submit("web", [str(p) for p in pages[20:]], batch="b")
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(omni.store, "commit", ingest_first)
    from catalog_ext.updates import PinConflict

    with pytest.raises(PinConflict):
        compact(omni.store, "web")
    assert omni.read("web").num_rows == 30
    refs = omni.catalog.load_table("aidata.web__base").metadata.refs
    assert not [r for r in refs if r.startswith("omni-stage-")]


def test_a_lost_compaction_deletes_the_files_it_rewrote(tmp_path, monkeypatch, chunk_files):
    from pathlib import Path
    from urllib.parse import urlparse

    from catalog_ext import iceberg_io

    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:30]
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    pipeline.submit(omni.store, "aidata", "web", [str(p) for p in pages[:20]], "a", chunk_rows=5)
    real_commit = omni.store.commit

    def ingest_first(*args, **kwargs):
        monkeypatch.setattr(omni.store, "commit", real_commit)
        omni.submit("web", [str(p) for p in pages[20:]], batch="b")
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(omni.store, "commit", ingest_first)
    from catalog_ext.updates import PinConflict

    with pytest.raises(PinConflict):
        compact(omni.store, "web")
    table = omni.catalog.load_table("aidata.web__base")
    on_disk = {str(p) for p in (Path(urlparse(table.location()).path) / "data").rglob("*.parquet")}
    referenced = {urlparse(p).path for p in iceberg_io.reachable_data_files(
        table, [r.snapshot_id for r in table.metadata.refs.values()])}
    assert on_disk == referenced  # the rewritten (never pinned) files are gone
    assert omni.read("web").num_rows == 30


def _small_batches(tmp_path, batches: list[str], records: int) -> Omni:
    """A table ``web`` with one small submit per batch name (distinct records)."""
    import json

    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    for n, batch in enumerate(batches):
        src = tmp_path / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"batch {n} doc {i}"}) + "\n" for i in range(records)))
        omni.submit("web", [str(src)], batch=batch)
    return omni


def test_small_batches_merge_across_batches_and_batch_pruning_keeps_working(tmp_path):
    import json

    from pyiceberg.expressions import EqualTo

    omni = _small_batches(tmp_path, [f"b{b:02d}" for b in range(12)], 20)
    per_batch = "SELECT _ai_append_name_ AS b, count(*) AS n FROM web GROUP BY 1 ORDER BY 1"
    before, v_before = omni.query(per_batch).to_pylist(), omni.state("web").version
    base = omni.state("web").base_table
    files_before = _files(omni, base.identifier, base.snapshot_id)
    assert files_before > 16 * 4  # each small batch spread over most of the 16 buckets

    compact(omni.store, "web")
    state = omni.state("web")
    assert _files(omni, state.base_table.identifier, state.base_table.snapshot_id) <= 16  # one per bucket
    assert omni.query(per_batch).to_pylist() == before == [{"b": f"b{b:02d}", "n": 20} for b in range(12)]
    assert omni.query(per_batch, as_of=v_before).to_pylist() == before
    assert omni.verify_index("web").ok  # the merged files are indexed, the old ones retired

    # a batch written after the compaction is pruned by file statistics: its files only
    src = tmp_path / "late.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"late doc {i}"}) + "\n" for i in range(5)))
    omni.submit("web", [str(src)], batch="z-late")
    state = omni.state("web")
    table = omni.catalog.load_table(state.base_table.identifier)
    late = list(table.scan(row_filter=EqualTo("_ai_append_name_", "z-late"),
                           snapshot_id=state.base_table.snapshot_id).plan_files())
    assert late and len(late) <= 5 and all("z-late" not in f.file.file_path for f in late)  # not partitioned by it
    early = list(table.scan(row_filter=EqualTo("_ai_append_name_", "b03"),
                            snapshot_id=state.base_table.snapshot_id).plan_files())
    assert {f.file.file_path for f in early}.isdisjoint({f.file.file_path for f in late})


def test_export_after_compaction_reads_each_batch_once_from_merged_files(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from catalog_ext import iceberg_io

    omni = _small_batches(tmp_path, [f"b{b}" for b in range(6)], 15)
    compact(omni.store, "web")
    planned = []
    real_plan = iceberg_io.scan_tasks_by_bucket
    monkeypatch.setattr(iceberg_io, "scan_tasks_by_bucket", lambda *a: planned.append(a[0]) or real_plan(*a))
    for where, want in [(None, {f"b{b}": 15 for b in range(6)}), ("_ai_append_name_ IN ('b1', 'b4')",
                                                                   {"b1": 15, "b4": 15})]:
        planned.clear()
        out = tmp_path / f"out-{len(want)}"
        res = omni.export("web", str(out), columns=["_ai_unique_id_", "_ai_append_name_"], where=where,
                          progress=False)
        assert len(planned) == 1  # one plan for every batch, not one per batch
        rows = [r for f in sorted(out.glob("part-*")) for r in pq.read_table(f).to_pylist()]
        got: dict[str, int] = {}
        for r in rows:
            got[r["_ai_append_name_"]] = got.get(r["_ai_append_name_"], 0) + 1
        assert got == want and res.rows == sum(want.values()) == len({r["_ai_unique_id_"] for r in rows})
        # every file holds the one batch its name says
        for f in out.glob("part-*"):
            assert set(pq.read_table(f).column("_ai_append_name_").to_pylist()) == {f.name.split("-")[1]}


def test_maintain_compacts_what_is_due_then_expires_what_it_replaced(tmp_path):
    import json

    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    for b in range(10):
        src = tmp_path / f"b{b}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"batch {b} doc {i}"}) + "\n" for i in range(25)))
        omni.submit("web", [str(src)], batch=f"b{b}")
    query = "SELECT _ai_append_name_ AS b, count(*) AS n FROM web GROUP BY 1 ORDER BY 1"
    before = omni.query(query).to_pylist()
    dry = omni.maintain("web", keep_last=2, min_age_s=0, dry_run=True)
    assert dry.compaction["plan"]["tables"] and "would be merged" in dry.describe()
    assert omni.state("web").version == 11  # a dry run changes nothing
    report = omni.maintain("web", keep_last=2, min_age_s=0)
    state = omni.state("web")
    assert sum(report.compaction["files_after"].values()) <= 16
    assert _files(omni, state.base_table.identifier, state.base_table.snapshot_id) <= 16
    assert omni.query(query).to_pylist() == before
    assert [v.version for v in omni.log("web")][-2:] == [state.version - 1, state.version]
    assert omni.verify_index("web").ok
    again = omni.maintain("web", keep_last=2, min_age_s=0)  # nothing due any more
    assert not again.compaction["plan"]["tables"]


def test_maintain_declares_unique_keys_on_tables_made_before_omni_set_them(tmp_path):
    """Tables created by an older omni lack ``omni.unique-keys`` (read by the Spark extension):
    a dry run names them, a run sets it (table metadata only), and the rows stay the same."""
    import json

    from catalog_ext.physical import UNIQUE_KEYS_PROPERTY

    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    src = tmp_path / "b.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"doc {i}"}) + "\n" for i in range(5)))
    omni.submit("web", [str(src)], batch="b")
    base = omni.state("web").base_table.identifier
    assert omni.catalog.load_table(base).metadata.properties[UNIQUE_KEYS_PROPERTY] == \
        "_ai_unique_id_,_ai_append_name_"  # new tables declare them at creation
    with omni.catalog.load_table(base).transaction() as tx:  # as an older omni made it
        tx.remove_properties(UNIQUE_KEYS_PROPERTY)
    def rows():
        return sorted(omni.read("web").to_pylist(), key=lambda r: r["_ai_unique_id_"])

    before = rows()
    dry = omni.maintain("web", dry_run=True)
    assert dry.unique_keys_declared == [base] and "unique keys to declare on 1 table(s)" in dry.describe()
    assert UNIQUE_KEYS_PROPERTY not in omni.catalog.load_table(base).metadata.properties
    assert omni.maintain("web").unique_keys_declared == [base]
    assert omni.catalog.load_table(base).metadata.properties[UNIQUE_KEYS_PROPERTY] == "_ai_unique_id_,_ai_append_name_"
    assert rows() == before  # (the same run may re-bucket: its own logical commit, same rows)
    assert omni.maintain("web").unique_keys_declared == []


def test_an_automatic_maintenance_runs_after_every_nth_version_within_its_budget(tmp_path, monkeypatch):
    import json

    from governance import maintenance

    monkeypatch.setattr(maintenance, "AUTO_MAINTAIN_EVERY", 6)
    monkeypatch.setenv("OMNI_COMPACT_MIN_FILES", "4")
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")  # version 1
    ran = []
    real = maintenance.maintain
    monkeypatch.setattr(maintenance, "maintain", lambda *a, **k: ran.append(k) or real(*a, **k))
    for b in range(5):  # versions 2..6: the commit that makes version 6 maintains
        src = tmp_path / f"b{b}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"batch {b} doc {i}"}) + "\n" for i in range(25)))
        omni.submit("web", [str(src)], batch=f"b{b}")
        assert len(ran) == (1 if b == 4 else 0)
    assert ran[0]["budget_s"] == maintenance.AUTO_MAINTAIN_BUDGET_S and "automatic" in ran[0]["command"]
    state, before = omni.state("web"), omni.state("web", as_of=6)
    assert [v.operation for v in omni.log("web") if v.version > 6][:1] == ["compact"]
    assert _files(omni, state.base_table.identifier, state.base_table.snapshot_id) < \
        _files(omni, before.base_table.identifier, before.base_table.snapshot_id)
    assert omni.query("SELECT count(*) AS n FROM web").to_pylist() == [{"n": 125}]
    # a spent budget starts nothing more than the branch sweep, and says so
    report = maintenance.maintain(omni.store, "web", budget_s=0.0)
    assert report.compaction is None and report.column_groups is None and report.retention is None
    assert report.rebucket is None and report.coread is None and report.index_seal is None
    assert report.cold_split is None and report.table_bound is None and report.refreshed is None
    # compaction, column groups, co-read groups, cold columns, stale materializations, the table
    # bound, re-bucketing, retention, index sealing, orphan files
    assert sum("not started: past the 0 s budget" in t for t in report.tasks) == 10
