"""Regroup, split and materialize in slices (governance/slices.py, issue #37): with a slice
bound far below a bucket, every answer, file order and index is the same as from a table
processed whole; a record that alone exceeds the limit stops the operation with an error
naming it, and nothing is committed.

Two tables with the same rows: ``web`` is processed under a bound of a few hundred bytes
(so every bucket is read in several key ranges), ``ref`` under the default (whole).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from governance import slices
from governance.materialize import materialize
from omni_iceberg.api import Omni
from tests import feature_udfs as U
from tests.pages import pages_jsonl

COLUMNS = ["_ai_unique_id_", "_ai_append_name_", "t_len", "t_digits", "t_lang", "RawData.raw_data"]
# float sums depend on the order rows are added in, which the file layout changes
QUERY = ("SELECT _ai_append_name_ AS b, count(*) AS n, sum(t_len) AS words, round(sum(t_digits), 9) AS digits, "
         "count(t_lang) AS langs FROM {t} GROUP BY 1 ORDER BY 1")
SMALL = 600  # bytes a slice may weigh in ``web``'s operations


@pytest.fixture
def omni(omni_home, tmp_path):
    o = Omni(config=omni_home)
    for name in ("web", "ref"):
        o.create_table(name, bucket_count=2)  # ~40 rows a bucket: many slices each
        o.register_features(name, [U.t_parse, U.t_len, U.t_digits, U.t_lang])
        for tag, n in (("a", 45), ("b", 35)):
            o.submit(name, [str(pages_jsonl(tmp_path, tag, n))], batch=tag, progress=False)
        o.backfill(name, ["t_len", "t_digits", "t_lang"], isolation="inline", progress=False)
    return o


class _Counted:
    """Counts the slices ``iter_slices`` yields (the bound must really cut the buckets)."""

    def __init__(self, monkeypatch):
        self.slices = 0
        real = slices.iter_slices

        def counted(parts, **kw):
            for got in real(parts, **kw):
                self.slices += 1
                yield got

        monkeypatch.setattr(slices, "iter_slices", counted)


def _small(monkeypatch) -> _Counted:
    monkeypatch.setattr(slices, "slice_bytes", lambda: SMALL)
    return _Counted(monkeypatch)


def _rows(omni: Omni, name: str, as_of: int | None = None):
    return sorted(omni.read(name, columns=COLUMNS, as_of=as_of).to_pylist(), key=lambda r: r["_ai_unique_id_"])


def _same(omni: Omni) -> None:
    assert _rows(omni, "web") == _rows(omni, "ref")
    assert omni.query(QUERY.format(t="web")).to_pylist() == omni.query(QUERY.format(t="ref")).to_pylist()
    assert omni.verify_index("web").ok


def _files_rows(omni: Omni, name: str, key: str) -> list[list[tuple]]:
    """Each data file of a physical table as its (batch, id) keys in file order, files sorted."""
    import pyarrow.parquet as pq

    t = omni.state(name).physical_table(key)
    ice = omni.catalog.load_table(t.identifier)
    out = []
    for task in ice.scan(snapshot_id=t.snapshot_id).plan_files():
        data = pq.read_table(task.file.file_path.removeprefix("file://"), columns=[BATCH_COLUMN, ID_COLUMN])
        out.append(list(zip(data.column(0).to_pylist(), data.column(1).to_pylist())))
    return sorted(out)


def test_regroup_in_slices_writes_what_a_whole_regroup_writes(omni, monkeypatch):
    before = omni.state("web").version
    omni.regroup("ref")
    counted = _small(monkeypatch)
    omni.regroup("web")
    assert counted.slices > 8  # two buckets, each cut in several ranges
    _same(omni)
    group_web = omni.state("web").read_parts("t_len")[0].table
    group_ref = omni.state("ref").read_parts("t_len")[0].table
    web_files = _files_rows(omni, "web", group_web)
    # more, smaller files; together the same rows, each file in (batch, id) order, and the
    # bucket's files in turn continue that order (slices come in ascending key order)
    assert len(web_files) > len(_files_rows(omni, "ref", group_ref))
    assert sorted(k for f in web_files for k in f) == sorted(k for f in _files_rows(omni, "ref", group_ref) for k in f)
    assert all(f == sorted(f) for f in web_files)
    assert _rows(omni, "web", as_of=before) == _rows(omni, "ref")  # the old version reads the old layout


def test_a_later_batch_regrouped_in_slices_merges_with_the_group(omni, tmp_path, monkeypatch):
    omni.regroup("web")
    omni.regroup("ref")
    for name in ("web", "ref"):
        omni.submit(name, [str(pages_jsonl(tmp_path, "c", 30))], batch="c", progress=False)
        omni.backfill(name, ["t_len", "t_digits", "t_lang"], isolation="inline", progress=False)
    counted = _small(monkeypatch)
    omni.regroup("web")
    assert counted.slices > 4
    monkeypatch.undo()
    omni.regroup("ref")
    _same(omni)


def test_split_in_slices_moves_the_same_values(omni, monkeypatch):
    omni.regroup("web")
    omni.regroup("ref")
    omni.split_columns("ref", ["t_len"])
    counted = _small(monkeypatch)
    omni.split_columns("web", ["t_len"])
    assert counted.slices > 4
    _same(omni)
    state = omni.state("web")
    assert state.physical_table(state.read_parts("t_len")[0].table).key.startswith("g_split_")


def test_materialize_in_slices_copies_the_same_rows(omni, monkeypatch):
    materialize(omni.store, "ref", ["t_len", "t_digits", "RawData.raw_data"])
    counted = _small(monkeypatch)
    report = materialize(omni.store, "web", ["t_len", "t_digits", "RawData.raw_data"])
    assert counted.slices > 8 and report["rows_written"] == 80
    _same(omni)
    web, ref = omni.state("web"), omni.state("ref")
    [key] = web.fresh_materialized_tables()
    assert ref.fresh_materialized_tables() == {key}

    def copy(name: str) -> list[dict]:
        t = omni.state(name).physical_table(key)
        rows = omni.catalog.load_table(t.identifier).scan(snapshot_id=t.snapshot_id).to_arrow().to_pylist()
        return sorted(rows, key=lambda r: r[ID_COLUMN])

    assert copy("web") == copy("ref") and len(copy("web")) == 80


def test_a_record_larger_than_the_limit_is_named_and_nothing_is_committed(omni, monkeypatch):
    before = omni.state("web")
    rows = _rows(omni, "web")
    monkeypatch.setattr(slices, "slice_bytes", lambda: 1)
    monkeypatch.setattr(slices, "memory_limit_bytes", lambda: 8)
    with pytest.raises(slices.RecordTooLargeError) as err:
        materialize(omni.store, "web", ["t_len", "RawData.raw_data"])
    message = str(err.value)
    rid = message.split("record ", 1)[1].split(" ", 1)[0]
    assert rid in {r["_ai_unique_id_"] for r in rows}
    assert "OMNI_MEMORY_LIMIT_MB" in message and "nothing was committed" in message
    with pytest.raises(slices.RecordTooLargeError, match="regroup of"):
        omni.regroup("web")
    monkeypatch.undo()
    after = omni.state("web")
    assert after.version == before.version and not after.materializations
    assert not [t for t in after.tables if t.role == "column-group"]
    assert _rows(omni, "web") == rows
    for t in after.tables:  # no staging branch left behind on any physical table
        refs = omni.catalog.load_table(t.identifier).metadata.refs
        assert set(refs) == {"main"}, (t.identifier, set(refs))


def test_cuts_come_in_key_order_and_cover_every_row(omni):
    state = omni.state("web")
    base = state.base_table
    ice = omni.catalog.load_table(base.identifier)
    files = [t.file for t in ice.scan(snapshot_id=base.snapshot_id).plan_files()]
    part = slices.Part(ice, files, (ID_COLUMN, BATCH_COLUMN))
    got = [t[0] for t in slices.iter_slices([part], limit=300)]
    assert len(got) > 10
    keys = [list(zip(t.column(BATCH_COLUMN).to_pylist(), t.column(ID_COLUMN).to_pylist())) for t in got]
    flat = [k for ks in keys for k in ks]
    assert sorted(flat) == sorted(zip(*(slices.read(part).column(c).to_pylist() for c in (BATCH_COLUMN, ID_COLUMN))))
    assert len(set(flat)) == len(flat) == 80
    for a, b in zip(keys, keys[1:]):  # every key of a slice is below every key of the next
        if a and b:
            assert max(a) < min(b)
    assert isinstance(got[0], pa.Table)
