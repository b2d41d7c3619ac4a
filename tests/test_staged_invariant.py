"""A staged write never publishes rows twice: the check every logical commit attempt makes.

CI once saw two concurrent backfills leave a feature table with each row twice (2,000
rows, 1,000 distinct ids), with two different plans, and that did not reproduce. Two runs
of the SAME plan at once do reproduce the symptom: a backfill's run id is the hash of its
plan, so both write one staging branch (tests/test_faults.py). A
double count of this kind is a data file staged twice, a branch built on its own run's
published snapshot, another run's snapshot, or one unit finished twice on the branch;
``StagedWrite.check_counts_rows_once`` refuses each before the compare-and-swap, and a
checkpoint refuses to write a branch another process moved. Here each shape is made by
hand on a real embedded catalog.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog_ext.contract import split_qualified
from catalog_ext.iceberg_io import commit_data_files
from catalog_ext.physical import StagedWriteInvariantError, StagingBranchTakenError
from catalog_ext.updates import PinSnapshot
from omni_iceberg.api import Omni
from tests.pages import pages_jsonl


@pytest.fixture
def omni(omni_home, tmp_path):
    o = Omni(config=omni_home)
    o.create_table("web")
    o.submit("web", [str(pages_jsonl(tmp_path, "a", 12))], batch="a", progress=False)
    return o


def _staged_copy(omni: Omni, run_id: str, checkpoint: bool = True):
    """A writer on the base table holding a copy of batch a's rows as batch ``b``, checkpointed."""
    import pyarrow as pa

    state = omni.state("web")
    base = state.base_table
    rows = omni.catalog.load_table(base.identifier).scan(snapshot_id=base.snapshot_id).to_arrow()
    at = rows.schema.get_field_index("_ai_append_name_")
    rows = rows.set_column(at, rows.schema.field(at), pa.array(["b"] * rows.num_rows, rows.schema.field(at).type))
    writer = omni.store.staged_write(state, base.identifier, base.snapshot_id, run_id, {"omni.operation": "test"})
    writer.write(rows)
    if checkpoint:
        writer.checkpoint()
    return state, base, writer


def _commit(omni: Omni, base, writer):
    ns, table = split_qualified("aidata.web")
    return omni.store.commit(ns, table, lambda latest: (PinSnapshot(base.key, writer.staged_snapshot_id,
                                                                    writer.base_snapshot_id),),
                             operation="test", staged=[writer])


def _append_on_branch(omni: Omni, writer, source) -> None:
    """``source``'s files committed (with its snapshot properties) onto ``writer``'s branch."""
    table = omni.catalog.load_table(writer.identifier)
    again = commit_data_files(table, source.branch_files, writer.branch, source.properties, source.spec_id)
    writer.staged_snapshot_id = again.metadata.refs[writer.branch].snapshot_id


def test_a_data_file_staged_twice_is_refused_and_nothing_is_committed(omni):
    state, base, writer = _staged_copy(omni, "run-twice")
    _append_on_branch(omni, writer, writer)
    with pytest.raises(StagedWriteInvariantError, match="twice"):
        _commit(omni, base, writer)
    assert omni.state("web").version == state.version


def test_a_branch_built_on_its_own_published_snapshot_is_refused(omni):
    state, base, writer = _staged_copy(omni, "run-own")
    landed = _commit(omni, base, writer)  # published once: fine
    assert landed.version == state.version + 1
    # the same run's files appended again on top of its published snapshot (what a retry that
    # rebased onto its own landed commit would do)
    writer.rebase(landed.physical_table(base.key).snapshot_id)
    with pytest.raises(StagedWriteInvariantError, match="its own snapshot"):
        _commit(omni, base, writer)
    assert omni.state("web").version == landed.version
    assert omni.read("web", columns=["_ai_unique_id_"]).num_rows == 24  # batch a and its one copy, once each


def test_another_runs_snapshot_on_the_branch_is_refused(omni):
    state, base, writer = _staged_copy(omni, "run-mine")
    _, _, other = _staged_copy(omni, "run-other")
    _append_on_branch(omni, writer, other)  # as if the other run's writer had parented on this branch
    with pytest.raises(StagedWriteInvariantError, match="of run run-other"):
        _commit(omni, base, writer)
    assert omni.state("web").version == state.version


