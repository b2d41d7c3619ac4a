"""Bounded-memory reads (#37 items 2, 3): a bucket larger than a slice of ``OMNI_MEMORY_LIMIT_MB``
is read id range by id range, and every operation built on it - the sliced logical read,
export, hot-column sync, the local backfill - gives the same results as a whole read.

The slice size is made tiny here (a few KB) so that real documents need many ranges; the
same code runs at any size.
"""

from __future__ import annotations

import json
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_iceberg.api import Omni
from omni_iceberg.demo import corpora
from omni_iceberg.explore import export as export_module
from omni_iceberg.features import feature
from omni_iceberg.read import reader
from omni_iceberg.read.reader import RecordTooLargeError, id_ranges, iter_logical_slices
from tests import feature_udfs as U

@feature(outputs={"bm_len": "long"}, inputs=["RawData.raw_data"])
def bm_len(raw_data):
    return len(raw_data)


TINY = 40_000  # bytes a slice may take in these tests: the 40 pages need ~30 ranges a bucket


def _build(home) -> Omni:
    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:40]
    o = Omni(home=home)
    o.create_table("web")
    o.submit("web", [str(p) for p in pages[:25]], batch="cc")
    o.submit("web", [str(p) for p in pages[25:]], batch="wiki")
    o.register_features("web", [U.t_parse, U.t_lang, U.t_len, U.t_digits])
    return o


@pytest.fixture
def omni(tmp_path):
    o = _build(tmp_path / "home")
    o.backfill("web", ["t_len", "t_lang", "t_digits"], isolation="inline")
    return o


def _tiny_slices(monkeypatch, size: int = TINY) -> None:
    monkeypatch.setattr(reader, "slice_bytes", lambda: size)
    monkeypatch.setattr(export_module, "slice_bytes", lambda: size)


def _by_id(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["_ai_unique_id_"])


def test_id_ranges_hold_every_string_exactly_once_in_order():
    rng = random.Random(7)
    alphabet = "0123456789abcdefABCDEF-_xyz\u00e9\u4e2d"
    ids = ["", "0", "ffff", "ffffffff", "4000", "3fff\uffff", "\U0001f600"]
    ids += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 36))) for _ in range(3000)]
    for count in (1, 2, 3, 7, 16, 1000):
        ranges = id_ranges(count)
        assert len(ranges) == count and ranges[0][0] is None and ranges[-1][1] is None
        placed = []
        for i in ids:
            hits = [k for k, (lo, hi) in enumerate(ranges) if (lo is None or i >= lo) and (hi is None or i < hi)]
            assert len(hits) == 1, (i, hits)
            placed.append(hits[0])
        # concatenating the ranges in order sorts the ids
        assert sorted(ids) == sorted(ids, key=lambda i: (placed[ids.index(i)], i))


def test_a_sliced_read_holds_the_rows_of_a_whole_read(omni, monkeypatch):
    state = omni.store.load("aidata", "web")
    cols = ["RawData.raw_data", "t_len", "t_lang", "t_digits"]
    whole = list(iter_logical_slices(omni.catalog, state, cols, "cc"))
    _tiny_slices(monkeypatch)
    sliced = list(iter_logical_slices(omni.catalog, state, cols, "cc"))
    assert len(sliced) > 2 * len(whole)  # many ranges a bucket
    assert max(s.num_rows for s in sliced) < max(w.num_rows for w in whole)
    whole_t, sliced_t = pa.concat_tables(whole), pa.concat_tables(sliced)
    assert sliced_t.schema == whole_t.schema and sliced_t.num_rows == 25
    assert _by_id(sliced_t) == _by_id(whole_t)
    # within a bucket the ranges come in id order
    firsts = [s.column("_ai_unique_id_")[0].as_py() for s in sliced if s.num_rows]
    assert any(a < b for a, b in zip(firsts, firsts[1:]))


