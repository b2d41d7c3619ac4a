"""Family documents with shared segments (catalog_ext/family_document.py), on a real embedded catalog.

What a user relies on: every version reads back exactly as it was committed, in this
process and in a fresh one; a commit writes only what it changed (a version's document
does not restate the batches sealed before it); retention deletes the segments no kept
version names and keeps the rest; a purged table leaves none behind.
Segments are made small here (2 entries) so a handful of batches seals several.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog_ext import family_document
from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from governance import RetentionPolicy, apply_retention
from omni_iceberg.api import Omni
from tests import feature_udfs as U

NAME = "web"


@pytest.fixture
def omni(omni_home, monkeypatch):
    monkeypatch.setattr(family_document, "SEGMENT_ENTRIES", 2)
    return Omni(config=omni_home)


def _fresh(omni: Omni) -> Omni:
    """What another process sees: a new handle, with no parsed segment kept in memory."""
    family_document.clear_caches()
    return Omni(config=omni.config)


def _submit(omni: Omni, tmp_path: Path, batch: str, rows: int = 4) -> None:
    path = tmp_path / f"{batch}.jsonl"
    path.write_text("".join(json.dumps({"raw_data": f"<p>{batch} page {i}</p>", "url": f"https://e.org/{batch}/{i}"})
                            + "\n" for i in range(rows)))
    omni.submit(NAME, [str(path)], batch=batch)


def _segment_files(omni: Omni) -> set[str]:
    return {p.name for p in Path(omni.config.home).rglob(f"{family_document.SEGMENT_PREFIX}*.json")}


def _latest_document(omni: Omni) -> dict:
    view = omni.store.views.load_view("aidata", NAME)
    path = view.properties["omni.family-location"].removeprefix("file://")
    return json.loads(Path(path).read_text())


def _batches(omni: Omni, as_of=None) -> list[str]:
    rows = omni.read(NAME, columns=[ID_COLUMN, BATCH_COLUMN], as_of=as_of).to_pylist()
    return sorted({r[BATCH_COLUMN] for r in rows})


def test_every_version_reads_back_the_same_in_a_fresh_process(omni, tmp_path):
    omni.create_table(NAME)
    for b in ["b1", "b2", "b3", "b4", "b5"]:
        _submit(omni, tmp_path, b)
    omni.register_features(NAME, [U.t_parse, U.t_len])
    omni.backfill(NAME, ["t_len"], isolation="inline", progress=False)  # 10 computed units: 5 segments
    omni.tag(NAME, "five")
    assert len(_latest_document(omni)["segments"]["computed"]) == 5
    written = {v.version: omni.state(NAME, v.version) for v in omni.log(NAME)}
    other = _fresh(omni)
    for version, state in written.items():
        assert other.state(NAME, version) == state, version
    assert [b.name for b in other.state(NAME).batches] == ["b1", "b2", "b3", "b4", "b5"]
    assert _batches(other, as_of=3) == ["b1", "b2"]  # time travel through a sealed segment


def test_a_commit_does_not_restate_sealed_batches(omni, tmp_path):
    omni.create_table(NAME)
    for b in ["b1", "b2", "b3", "b4", "b5"]:
        _submit(omni, tmp_path, b)
    doc = _latest_document(omni)
    assert [b["name"] for b in doc["batches"]] == ["b5"]  # only the unsealed tail
    assert len(doc["segments"]["batches"]) == 2
    assert len(_segment_files(omni)) == 2  # [b1 b2] and [b3 b4], each written once
    omni.tag(NAME, "later")  # a metadata-only commit writes a document and no segment
    assert len(_segment_files(omni)) == 2
    assert '"b1"' not in json.dumps(_latest_document(omni))


def test_retention_keeps_named_segments_and_deletes_the_rest(omni, tmp_path):
    omni.create_table(NAME)
    for b in ["b1", "b2", "b3", "b4", "b5"]:
        _submit(omni, tmp_path, b)
    before = _segment_files(omni)
    omni.drop_batch(NAME, "b1")  # every chunk after b1 moves: [b2 b3] [b4 b5]
    assert len(_segment_files(omni)) == 4
    report = apply_retention(omni.store, f"aidata.{NAME}", RetentionPolicy(keep_last=1, min_age_s=0))
    assert report.errors == []
    left = _segment_files(omni)
    assert len(left) == 2 and not (left & before)
    other = _fresh(omni)
    assert [b.name for b in other.state(NAME).batches] == ["b2", "b3", "b4", "b5"]
    assert _batches(other) == ["b2", "b3", "b4", "b5"]
    _submit(other, tmp_path, "b6")  # and the table goes on growing from the kept segments
    assert [b.name for b in _fresh(other).state(NAME).batches] == ["b2", "b3", "b4", "b5", "b6"]


def test_purge_removes_segments(omni, tmp_path):
    omni.create_table(NAME)
    for b in ["b1", "b2", "b3"]:
        _submit(omni, tmp_path, b)
    assert _segment_files(omni)
    omni.drop_table(NAME, purge=True)
    assert not _segment_files(omni)


def test_documents_without_segments_still_load(omni, tmp_path, monkeypatch):
    monkeypatch.setattr(family_document, "SEGMENT_ENTRIES", 1000)  # as written before segments existed
    omni.create_table(NAME)
    for b in ["b1", "b2", "b3"]:
        _submit(omni, tmp_path, b)
    assert "segments" not in _latest_document(omni)
    monkeypatch.setattr(family_document, "SEGMENT_ENTRIES", 2)
    _submit(omni, tmp_path, "b4")  # the first commit after the upgrade seals what is full
    assert len(_latest_document(omni)["segments"]["batches"]) == 2
    assert [b.name for b in _fresh(omni).state(NAME).batches] == ["b1", "b2", "b3", "b4"]


def test_concurrent_writers_seal_segments_that_every_reader_finds(omni, tmp_path):
    """Two writers race (the loser re-applies on the winner's state): every sealed
    segment a committed document names exists, and a fresh process reads all batches."""
    import threading

    omni.create_table(NAME)
    errors: list[BaseException] = []

    def writer(tag: str) -> None:
        try:
            mine = Omni(config=omni.config)  # a handle of its own, as a second process would have
            for i in range(3):
                _submit(mine, tmp_path, f"{tag}{i}")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    names = sorted(b.name for b in _fresh(omni).state(NAME).batches)
    assert names == ["x0", "x1", "x2", "y0", "y1", "y2"]
    named = set(_latest_document(omni)["segments"]["batches"])
    assert len(named) == 3 and named <= _segment_files(omni)


def test_a_missing_segment_is_a_clear_error_naming_it(omni, tmp_path):
    from catalog_ext.errors import OmniError

    omni.create_table(NAME)
    for b in ["b1", "b2", "b3"]:
        _submit(omni, tmp_path, b)
    name = _latest_document(omni)["segments"]["batches"][0]
    next(Path(omni.config.home).rglob(name)).unlink()
    with pytest.raises(OmniError, match=f"names segment .*{name}, which is missing"):
        _fresh(omni).state(NAME)