# ---- two processes of one plan: a backfill's run id is the hash of its plan, so they share a branch


def test_a_second_writer_of_the_same_run_stops_at_its_first_checkpoint(omni):
    """Process B started before process A's branch existed; A checkpoints first. B must not
    append on top of A's snapshot (both would then publish the same rows): it stops, and A
    goes on and commits alone."""
    state, base, a = _staged_copy(omni, "bf-same-plan", checkpoint=False)
    _, _, b = _staged_copy(omni, "bf-same-plan", checkpoint=False)
    a.checkpoint({"omni.unit": "f/b"})
    with pytest.raises(StagingBranchTakenError, match="another process is running the same plan"):
        b.checkpoint({"omni.unit": "f/b"})
    table = omni.catalog.load_table(base.identifier)
    assert table.metadata.refs[a.branch].snapshot_id == a.staged_snapshot_id  # B left A's branch alone
    landed = _commit(omni, base, a)
    assert landed.version == state.version + 1
    assert omni.read("web", columns=["_ai_unique_id_"]).num_rows == 24  # batch a and its copy, once


def test_a_writer_that_adopted_a_live_branch_stops_when_its_owner_moves_it(omni):
    """B resumed (attached to) A's branch while A was still running: whichever of them
    checkpoints second finds the branch moved and stops."""
    _, base, a = _staged_copy(omni, "bf-same-plan", checkpoint=False)
    a.checkpoint({"omni.unit": "f/b"})
    _, _, b = _staged_copy(omni, "bf-same-plan", checkpoint=False)
    assert set(b.attach("omni.unit")) == {"f/b"}  # B takes A's finished unit as done
    a.checkpoint({"omni.unit": "f/c"})  # an empty unit: a labelled snapshot without files
    with pytest.raises(StagingBranchTakenError):
        b.checkpoint({"omni.unit": "f/c"})


def test_a_writer_waits_while_the_other_withdraws_its_append_from_on_top_of_its_own(omni):
    """Both runs of one plan append at the same instant: the one whose snapshot landed on
    the other's takes it back. The other, meanwhile seeing a snapshot on top of its own,
    waits for that withdrawal and goes on, instead of stopping too (then neither finished)."""
    import threading

    _, base, a = _staged_copy(omni, "bf-same-plan", checkpoint=False)
    a.checkpoint({"omni.unit": "f/b"})
    _, _, b = _staged_copy(omni, "bf-same-plan", checkpoint=False)
    b.attach("omni.unit")
    table = omni.catalog.load_table(a.identifier)
    moved = commit_data_files(table, a.branch_files, a.branch, {**a.properties, "omni.unit": "f/c"}, a.spec_id)
    misplaced = moved.snapshot_by_id(moved.metadata.refs[a.branch].snapshot_id)
    assert misplaced.parent_snapshot_id == a.staged_snapshot_id  # B's append landed on A's snapshot
    withdraw = threading.Timer(0.3, lambda: b.withdraw_misplaced(omni.catalog.load_table(a.identifier), misplaced))
    withdraw.start()
    try:
        before = a.staged_snapshot_id
        a.checkpoint({"omni.unit": "f/c"})  # waits for the withdrawal, then appends on its own
    finally:
        withdraw.join()
    head = omni.catalog.load_table(a.identifier).snapshot_by_id(a.staged_snapshot_id)
    assert head.parent_snapshot_id == before and head.snapshot_id != misplaced.snapshot_id


def test_a_branch_holding_one_unit_twice_is_refused(omni):
    """If both processes' copies of a unit ever end up on the branch, publishing would count
    that unit's rows twice: the commit-time check refuses it."""
    state, base, writer = _staged_copy(omni, "bf-twice", checkpoint=False)
    writer.attach("omni.unit")
    writer.checkpoint({"omni.unit": "f/b"})
    _, _, other = _staged_copy(omni, "bf-twice-copy", checkpoint=False)
    other.checkpoint({"omni.unit": "f/b"})
    table = omni.catalog.load_table(writer.identifier)
    again = commit_data_files(table, other.branch_files, writer.branch,
                              {**writer.properties, "omni.unit": "f/b"}, other.spec_id)
    writer.staged_snapshot_id = again.metadata.refs[writer.branch].snapshot_id
    with pytest.raises(StagedWriteInvariantError, match="holds unit f/b twice"):
        _commit(omni, base, writer)
    assert omni.state("web").version == state.version