def test_a_sliced_export_writes_the_bytes_a_whole_one_does(omni, tmp_path, monkeypatch):
    cols = ["_ai_unique_id_", "t_len", "t_lang", "RawData.raw_data"]
    whole = omni.export("web", str(tmp_path / "whole"), columns=cols, where="t_len > 0")
    spilled = []
    real = export_module._export_spilled
    monkeypatch.setattr(export_module, "_export_spilled", lambda *a, **k: spilled.append(a[1].batch) or real(*a, **k))
    _tiny_slices(monkeypatch)
    # a replay of the whole export, read range by range and spilled: the same files, byte for byte
    again = omni.export_from_manifest(str(tmp_path / "whole"), str(tmp_path / "again"))
    assert spilled, "the replay took the bounded path"
    assert [(f["file"], f["sha256"]) for f in again.manifest["files"]] == \
        [(f["file"], f["sha256"]) for f in whole.manifest["files"]]
    for f in whole.manifest["files"]:
        assert (tmp_path / "whole" / f["file"]).read_bytes() == (tmp_path / "again" / f["file"]).read_bytes()
    # a new export under the small limit: more, smaller parts and files; the same rows; each
    # part's files in name order are the part sorted by id; and it is deterministic
    small = omni.export("web", str(tmp_path / "small"), columns=cols, where="t_len > 0")
    assert len(small.manifest["files"]) > len(whole.manifest["files"])
    read = lambda d, m: pa.concat_tables([pq.read_table(d / f["file"]) for f in m["files"]])  # noqa: E731
    assert _by_id(read(tmp_path / "small", small.manifest)) == _by_id(read(tmp_path / "whole", whole.manifest))
    parts: dict = {}
    for f in small.manifest["files"]:
        parts.setdefault((f["batch"], f["bucket"]), []).append(f)
    for files in parts.values():
        ids = [i for f in sorted(files, key=lambda f: f["file"])
               for i in pq.read_table(tmp_path / "small" / f["file"]).column(0).to_pylist()]
        assert ids == sorted(ids)
    twice = omni.export("web", str(tmp_path / "twice"), columns=cols, where="t_len > 0")
    assert [f["sha256"] for f in twice.manifest["files"]] == [f["sha256"] for f in small.manifest["files"]]
    replay = omni.export_from_manifest(str(tmp_path / "small"), str(tmp_path / "replay"))
    assert [f["sha256"] for f in replay.manifest["files"]] == [f["sha256"] for f in small.manifest["files"]]
    jl = omni.export("web", str(tmp_path / "jl"), columns=["_ai_unique_id_", "t_len"], fmt="jsonl")
    monkeypatch.undo()
    jl_whole = omni.export("web", str(tmp_path / "jl_whole"), columns=["_ai_unique_id_", "t_len"], fmt="jsonl")
    lines = lambda d, m: sorted(l for f in m["files"] for l in (d / f["file"]).read_text().splitlines())  # noqa: E731,E741
    assert lines(tmp_path / "jl", jl.manifest) == lines(tmp_path / "jl_whole", jl_whole.manifest)


def test_a_sliced_backfill_computes_what_a_whole_one_does(tmp_path, monkeypatch):
    whole = _build(tmp_path / "whole")
    whole.backfill("web", ["t_len", "t_lang", "t_digits"], isolation="inline")
    sliced = _build(tmp_path / "sliced")
    _tiny_slices(monkeypatch)
    sliced.backfill("web", ["t_len", "t_lang", "t_digits"], isolation="inline")
    cols = ["_ai_unique_id_", "_ai_append_name_", "t_len", "t_lang", "t_digits"]
    a, b = whole.read("web", columns=cols), sliced.read("web", columns=cols)
    assert a.num_rows == b.num_rows == 40 and _by_id(a) == _by_id(b)
    assert a.column("t_len").null_count == 0
    lineage = lambda o: sorted((r["feature"], r["batch"], r["rows"]) for r in  # noqa: E731
                               o.query("SELECT feature, batch, rows FROM omni_sys.lineage").to_pylist())
    assert lineage(whole) == lineage(sliced) and lineage(whole)


def test_a_record_larger_than_the_limit_is_named_and_nothing_is_committed(omni, tmp_path, monkeypatch):
    sizes = {r["_ai_unique_id_"]: len(r["RawData"]["raw_data"].encode())
             for r in omni.read("web", columns=["_ai_unique_id_", "RawData"]).to_pylist()}
    limit = max(sizes.values()) // 2
    monkeypatch.setattr(reader, "memory_limit_bytes", lambda: limit)
    _tiny_slices(monkeypatch, 10 * limit)
    state = omni.store.load("aidata", "web")
    with pytest.raises(RecordTooLargeError) as e:
        list(iter_logical_slices(omni.catalog, state, ["RawData.raw_data"], "cc"))
    named = re.search(r"record ([0-9a-f]{32}) of batch cc of aidata\.web holds ([\d,]+) bytes", str(e.value))
    assert named and sizes[named.group(1)] > limit and f"({limit / (1 << 20):g} MiB)" in str(e.value)
    assert "OMNI_MEMORY_LIMIT_MB" in str(e.value)
    # a backfill reading the raw text stops before its commit: the table's version stays
    omni.register_features("web", [bm_len])
    version = omni.store.load("aidata", "web").version
    with pytest.raises(RecordTooLargeError, match="record [0-9a-f]{32} of batch (cc|wiki) of aidata.web"):
        omni.backfill("web", ["bm_len"], isolation="inline")
    assert omni.store.load("aidata", "web").version == version
    assert omni.read("web", columns=["bm_len"]).column("bm_len").null_count == 40
    # an export stops and leaves no folder behind
    with pytest.raises(RecordTooLargeError, match="record [0-9a-f]{32} of the export of batch"):
        omni.export("web", str(tmp_path / "ex"), columns=["_ai_unique_id_", "RawData.raw_data"])
    assert not (tmp_path / "ex").exists()


