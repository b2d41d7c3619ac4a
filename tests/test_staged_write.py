"""StagedWrite replacing the rows of some batches (stale units recomputed), across a lost race."""

import json

import pyarrow as pa

from catalog_ext.physical import StagedWrite, key_arrow_fields
from catalog_ext.updates import PinSnapshot
from omni_iceberg.api import Omni
from omni_iceberg.features import feature


@feature(outputs={"sw_n": "long"}, inputs=["RawData.raw_data"])
def sw_n(raw_data):
    return 1


def _rows(ids, batch, value):
    schema = pa.schema(key_arrow_fields() + [pa.field("sw_n", pa.int64())])
    return pa.Table.from_pydict({"_ai_unique_id_": ids, "_ai_append_name_": [batch] * len(ids),
                                 "sw_n": [value] * len(ids)}, schema=schema)


def test_cleared_batches_are_replaced_and_the_clear_survives_a_rebase(tmp_path):
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    for batch in ("a", "b"):
        src = tmp_path / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"{batch} {i}"}) + "\n" for i in range(5)))
        omni.submit("web", [str(src)], batch=batch)
    omni.register_features("web", [sw_n])
    omni.backfill("web", ["sw_n"], isolation="inline")  # every row: 1
    state = omni.state("web")
    key = state.feature("sw_n").table_key
    table = state.physical_table(key)
    ids_a = [r["_ai_unique_id_"] for r in omni.read("web", columns=["_ai_unique_id_"], batches=["a"]).to_pylist()]

    mine = StagedWrite(omni.catalog, table.identifier, table.snapshot_id, "bf-replace", {"omni.operation": "backfill"})
    mine.clear_batches(["a"])
    mine.write(_rows(ids_a, "a", 2))
    mine.checkpoint()

    rival = StagedWrite(omni.catalog, table.identifier, table.snapshot_id, "bf-rival", {"omni.operation": "backfill"})
    rival.write(_rows(["x1", "x2"], "b", 3))  # another run adds to the same table first
    rival.checkpoint()
    omni.store.commit("aidata", "web", lambda latest: (PinSnapshot(key, rival.staged_snapshot_id, table.snapshot_id),),
                      operation="test", staged=[rival])

    # our commit loses (PinConflict), rebases onto the rival's snapshot: the clear is replayed
    omni.store.commit("aidata", "web", lambda latest: (PinSnapshot(key, mine.staged_snapshot_id, mine.base_snapshot_id),),
                      operation="test", staged=[mine])
    pinned = omni.state("web").physical_table(key).snapshot_id
    rows = omni.catalog.load_table(table.identifier).scan(snapshot_id=pinned).to_arrow().to_pylist()
    by_batch = {}
    for r in rows:
        by_batch.setdefault(r["_ai_append_name_"], []).append(r["sw_n"])
    assert sorted(by_batch["a"]) == [2] * 5  # replaced, not added to
    assert sorted(by_batch["b"]) == [1] * 5 + [3, 3]  # the rival's rows and the untouched batch stay


def test_attach_finds_the_cleared_batches_again(tmp_path):
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    for batch in ("a", "b"):
        src = tmp_path / f"{batch}.jsonl"
        src.write_text(json.dumps({"raw_data": f"{batch} doc"}) + "\n")
        omni.submit("web", [str(src)], batch=batch)
    omni.register_features("web", [sw_n])
    omni.backfill("web", ["sw_n"], isolation="inline")
    state = omni.state("web")
    table = state.physical_table(state.feature("sw_n").table_key)
    w = StagedWrite(omni.catalog, table.identifier, table.snapshot_id, "bf-resume", {})
    w.clear_batches(["a", "b"])
    again = StagedWrite(omni.catalog, table.identifier, table.snapshot_id, "bf-resume", {})
    again.attach("omni.unit")  # a resumed run must not delete what it already rewrote
    assert again.cleared_batches == ["a", "b"] and again.staged_snapshot_id == w.staged_snapshot_id