def _doubled_branch(omni: Omni, run_id: str):
    """A run's branch holding unit f/b twice (a withdrawal that lost its race), and a writer resuming it."""
    _, base, writer = _staged_copy(omni, run_id, checkpoint=False)
    writer.attach("omni.unit")
    writer.checkpoint({"omni.unit": "f/b"})
    table = omni.catalog.load_table(writer.identifier)
    commit_data_files(table, writer.branch_files, writer.branch, {**writer.properties, "omni.unit": "f/b"},
                      writer.spec_id)
    state = omni.state("web")
    resumed = omni.store.staged_write(state, base.identifier, base.snapshot_id, run_id, {"omni.operation": "test"})
    return base, resumed  # a rerun's writer: it attaches before it writes anything


def test_resuming_a_branch_holding_a_unit_twice_stops_while_its_writer_may_live(omni):
    base, resumed = _doubled_branch(omni, "bf-doubled-live")
    with pytest.raises(StagingBranchTakenError, match="holds unit.* f/b twice"):
        resumed.attach("omni.unit")
    assert resumed.branch in omni.catalog.load_table(base.identifier).metadata.refs  # left as it was


def test_resuming_a_stale_branch_holding_a_unit_twice_starts_over(omni, monkeypatch):
    monkeypatch.setenv("OMNI_STAGE_GRACE_S", "0")
    base, resumed = _doubled_branch(omni, "bf-doubled-stale")
    assert resumed.attach("omni.unit") == {}  # nothing resumed: the unit is computed again
    assert resumed.branch not in omni.catalog.load_table(base.identifier).metadata.refs
    _, _, copy = _staged_copy(omni, "the-rows", checkpoint=False)
    resumed.write(pa.concat_tables(copy._held))  # the unit computed again, once
    resumed.checkpoint({"omni.unit": "f/b"})
    landed = _commit(omni, base, resumed)
    assert omni.read("web", columns=["_ai_unique_id_"], as_of=landed.version).num_rows == 24


def _restaged_branch(omni: Omni, run_id: str):
    """A run's branch after a re-stage (what a lost commit's rebase leaves): unit f/b's files
    re-committed in one snapshot without its label, and a rerun's writer about to resume it."""
    _, base, writer = _staged_copy(omni, run_id, checkpoint=False)
    writer.attach("omni.unit")
    writer.checkpoint({"omni.unit": "f/b"})
    writer.rebase(base.snapshot_id)  # the process is killed right after this
    head = omni.catalog.load_table(base.identifier).snapshot_by_id(writer.staged_snapshot_id)
    assert "omni.unit" not in head.summary.additional_properties  # the label did not survive
    state = omni.state("web")
    resumed = omni.store.staged_write(state, base.identifier, base.snapshot_id, run_id, {"omni.operation": "test"})
    return base, resumed


def test_resuming_a_restaged_branch_stops_while_its_writer_may_live(omni):
    base, resumed = _restaged_branch(omni, "bf-restaged-live")
    with pytest.raises(StagingBranchTakenError, match="re-staged units"):
        resumed.attach("omni.unit")
    assert resumed.branch in omni.catalog.load_table(base.identifier).metadata.refs  # left as it was


def test_resuming_a_stale_restaged_branch_starts_over_and_counts_rows_once(omni, monkeypatch):
    """Resuming would have adopted f/b's files with no label saying f/b is done: the unit is
    computed again beside them and its 12 rows published twice. The branch is dropped instead."""
    monkeypatch.setenv("OMNI_STAGE_GRACE_S", "0")
    base, resumed = _restaged_branch(omni, "bf-restaged-stale")
    assert resumed.attach("omni.unit") == {}
    assert resumed.branch not in omni.catalog.load_table(base.identifier).metadata.refs
    _, _, copy = _staged_copy(omni, "the-rows", checkpoint=False)
    resumed.write(pa.concat_tables(copy._held))  # the unit computed again, once
    resumed.checkpoint({"omni.unit": "f/b"})
    landed = _commit(omni, base, resumed)
    assert omni.read("web", columns=["_ai_unique_id_"], as_of=landed.version).num_rows == 24
