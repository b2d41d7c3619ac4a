"""omni drop-batch (governance/drop_batch.py): one batch leaves every physical table and the
id index in ONE logical commit; older versions, the index at those versions and exports keep it.

Embedded SQLite catalog, real Parquet files, the real LMDB index.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.updates import PinConflict
from governance import NoSuchBatchError, drop_batch, plan_drop_batch
from governance.compaction import compact
from omni_iceberg.api import Omni
from omni_iceberg.cli import main as cli_main
from omni_iceberg.ingest.identity import content_id
from tests import feature_udfs as U

NAME = "web"


def _jsonl(tmp_path: Path, tag: str, n: int) -> Path:
    path = tmp_path / f"{tag}.jsonl"
    path.write_text("".join(json.dumps({"raw_data": f"<p>the {tag} page {i} 12{i}</p>"}) + "\n" for i in range(n)))
    return path


@pytest.fixture
def omni(omni_home, tmp_path):
    o = Omni(config=omni_home)
    o.create_table(NAME)
    for tag, n in (("a", 5), ("b", 4), ("c", 6)):
        o.submit(NAME, [str(_jsonl(tmp_path, tag, n))], batch=tag, progress=False)
    o.register_features(NAME, [U.t_parse, U.t_len])
    o.backfill(NAME, ["t_len"], isolation="inline", progress=False)
    return o


def _batches(omni: Omni, as_of=None, computed: bool = True) -> dict[str, int]:
    rows = omni.read(NAME, columns=[BATCH_COLUMN, "t_len"], as_of=as_of).to_pylist()
    out: dict[str, int] = {}
    for r in rows:
        out[r[BATCH_COLUMN]] = out.get(r[BATCH_COLUMN], 0) + 1
        assert r["t_len"] is not None or not computed  # every row keeps its feature value: nothing misaligned
    return out


def test_drop_batch_removes_its_rows_everywhere_in_one_commit(omni):
    before = omni.state(NAME)
    b_id = content_id("<p>the b page 0 120</p>")
    assert omni.get(NAME, [b_id]).to_pylist()[0]["_found"]
    report = drop_batch(omni.store, NAME, "b")
    state = omni.state(NAME)
    assert report["logical_version"] == before.version + 1 == state.version
    assert [b.name for b in state.batches] == ["a", "c"]
    assert all(u.batch != "b" for u in state.computed)
    assert set(report["rows_removed"].values()) == {4}  # base, parse and t_len tables: 4 rows each
    assert _batches(omni) == {"a": 5, "c": 6}
    assert omni.log(NAME)[-1].operation == "drop-batch" and omni.log(NAME)[-1].summary["omni.batch"] == "b"
    # older versions keep the batch, and the index still resolves it there
    assert _batches(omni, before.version) == {"a": 5, "b": 4, "c": 6}
    assert not omni.get(NAME, [b_id]).to_pylist()[0]["_found"]
    assert omni.get(NAME, [b_id], as_of=before.version).to_pylist()[0]["_found"]
    assert omni.verify_index(NAME).ok
    # the same content can come back: dedup no longer sees the dropped rows
    again = omni.submit(NAME, [str(Path(omni.config.home).parent / "b.jsonl")], batch="b2", progress=False)
    assert again.written == 4 and again.duplicates == 0


def test_a_compacted_file_spanning_batches_is_rewritten_without_the_batch(omni):
    compact(omni.store, NAME)  # files now hold several batches each
    plan = plan_drop_batch(omni.store, NAME, "c")
    assert plan.rows == 6 and any(t.files_rewritten for t in plan.tables)
    assert "drop batch 'c' (6 rows)" in plan.describe()
    version = omni.state(NAME).version
    assert omni.state(NAME).version == version  # planning changes nothing
    drop_batch(omni.store, NAME, "c")
    assert _batches(omni) == {"a": 5, "b": 4}
    assert omni.query("SELECT count(*) AS n FROM web WHERE t_len > 0").to_pylist() == [{"n": 9}]


def test_unknown_batch_names_the_known_ones(omni, capsys):
    with pytest.raises(NoSuchBatchError, match=r"no batch 'bb'; did you mean 'b'.*batches: a, b, c"):
        drop_batch(omni.store, NAME, "bb")
    assert cli_main(["drop-batch", NAME, "zz"]) != 0
    assert "no batch 'zz'" in capsys.readouterr().err


def test_a_concurrent_writer_makes_it_fail_cleanly(omni, tmp_path, monkeypatch):
    real_commit = omni.store.commit

    def ingest_first(*args, **kwargs):
        monkeypatch.setattr(omni.store, "commit", real_commit)
        omni.submit(NAME, [str(_jsonl(tmp_path, "d", 3))], batch="d", progress=False)
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(omni.store, "commit", ingest_first)
    with pytest.raises(PinConflict):
        drop_batch(omni.store, NAME, "a")
    assert _batches(omni, computed=False) == {"a": 5, "b": 4, "c": 6, "d": 3}  # nothing dropped, the write kept
    for t in omni.state(NAME).tables:
        refs = omni.catalog.load_table(t.identifier).metadata.refs
        assert not [r for r in refs if r.startswith("omni-stage-")]


def test_cli_dry_run_then_drop(omni, capsys):
    assert cli_main(["drop-batch", NAME, "a", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["dry_run"] and plan["batch"] == "a" and plan["rows"] == 5
    assert _batches(omni)["a"] == 5
    assert cli_main(["drop-batch", NAME, "a", "--no-progress"]) == 0
    assert "dropped batch 'a' (5 rows" in capsys.readouterr().out
    assert "a" not in _batches(omni)


def _id_batch_pairs(omni: Omni) -> dict[str, list[tuple[str, str]]]:
    """Per physical table of the latest version: every (id, batch) pair its pinned snapshot holds."""
    out = {}
    for t in omni.state(NAME).tables:
        if t.snapshot_id is None:
            continue
        rows = omni.catalog.load_table(t.identifier).scan(
            snapshot_id=t.snapshot_id, selected_fields=(ID_COLUMN, BATCH_COLUMN)).to_arrow()
        out[t.key] = list(zip(rows.column(ID_COLUMN).to_pylist(), rows.column(BATCH_COLUMN).to_pylist()))
    return out


def _when_committing(omni: Omni, monkeypatch, operation: str, meanwhile) -> None:
    """Run ``meanwhile()`` once, right before the next logical commit of ``operation``: the
    racing writer commits between that command's plan and its commit."""
    real_commit = omni.store.commit

    def commit(*args, **kwargs):
        if kwargs.get("operation") == operation:
            monkeypatch.setattr(omni.store, "commit", real_commit)
            meanwhile()
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(omni.store, "commit", commit)