def test_a_sliced_hot_sync_loads_the_rows_of_the_table(omni, hot_dsn, monkeypatch):
    pytest.importorskip("chdb")
    from omni_iceberg.explore.planner import execute_local, plan_query

    monkeypatch.setenv("OMNI_HOT", hot_dsn)
    _tiny_slices(monkeypatch)
    report = omni.accelerate("web", hot=["t_len", "t_lang"])
    assert report["plan"]["action"] == "create" and report["rows_loaded"] == 40
    sql = ("SELECT _ai_append_name_, t_lang, count(*) AS n, sum(t_len) AS s, min(t_len) AS lo FROM web "
           "GROUP BY 1, 2 ORDER BY 1, 2")
    assert plan_query(omni, sql).hot.use
    assert omni.query(sql).to_pylist() == execute_local(omni, plan_query(omni, sql)).to_pylist()


def test_write_buffer_follows_the_memory_limit(monkeypatch):
    """The default write buffer is a sixteenth of OMNI_MEMORY_LIMIT_MB, at most the setting's
    declared 128 MiB; an explicit OMNI_WRITE_BUFFER_BYTES wins whatever the limit."""
    from catalog_ext import physical

    monkeypatch.setattr(physical, "WRITE_BUFFER_BYTES", None)
    monkeypatch.setenv("OMNI_MEMORY_LIMIT_MB", "256")
    assert physical.write_buffer_bytes() == 16 << 20
    monkeypatch.setenv("OMNI_MEMORY_LIMIT_MB", "1024")
    assert physical.write_buffer_bytes() == 64 << 20
    monkeypatch.setenv("OMNI_MEMORY_LIMIT_MB", "65536")
    assert physical.write_buffer_bytes() == 128 << 20
    monkeypatch.setattr(physical, "WRITE_BUFFER_BYTES", 5000)
    assert physical.write_buffer_bytes() == 5000


@pytest.mark.parametrize("seed", [21, 22])
def test_a_seal_streamed_in_tiny_steps_matches_a_model(tmp_path, monkeypatch, seed):
    """The seal's external merge, cut into steps of 3 old entries and delta chunks of 5 (so
    nearly every step boundary and chunk edge falls inside a run of ids sharing their first
    8 bytes), gives the same entries as a model through writes, re-writes, deletes and seals."""
    import omni_iceberg.index.lmdb_backend as lmdb_backend
    import omni_iceberg.index.sealed as sealed
    from omni_iceberg.index.lmdb_backend import LmdbBackend
    from tests.test_index_sealed import FILES, _lookup, _model_lookup

    monkeypatch.setattr(sealed, "MERGE_STEP", 3)
    monkeypatch.setattr(lmdb_backend, "SEAL_READ_CHUNK", 5)
    rnd = random.Random(seed)
    prefixes = [rnd.getrandbits(64).to_bytes(8, "big") for _ in range(12)]  # many ids share each
    universe = list({rnd.choice(prefixes) + rnd.getrandbits(64).to_bytes(8, "big") for _ in range(300)})
    backend = LmdbBackend(tmp_path / "idx")
    model: dict[tuple[bytes, bytes], bytes] = {}
    seals = 0
    for step in range(30):
        action = rnd.random()
        if action < 0.5:
            batch = []
            for rid in rnd.sample(universe, 40):
                fk, pos = rnd.choice(FILES), rnd.randrange(1 << 20)
                inline = bytes(rnd.randrange(256) for _ in range(rnd.randrange(6)))
                batch.append((rid, fk, pos, inline))
                model[(rid, fk)] = pos.to_bytes(4, "big") + inline
            backend.put_entries(batch)
        elif action < 0.65 and model:
            gone = rnd.sample(sorted(model), min(10, len(model)))
            backend.delete_entries(gone)
            for key in gone:
                del model[key]
        else:
            report = backend.seal(progress=False)
            seals += 1
            assert report.entries == len(model)
        asked = rnd.sample(universe, rnd.choice([1, 50, 300]))
        assert _lookup(backend, asked) == _model_lookup(model, asked), f"step {step}"
    backend.seal(progress=False)
    assert seals >= 3
    assert sorted((r, f) for r, f, *_ in backend.scan_entries()) == sorted(model)
    backend.close()
