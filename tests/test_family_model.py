"""The five-layer mapping: navigation both ways, canonical form, typed updates."""

import pytest

from catalog_ext.family import (
    Batch, FamilyState, LogicalColumn, LogicalTable, PhysicalColumn, PhysicalTable, PhysicalTableGroup,
)
from catalog_ext.updates import (
    AddBatch, AddLogicalColumns, AddPhysicalColumns, AddPhysicalTable, PinConflict, PinSnapshot,
    PreconditionFailed, apply_updates,
)


def _state() -> FamilyState:
    return FamilyState(
        version=3, operation="ingest", committed_ms=1,
        table=LogicalTable(namespace="aidata", name="web"),
        columns=(
            LogicalColumn(path="_ai_unique_id_", type="string", kind="key"),
            LogicalColumn(path="_ai_append_name_", type="string", kind="key"),
            LogicalColumn(path="RawData.raw_data", type="string", kind="stage"),
            LogicalColumn(path="ProcessedData.parsed_text", type="string", kind="stage"),
            LogicalColumn(path="quality", type="double", kind="feature"),
        ),
        groups=(PhysicalTableGroup(name="base"), PhysicalTableGroup(name="cpu")),
        tables=(
            PhysicalTable(key="base", identifier="aidata.web__base", group="base", snapshot_id=10),
            PhysicalTable(key="f1", identifier="aidata.web__f1", group="cpu", snapshot_id=20, role="feature"),
        ),
        physical_columns=(
            PhysicalColumn(table="base", name="RawData.raw_data", logical="RawData.raw_data"),
            PhysicalColumn(table="f1", name="quality", logical="quality"),
        ),
    )


def test_links_navigate_both_ways():
    s = _state()
    assert [p.table for p in s.physical_columns_of("quality")] == ["f1"]
    assert s.logical_column_of("f1", "quality").path == "quality"
    assert [p.name for p in s.columns_of_table("base")] == ["RawData.raw_data"]
    assert [t.key for t in s.tables_in_group("cpu")] == ["f1"]
    assert s.group_of("f1").name == "cpu"
    assert [t.key for t in s.tables_for(["quality", "RawData.raw_data"])] == ["f1", "base"]
    assert s.physical_columns_of("ProcessedData.parsed_text") == []  # declared, not computed
    with pytest.raises(KeyError):
        s.logical_column_of("f1", "nope")


def test_logical_order_is_keys_stages_features():
    assert _state().top_level_columns() == ["_ai_unique_id_", "_ai_append_name_", "RawData", "ProcessedData", "quality"]


def test_canonical_json_round_trip_and_unknown_fields_tolerated():
    s = _state()
    text = s.to_json()
    assert FamilyState.from_json(text) == s
    assert FamilyState.from_json(text).to_json() == text
    import json

    doc = json.loads(text)
    doc["written_by_a_newer_release"] = {"x": 1}
    assert FamilyState.from_json(json.dumps(doc)) == s


def test_updates_make_next_version_and_check_preconditions():
    s = _state()
    batch = Batch(name="cc", rows=5, read=6, duplicates=1, rejected=0, version=4, committed_ms=2)
    nxt = apply_updates(s, (PinSnapshot("base", 11, 10), AddBatch(batch)), operation="ingest", command="c",
                        summary={}, now_ms=5)
    assert (nxt.version, nxt.parent_version) == (4, 3)
    assert nxt.physical_table("base").snapshot_id == 11 and s.physical_table("base").snapshot_id == 10
    with pytest.raises(PreconditionFailed, match="cc"):
        apply_updates(nxt, (AddBatch(batch),), operation="ingest", command="", summary={}, now_ms=6)
    with pytest.raises(PinConflict) as conflict:
        apply_updates(nxt, (PinSnapshot("base", 12, 10),), operation="ingest", command="", summary={}, now_ms=6)
    assert (conflict.value.expected, conflict.value.actual) == (10, 11)


def test_column_updates_are_idempotent_but_reject_type_changes():
    s = _state()
    same = AddLogicalColumns((LogicalColumn(path="quality", type="double", kind="feature"),))
    assert apply_updates(s, (same,), operation="x", command="", summary={}, now_ms=1).columns == s.columns
    with pytest.raises(PreconditionFailed, match="quality"):
        apply_updates(s, (AddLogicalColumns((LogicalColumn(path="quality", type="string", kind="feature"),)),),
                      operation="x", command="", summary={}, now_ms=1)
    with pytest.raises(PreconditionFailed, match="unknown column"):
        apply_updates(s, (AddPhysicalColumns((PhysicalColumn(table="f1", name="z", logical="z"),)),),
                      operation="x", command="", summary={}, now_ms=1)
    with pytest.raises(PreconditionFailed, match="already belongs"):
        apply_updates(s, (AddPhysicalTable(s.tables[1], PhysicalTableGroup(name="cpu")),),
                      operation="x", command="", summary={}, now_ms=1)


def _with_feature() -> FamilyState:
    from catalog_ext.family import FeatureBinding

    binding = FeatureBinding(name="q", version="1", definition='{"inputs": ["RawData.raw_data"]}', code_hash="c",
                             table_key="f1", outputs=("quality",), registered_version=2)
    return _state().model_copy(update={"features": (binding,)})


def test_documents_without_data_versions_still_load():
    import json

    from catalog_ext.family import ComputedUnit

    s = _with_feature().model_copy(update={"computed": (
        ComputedUnit(feature="q", version="1", batch="cc", run_id="r", rows=5, errors=0, logical_version=3),)})
    doc = json.loads(s.to_json())
    for unit in doc["computed"]:  # as written before data versions existed
        del unit["data_version"], unit["upstream"]
    for batch in doc["batches"]:
        batch.pop("submit_id", None)
    old = FamilyState.from_json(json.dumps(doc))
    assert old.computed[0].data_version == "" and old.computed[0].upstream == ()
    assert old.computed_unit("q", "1", "cc") == s.computed[0]


def test_mark_computed_replaces_a_stale_unit_and_keeps_one_of_a_race():
    from catalog_ext.family import Batch, ComputedUnit
    from catalog_ext.updates import MarkComputed

    s = _with_feature()
    s = s.model_copy(update={"batches": (Batch(name="cc", rows=5, read=5, duplicates=0, rejected=0, version=2,
                                                committed_ms=1),)})

    def unit(dv, run):
        return ComputedUnit(feature="q", version="1", batch="cc", run_id=run, rows=5, errors=0, logical_version=4,
                            data_version=dv)

    first = apply_updates(s, (MarkComputed((unit("d1", "r1"),)),), operation="b", command="", summary={}, now_ms=1)
    same = apply_updates(first, (MarkComputed((unit("d1", "r2"),)),), operation="b", command="", summary={}, now_ms=2)
    assert [u.run_id for u in same.computed] == ["r1"]  # the same values recorded twice: kept once
    redone = apply_updates(first, (MarkComputed((unit("d2", "r3"),)),), operation="b", command="", summary={},
                           now_ms=3)
    assert [(u.run_id, u.data_version) for u in redone.computed] == [("r3", "d2")]  # stale unit replaced
    dropped = s.model_copy(update={"batches": ()})  # the batch left while the unit was computed
    assert apply_updates(dropped, (MarkComputed((unit("d1", "r4"),)),), operation="b", command="", summary={},
                         now_ms=5).computed == ()
    with pytest.raises(PreconditionFailed, match="q@2"):
        apply_updates(s, (MarkComputed((unit("d1", "r").model_copy(update={"version": "2"}),)),),
                      operation="b", command="", summary={}, now_ms=4)
