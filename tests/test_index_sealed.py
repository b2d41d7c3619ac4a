"""The LMDB index's sealed segments: lookups give the same entries before and after a seal,
whatever is written, deleted or re-written around it (``omni_iceberg.index.sealed``)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import omni_iceberg.index.lmdb_backend as lmdb_backend
import omni_iceberg.index.sealed as sealed
from omni_iceberg.index.backend import fkey_bytes
from omni_iceberg.index.keys import file_key
from omni_iceberg.index.lmdb_backend import LmdbBackend


def _id(n: int) -> bytes:
    return n.to_bytes(16, "big")


FILES = [file_key(f"file:///f{n}.parquet") for n in range(4)]


def _model_lookup(model: dict[tuple[bytes, bytes], bytes], keys) -> set:
    want = set(keys)
    return {(rid, fk, v) for (rid, fk), v in model.items() if rid in want}


def _lookup(backend: LmdbBackend, keys) -> set:
    keys = list(dict.fromkeys(keys))
    got = backend.get_entry_arrays(keys)
    out = [(keys[at], fkey_bytes(fk), v) for at, fk, v in zip(got.asked.tolist(), got.fkeys.tolist(), got.values())]
    assert len(out) == len(set(out)), "an entry came back twice"
    return set(out)


def _value(n: int, width: int) -> bytes:
    return n.to_bytes(4, "big") + bytes([n % 251]) * width


@pytest.fixture
def backend(tmp_path):
    b = LmdbBackend(tmp_path / "idx")
    yield b
    b.close()


def test_seal_moves_every_entry_into_a_segment_and_lookups_agree(backend, tmp_path):
    model = {}
    entries = []
    for n in range(3000):
        for fk in FILES[: 1 + n % 3]:  # ids with one, two or three files, values of mixed widths
            v = _value(n, n % 7)
            entries.append((_id(n * 7919), fk, n, v[4:]))
            model[(_id(n * 7919), fk)] = v
    backend.put_entries(entries)
    asked = [_id(n * 7919) for n in range(0, 3000, 3)] + [_id(1), _id(2)]  # two unknown ids
    before = _lookup(backend, asked)
    assert before == _model_lookup(model, asked)
    report = backend.seal(progress=False)
    assert (report.generation, report.entries, report.added, report.delta_left) == (1, len(model), len(model), 0)
    assert backend._read(lambda txn: txn.stat(backend._entries)["entries"]) == 0  # the delta is empty
    assert _lookup(backend, asked) == before
    for k in (1, 2, 5, 8, 9, 40):  # the scalar path (few ids) and the array path agree
        some = random.Random(k).sample(asked, k)
        assert _lookup(backend, some) == _model_lookup(model, some)
    assert sorted((r, f) for r, f, *_ in backend.scan_entries()) == sorted(model)
    assert backend.seal(progress=False).added == 0  # nothing new: nothing rewritten


def test_writes_after_a_seal_are_found_with_it_and_sealed_by_the_next(backend, tmp_path):
    backend.put_entries([(_id(n), FILES[0], n) for n in range(100)])
    backend.seal(progress=False)
    # a later backfill adds a second file for sealed ids, an ingest adds new ids
    backend.put_entries([(_id(n), FILES[1], n + 500) for n in range(0, 100, 2)] +
                        [(_id(n), FILES[0], n) for n in range(100, 150)])
    got = backend.get_entries([_id(4), _id(5), _id(120)])
    assert sorted(got[_id(4)]) == sorted([(FILES[0], 4, b""), (FILES[1], 504, b"")])
    assert got[_id(5)] == [(FILES[0], 5, b"")] and got[_id(120)] == [(FILES[0], 120, b"")]
    report = backend.seal(progress=False)
    assert (report.generation, report.entries, report.added) == (2, 200, 100)
    assert not (tmp_path / "idx" / "sealed" / "00000001").exists()  # the old segment is gone
    assert backend.get_entries([_id(4), _id(5), _id(120)]) == got or \
        {k: sorted(v) for k, v in backend.get_entries([_id(4), _id(5), _id(120)]).items()} == \
        {k: sorted(v) for k, v in got.items()}


def test_an_entry_both_sealed_and_in_the_delta_comes_back_once(backend):
    """A seal interrupted after publishing its segment, before emptying the delta."""
    backend.put_entries([(_id(n), FILES[0], n) for n in range(50)])
    backend.seal(progress=False)
    backend.put_entries([(_id(n), FILES[0], n) for n in range(40, 60)])  # 40-49 again
    assert _lookup(backend, [_id(n) for n in range(60)]) == {(_id(n), FILES[0], n.to_bytes(4, "big"))
                                                              for n in range(60)}
    assert len(list(backend.scan_entries())) == 60
    assert backend.seal(progress=False).entries == 60  # the merge keeps one copy


def test_deleting_a_sealed_entry_hides_it_until_rewritten(backend):
    backend.put_entries([(_id(n), FILES[0], n) for n in range(20)])
    backend.seal(progress=False)
    backend.delete_entries([(_id(3), FILES[0]), (_id(4), FILES[0])])
    assert set(backend.get_entries([_id(3), _id(4), _id(5)])) == {_id(5)}
    assert len(list(backend.scan_entries())) == 18
    backend.put_entries([(_id(4), FILES[0], 99)])  # re-written after the delete: visible again
    assert backend.get_entries([_id(3), _id(4)]) == {_id(4): [(FILES[0], 99, b"")]}
    report = backend.seal(progress=False)
    assert report.entries == 19
    assert backend.get_entries([_id(3), _id(4)]) == {_id(4): [(FILES[0], 99, b"")]}
    assert backend._read(lambda txn: backend._sealed_record(txn))["tombstones"] == 0


def test_entries_written_while_a_seal_runs_stay_and_are_found(backend, monkeypatch):
    backend.put_entries([(_id(n), FILES[0], n) for n in range(30)])
    real = lmdb_backend.merge_into

    def merge_with_a_writer_meanwhile(*args, **kwargs):
        backend.put_entries([(_id(n), FILES[1], n) for n in range(25, 35)])  # another process's ingest
        return real(*args, **kwargs)

    monkeypatch.setattr(lmdb_backend, "merge_into", merge_with_a_writer_meanwhile)
    report = backend.seal(progress=False)
    assert (report.entries, report.delta_left) == (30, 10)
    got = backend.get_entries([_id(n) for n in range(35)])
    assert len(got) == 35 and sorted(got[_id(27)]) == sorted([(FILES[0], 27, b""), (FILES[1], 27, b"")])
    monkeypatch.setattr(lmdb_backend, "merge_into", real)
    assert backend.seal(progress=False).entries == 40


def test_ids_sharing_their_first_eight_bytes_are_told_apart(backend):
    twins = [bytes(8) + n.to_bytes(8, "big") for n in (5, 1, 9)]
    backend.put_entries([(twins[0], FILES[0], 0), (twins[1], FILES[0], 1)])
    backend.seal(progress=False)
    backend.put_entries([(twins[2], FILES[0], 2)])
    backend.seal(progress=False)
    for k in range(1, 4):
        assert {r: v for r, v in backend.get_entries(twins[:k]).items()} == \
            {t: [(FILES[0], p, b"")] for t, p in zip(twins[:k], (0, 1, 2))}
    # many ids at once (the array path) with the twins among them
    many = twins + [_id(n) for n in range(1, 20)]
    assert set(backend.get_entries(many)) == set(twins)


def test_a_lookup_reads_again_when_its_segment_was_replaced_under_it(backend, monkeypatch):
    backend.put_entries([(_id(n), FILES[0], n) for n in range(10)])
    backend.seal(progress=False)
    real, calls = LmdbBackend._segment, []

    def gone_once(self, generation):
        calls.append(generation)
        if len(calls) == 1:
            raise lmdb_backend._SegmentGone()
        return real(self, generation)

    monkeypatch.setattr(LmdbBackend, "_segment", gone_once)
    assert len(backend.get_entries([_id(n) for n in range(10)])) == 10 and len(calls) == 2


def test_drop_forgets_the_segment(backend, tmp_path):
    backend.put_entries([(_id(n), FILES[0], n) for n in range(10)])
    backend.seal(progress=False)
    backend.drop()
    assert backend.get_entries([_id(1)]) == {} and not list((tmp_path / "idx" / "sealed").glob("0*"))
    backend.put_entries([(_id(1), FILES[1], 7)])
    assert backend.seal(progress=False).generation == 1
    assert backend.get_entries([_id(1)]) == {_id(1): [(FILES[1], 7, b"")]}


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_writes_deletes_and_seals_match_a_model(backend, seed):
    rnd = random.Random(seed)
    model: dict[tuple[bytes, bytes], bytes] = {}
    universe = [rnd.getrandbits(128).to_bytes(16, "big") for _ in range(600)]
    for step in range(40):
        action = rnd.random()
        if action < 0.55:
            batch = []
            for rid in rnd.sample(universe, 40):
                fk = rnd.choice(FILES)
                pos = rnd.randrange(1 << 20)
                inline = bytes(rnd.randrange(256) for _ in range(rnd.randrange(6)))
                batch.append((rid, fk, pos, inline))
                model[(rid, fk)] = pos.to_bytes(4, "big") + inline
            backend.put_entries(batch)
        elif action < 0.7 and model:
            gone = rnd.sample(sorted(model), min(10, len(model)))
            backend.delete_entries(gone)
            for key in gone:
                del model[key]
        else:
            backend.seal(progress=False)
        asked = rnd.sample(universe, rnd.choice([1, 3, 50, 300]))
        assert _lookup(backend, asked) == _model_lookup(model, asked), f"step {step}"
    assert sorted((r, f) for r, f, *_ in backend.scan_entries()) == sorted(model)


def test_id_halves_keep_the_byte_order():
    keys = sorted(random.Random(2).getrandbits(128).to_bytes(16, "big") for _ in range(200))
    hi, lo = sealed.id_halves(keys)
    pairs = list(zip(hi.tolist(), lo.tolist()))
    assert pairs == sorted(pairs) and np.all(np.diff(hi.astype(np.float64)) >= 0)


def test_a_missing_segment_is_a_clear_error_naming_it(backend, tmp_path):
    import shutil

    from omni_iceberg.index.errors import IndexUnavailableError

    backend.put_entries([(_id(n), FILES[0], n) for n in range(10)])
    backend.seal(progress=False)
    lmdb_backend._SEGMENTS.clear()  # a new process: nothing mapped yet
    shutil.rmtree(tmp_path / "idx" / "sealed" / "00000001")
    with pytest.raises(IndexUnavailableError, match="00000001.*rebuild"):
        backend.get_entries([_id(1)])


def test_bulk_search_agrees_with_searchsorted_at_block_edges_and_long_runs(tmp_path):
    """The fence search and the candidate window against numpy's own search, with ids at
    block boundaries, past the last element, and one id with more entries than the window."""
    from pathlib import Path

    rnd = np.random.default_rng(3)
    n = sealed.FENCE * 5 + 37  # a partial last block
    hi = np.sort(rnd.integers(0, 2 ** 63, n, dtype=np.uint64))
    hi[100:100 + sealed.RUN_WINDOW + 5] = hi[100]  # one id's many entries
    rec = np.zeros(n, sealed.RECORD)
    rec["lo"] = 7
    rec["end"] = np.arange(1, n + 1)
    rec["start"] = rec["end"] - 1
    folder = Path(tmp_path / "seg")
    folder.mkdir()
    np.save(folder / "hi.npy", hi)
    np.save(folder / "rec.npy", rec)
    (folder / "values.bin").write_bytes(bytes(n))
    seg = sealed.Segment(folder)
    edges = hi[[0, sealed.FENCE - 1, sealed.FENCE, 2 * sealed.FENCE, n - 1]]
    queries = np.concatenate([edges, edges - 1, edges + 1, hi[rnd.integers(0, n, 200)], [hi[100]],
                              np.array([0, 2 ** 64 - 1], np.uint64)]).astype(np.uint64)
    assert seg._first_at_least(queries).tolist() == np.searchsorted(hi, queries, "left").tolist()
    owner, at = seg.find(queries, np.full(len(queries), 7, np.uint64))
    expected = sorted((int(i), int(p)) for i, q in enumerate(queries) for p in np.flatnonzero(hi == q))
    assert sorted(zip(owner.tolist(), at.tolist())) == expected
    assert len(at) == len(expected)  # each entry once (grouped by asked id, in no position order)


def test_a_bulk_read_returns_every_value_whole_up_to_the_last_byte_of_the_segment(backend):
    # bulk reads copy values into rows as wide as the longest (a strided view of the values
    # file): the values at its very end must come from an earlier row, at an offset into it
    model = {}
    entries = []
    for n in range(200):
        v = _value(n, 1 + (n * 13) % 29)
        entries.append((_id(n), FILES[n % 2], n, v[4:]))
        model[(_id(n), FILES[n % 2])] = v
    backend.put_entries(entries)
    backend.seal(progress=False)
    every = [_id(n) for n in range(200)]
    assert _lookup(backend, every) == _model_lookup(model, every)
    # the ids given as one key matrix (how bulk lookups pass them) read the same entries
    got = backend.get_entry_arrays(np.frombuffer(b"".join(every), np.uint8).reshape(-1, 16))
    assert {(every[a], fkey_bytes(fk), v) for a, fk, v in zip(got.asked.tolist(), got.fkeys.tolist(), got.values())} \
        == _model_lookup(model, every)