def test_a_new_staging_branch_keeps_its_parent_when_its_commit_races(tmp_path, monkeypatch):
    """Regression: a concurrent commit to the table while a writer created its staging branch
    and first snapshot made pyiceberg's retry drop the branch creation, leaving a snapshot
    with no parent - every earlier row of the table vanished from the version pinning it."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table import Table

    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"a {i}"}) + "\n" for i in range(5)))
    omni.submit("web", [str(src)], batch="a")
    base = omni.state("web").base_table
    real = Table._do_commit
    calls = {"n": 0}

    def rival_first(self, updates, requirements):  # the first commit attempt finds the table moved
        calls["n"] += 1
        if calls["n"] == 1:
            raise CommitFailedException("simulated: another writer committed to this table")
        return real(self, updates, requirements)

    mine = StagedWrite(omni.catalog, base.identifier, base.snapshot_id, "race", {"omni.operation": "ingest"})
    schema = omni.catalog.load_table(base.identifier).schema().as_arrow()
    row = {"_ai_unique_id_": ["z" * 32], "_ai_append_name_": ["b"], "RawData": [{"raw_data": "b 0"}]}
    mine.write(pa.Table.from_pydict(row, schema=schema))
    monkeypatch.setattr(Table, "_do_commit", rival_first)
    staged = mine.checkpoint()
    monkeypatch.setattr(Table, "_do_commit", real)
    table = omni.catalog.load_table(base.identifier)
    assert table.snapshot_by_id(staged).parent_snapshot_id == base.snapshot_id
    assert table.scan(snapshot_id=staged).to_arrow().num_rows == 6  # the 5 rows before it, and its own


def _ids(prefix, n):
    import hashlib

    return [hashlib.md5(f"{prefix}{i}".encode()).hexdigest() for i in range(n)]


def _feature_table_writer(tmp_path, run_id):
    """A fresh table with ``sw_n`` registered, and a staged write on its feature table."""
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    omni.register_features("web", [sw_n])
    state = omni.state("web")
    table = state.physical_table(state.feature("sw_n").table_key)
    return omni, state, table, StagedWrite(omni.catalog, table.identifier, table.snapshot_id, run_id,
                                           {"omni.operation": "backfill"})


def test_chunks_of_one_batch_become_one_file_per_bucket_and_a_file_holds_one_batch(tmp_path):
    """Every write used to become its own file per bucket: 40 chunks of a batch made ~40
    files per bucket. Held rows are written together, and a new batch starts new files."""
    from catalog_ext.physical import file_batch

    omni, state, table, w = _feature_table_writer(tmp_path, "bf-buffer")
    ids = _ids("a", 4000)
    for i in range(0, 4000, 100):  # 40 chunks of batch a
        w.write(_rows(ids[i:i + 100], "a", 1))
    assert w.pending_files == [] and w.rows == 4000  # held, not written yet
    w.write(_rows(_ids("b", 50), "b", 2))  # another batch: batch a's rows are written now
    a_files = list(w.pending_files)
    w.checkpoint()  # and batch b's at the checkpoint
    buckets = state.table.bucket_count
    assert 0 < len(a_files) <= buckets
    files = w.data_files
    assert sum(f.record_count for f in files) == 4050
    t = omni.catalog.load_table(table.identifier)
    assert {file_batch(t, f) for f in files} == {"a", "b"}  # never None: one batch per file
    rows = t.scan(snapshot_id=w.staged_snapshot_id).to_arrow()
    assert rows.num_rows == 4050 and sorted(set(rows.column("_ai_unique_id_").to_pylist())) == sorted(ids + _ids("b", 50))


def test_held_rows_are_written_once_the_buffer_is_full_and_dropped_by_abandon(tmp_path, monkeypatch):
    omni, state, table, w = _feature_table_writer(tmp_path, "bf-small")
    chunk = _rows(_ids("c", 500), "c", 1)
    w.buffer_bytes = chunk.nbytes * 2
    w.write(chunk)
    assert w.pending_files == []
    w.write(_rows(_ids("d", 500), "c", 1))  # the buffer is full: written now
    assert sum(f.record_count for f in w.pending_files) == 1000
    w.write(_rows(_ids("e", 10), "c", 1))
    w.abandon()  # a failed run: nothing held survives to a later checkpoint
    assert w.data_files == [] and w.staged_snapshot_id is None


def test_a_new_bucket_spec_is_added_while_writers_of_the_old_count_commit(tmp_path, monkeypatch):
    """Adding a spec takes two spec updates on the default spec (remove the bucket field, add
    the new one), and every writer's commit makes its own count's spec the default again: a
    re-bucketing racing a submit found the field back after its second step and failed with
    "no bucket(8) spec after adding it". It keeps going until the spec is there."""
    from catalog_ext import iceberg_io
    from catalog_ext.iceberg_io import bucket_spec_id, spec_bucket_count
    from catalog_ext.physical import ensure_bucket_spec

    omni, state, table, _ = _feature_table_writer(tmp_path, "bf-spec")
    w = StagedWrite(omni.catalog, table.identifier, table.snapshot_id, "bf-spec", {"omni.operation": "backfill"},
                    bucket_count=state.table.bucket_count)  # labels its files with its count's spec: the default
    real = iceberg_io.with_table_retry
    writes = []

    def a_writer_commits_after_each_step(catalog, identifier, action, attempts=20):
        out = real(catalog, identifier, action, attempts)
        if len(writes) < 2 and getattr(action, "__name__", "") == "step":  # a spec step, not the writer's own
            w.write(_rows(_ids(f"w{len(writes)}", 3), "a", 1))  # a writer of the old count commits meanwhile
            writes.append(w.checkpoint())
        return out

    monkeypatch.setattr(iceberg_io, "with_table_retry", a_writer_commits_after_each_step)
    spec_id = ensure_bucket_spec(omni.catalog, table.identifier, 8)
    ice = omni.catalog.load_table(table.identifier)
    assert len(writes) == 2 and spec_bucket_count(ice.specs()[spec_id]) == 8
    assert bucket_spec_id(ice, 8) == spec_id and bucket_spec_id(ice, 16) == w.spec_id  # both counts still written
    assert ice.scan(snapshot_id=w.staged_snapshot_id).to_arrow().num_rows == 6


def test_a_rebase_leaving_out_the_winners_units_still_replaces_the_other_recomputed_batches(tmp_path):
    """Two backfills with different plans recompute stale units; the winner commits batch a first.
    The loser leaves its copy of a out (``rebase_excluding``) and must still clear batch b's old
    rows before its new ones land - without the clear, b held every row twice."""
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    for batch in ("a", "b"):
        src = tmp_path / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"{batch} {i}"}) + "\n" for i in range(5)))
        omni.submit("web", [str(src)], batch=batch)
    omni.register_features("web", [sw_n])
    omni.backfill("web", ["sw_n"], isolation="inline")  # every row: 1
    state = omni.state("web")
    key = state.feature("sw_n").table_key
    table = state.physical_table(key)
    ids = {b: [r["_ai_unique_id_"] for r in omni.read("web", columns=["_ai_unique_id_"], batches=[b]).to_pylist()]
           for b in ("a", "b")}

    loser = StagedWrite(omni.catalog, table.identifier, table.snapshot_id, "bf-loser", {"omni.operation": "backfill"})
    loser.clear_batches(["a", "b"])
    for b in ("a", "b"):
        loser.write(_rows(ids[b], b, 2))
    loser.checkpoint()
    winner = StagedWrite(omni.catalog, table.identifier, table.snapshot_id, "bf-winner",
                         {"omni.operation": "backfill"})
    winner.clear_batches(["a"])
    winner.write(_rows(ids["a"], "a", 3))
    winner.checkpoint()
    omni.store.commit("aidata", "web", lambda latest: (PinSnapshot(key, winner.staged_snapshot_id, table.snapshot_id),),
                      operation="test", staged=[winner])

    loser.rebase_excluding(omni.state("web").physical_table(key).snapshot_id, {"a"})  # as BackfillRun.commit does
    omni.store.commit("aidata", "web", lambda latest: (PinSnapshot(key, loser.staged_snapshot_id, loser.base_snapshot_id),),
                      operation="test", staged=[loser])
    pinned = omni.state("web").physical_table(key).snapshot_id
    by_batch = {}
    for r in omni.catalog.load_table(table.identifier).scan(snapshot_id=pinned).to_arrow().to_pylist():
        by_batch.setdefault(r["_ai_append_name_"], []).append(r["sw_n"])
    assert sorted(by_batch["a"]) == [3] * 5  # the winner's unit
    assert sorted(by_batch["b"]) == [2] * 5  # replaced, not added to