def test_a_backfill_that_commits_a_new_table_during_the_drop_fails_the_drop_cleanly(omni, tmp_path, monkeypatch):
    from catalog_ext.errors import CommitConflictError

    omni.register_features(NAME, [U.t_lang])  # its table pins an empty snapshot: the drop's plan skips it
    _when_committing(omni, monkeypatch, "drop-batch",
                     lambda: omni.backfill(NAME, ["t_lang"], isolation="inline", progress=False))
    version = omni.state(NAME).version
    with pytest.raises(CommitConflictError, match=r"t_lang.*batch 'b'"):
        drop_batch(omni.store, NAME, "b")
    state = omni.state(NAME)
    assert state.version == version + 1 and state.operation == "backfill"  # the backfill's commit, nothing else
    assert [b.name for b in state.batches] == ["a", "b", "c"]
    lang = state.feature("t_lang").table_key
    assert sorted(b for _, b in _id_batch_pairs(omni)[lang]) == ["a"] * 5 + ["b"] * 4 + ["c"] * 6
    # run again, the drop now covers the new table: the batch leaves every one of them
    drop_batch(omni.store, NAME, "b")
    assert all(b != "b" for pairs in _id_batch_pairs(omni).values() for _, b in pairs)
    assert omni.verify_index(NAME).ok
    # the same content again under the same name, then the backfill: each (id, batch) once everywhere
    omni.submit(NAME, [str(tmp_path / "b.jsonl")], batch="b", progress=False)
    omni.backfill(NAME, ["t_lang", "t_len"], isolation="inline", progress=False)
    pairs = _id_batch_pairs(omni)
    for key, held in pairs.items():
        assert len(held) == len(set(held)), f"{key} holds an (id, batch) pair twice"
    assert sorted(b for _, b in pairs[lang]) == ["a"] * 5 + ["b"] * 4 + ["c"] * 6
    assert omni.verify_index(NAME).ok


def test_a_backfill_does_not_bring_back_a_batch_dropped_while_it_ran(omni, monkeypatch):
    omni.register_features(NAME, [U.t_lang])
    _when_committing(omni, monkeypatch, "backfill", lambda: drop_batch(omni.store, NAME, "b"))
    report = omni.backfill(NAME, ["t_lang"], isolation="inline", progress=False)
    state = omni.state(NAME)
    assert state.operation == "backfill" and report.logical_version == state.version
    assert [b.name for b in state.batches] == ["a", "c"]
    assert sorted(u.batch for u in state.computed if u.feature == "t_lang") == ["a", "c"]
    pairs = _id_batch_pairs(omni)
    assert sorted(b for _, b in pairs[state.feature("t_lang").table_key]) == ["a"] * 5 + ["c"] * 6
    assert all(b != "b" for held in pairs.values() for _, b in held)
    assert _batches(omni) == {"a": 5, "c": 6}
    assert omni.verify_index(NAME).ok
