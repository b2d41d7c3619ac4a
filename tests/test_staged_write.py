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
