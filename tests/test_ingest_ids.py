"""Ingest's column-at-a-time parts hold to what they replace: ids as ``content_id`` makes them,
in-batch dedup as a set of the ids would decide, blank raw content as ``str.strip()`` says,
and the writer's buffer weight as the copied table had it."""

from __future__ import annotations

import random
import sys

import numpy as np
import pyarrow as pa
import pytest

from omni_iceberg.ingest import identity, pipeline
from omni_iceberg.ingest.dedup import BatchIds, id_halves
from omni_iceberg.ingest.identity import content_id, content_ids


@pytest.mark.parametrize("n", [0, 1, 50, identity.VECTOR_MIN, 3 * identity.VECTOR_MIN + 7])
def test_content_ids_are_content_id_of_each_value(n):
    rnd = random.Random(n)
    alphabet = ["a", "Z", " ", "\x00", "é", "\u3000", "\u200b", "😀", "\U0010fffd", "\n"]
    values = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 40))) for _ in range(n + 3)]
    arr = pa.array(values, pa.string()).slice(3)  # an offset into the buffers, as a block's filtered column
    assert content_ids(arr).to_pylist() == [content_id(v) for v in values[3:]]
    assert content_ids(pa.chunked_array([arr, arr], pa.string())).to_pylist() == [content_id(v) for v in values[3:]] * 2
    assert content_ids(values[3:]).to_pylist() == [content_id(v) for v in values[3:]]


def test_content_ids_refuse_nulls():
    with pytest.raises(ValueError):
        content_ids(pa.array(["a", None]))


def _ids(values):
    return pa.array(values, pa.string())


@pytest.mark.parametrize("spill", [False, True])
def test_batch_ids_decide_as_a_set_of_the_ids_would(spill, tmp_path, monkeypatch):
    """``spill``: the bound is a few dozen ids and blocks hold 4, so most ids are looked up
    on disk through the filter (a filter of 1,024 bits: false yeses are common too)."""
    if spill:
        monkeypatch.setattr(BatchIds, "BLOCK", 4)
    rnd = random.Random(7)
    spilled = 0
    for _ in range(200):
        pool = [content_id(str(i)) for i in range(rnd.randrange(1, 300))]
        # ids sharing their first 64 bits: runs sort by that half only
        pool += [pool[0][:16] + f"{rnd.randrange(2 ** 64):016x}" for _ in range(4)]
        seen = BatchIds(memory_bytes=16 * rnd.randrange(1, 40), spill_dir=str(tmp_path)) if spill else BatchIds()
        model = set()
        for _ in range(rnd.randrange(1, 40)):
            op = rnd.random()
            if op < 0.7:
                ids = [rnd.choice(pool) for _ in range(rnd.randrange(0, 80))]
                expected = []
                for x in ids:
                    expected.append(x not in model)
                    model.add(x)
                assert seen.add(_ids(ids)).tolist() == expected
            elif op < 0.85:
                gone = set(rnd.sample(pool, rnd.randrange(0, min(20, len(pool)))))
                seen.discard(gone)
                model -= gone
            else:
                ids = [rnd.choice(pool) for _ in range(rnd.randrange(0, 80))]
                assert seen.contains(_ids(ids)).tolist() == [x in model for x in ids]
            assert len(seen) == len(model)
        spilled += seen.spilled
        seen.close()
    assert (spilled > 1000) == spill
    assert not list(tmp_path.iterdir())  # closed: every spilled run is gone


def test_batch_ids_past_the_limit_hold_the_limit_and_spill_the_rest(tmp_path):
    seen = BatchIds(memory_bytes=16 * 50_000, spill_dir=str(tmp_path))
    ids = content_ids(pa.array([f"record {i}" for i in range(200_000)]))
    for at in range(0, len(ids), 10_000):
        assert seen.add(ids.slice(at, 10_000)).all()
    held = sum(h.nbytes + lo.nbytes for h, lo, _ in seen._runs)
    assert held <= 16 * 50_000 and seen.spilled == 200_000 - held // 16 and len(seen) == 200_000
    assert len(list(tmp_path.iterdir())) == 1  # one folder of this object's runs
    again = seen.add(pa.chunked_array([ids.slice(5, 3), ids.slice(199_990, 10)]))
    assert not again.any() and seen.contains(ids.slice(0, 100)).all()
    seen.discard(ids.slice(0, 7).to_pylist())
    assert len(seen) == 200_000 - 7 and seen.contains(ids.slice(0, 10)).tolist() == [False] * 7 + [True] * 3
    assert seen.add(ids.slice(0, 10)).tolist() == [True] * 7 + [False] * 3
    fresh = content_ids(pa.array([f"other {i}" for i in range(20_000)]))
    assert seen.add(fresh).all() and seen.contains(fresh.slice(0, 10)).all()
    seen.close()
    assert not list(tmp_path.iterdir())


def test_id_halves_take_only_md5_hex():
    hi, lo = id_halves(_ids(["00" * 8 + "ff" * 8, "0123456789abcdef" * 2]))
    assert hi.tolist() == [0, 0x0123456789ABCDEF] and lo.tolist() == [2 ** 64 - 1, 0x0123456789ABCDEF]
    for bad in (["A" * 32], ["g" * 32], ["a" * 31], ["a" * 33], [None]):
        with pytest.raises(ValueError):
            id_halves(_ids(bad))


def test_blank_is_what_strip_removes():
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    values = ["", " ", "a", " a ", None, "\u200b", "\ufeff", "x" + "".join(spaces), *spaces, "".join(spaces),
              *(s + "é" for s in spaces), "\x00", "\x7f", "~", "é", "\x01 ", *(chr(c) for c in range(0x80))]
    for arr in (pa.array(values, pa.string()), pa.array(["pad", *values], pa.string()).slice(1)):
        assert pipeline._blank(arr).tolist() == [v is None or not v.strip() for v in values]


def test_characters_are_what_len_counts():
    rnd = random.Random(5)
    alphabet = ["a", "é", "😀", "\u3000", " ", "\x00", "字"]
    for _ in range(200):
        values = ["".join(rnd.choice(alphabet[:rnd.randrange(1, 8)]) for _ in range(rnd.randrange(0, 30)))
                  for _ in range(rnd.randrange(0, 40))]
        arr = pa.array(["skip", *values], pa.string()).slice(1)
        assert pipeline._characters(arr) == sum(len(v) for v in values)


@pytest.mark.parametrize("typ", [pa.string(), pa.binary(), pa.int64(), pa.float64(), pa.bool_()])
def test_joined_nbytes_is_the_nbytes_of_the_concatenation(typ):
    rnd = random.Random(str(typ))
    make = {"string": lambda: "x" * rnd.randrange(0, 9), "binary": lambda: b"y" * rnd.randrange(0, 9),
            "int64": lambda: rnd.randrange(100), "double": lambda: rnd.random(), "bool": lambda: rnd.random() < 0.5}
    for _ in range(500):
        parts = []
        for _ in range(rnd.randrange(1, 5)):
            n = rnd.randrange(0, 40)
            if rnd.random() < 0.2:
                parts.append(pa.nulls(n, typ))
                continue
            nulls = rnd.random() < 0.4
            arr = pa.array([None if nulls and rnd.random() < 0.2 else make[str(typ)]() for _ in range(n)], typ)
            parts.append(arr.slice(1, n - 2) if n > 2 and rnd.random() < 0.3 else arr)
        assert pipeline._joined_nbytes(parts) == pa.concat_arrays(parts).nbytes
    texts = [pa.array(["ab", "c"]), pa.array(["def"])]
    assert pipeline._joined_nbytes(texts, bitmap=False) == pa.array(["ab", "c", "def"]).nbytes


def test_batch_ids_hold_a_million_ids_in_arrays():
    seen = BatchIds()
    ids = content_ids(pa.array([f"record {i}" for i in range(200_000)]))
    for at in range(0, len(ids), 10_000):
        assert seen.add(ids.slice(at, 10_000)).all()
    assert not seen.add(ids.slice(0, 10_000)).any() and len(seen) == 200_000
    held = sum(h.nbytes + lo.nbytes for h, lo, _ in seen._runs)
    assert held == 16 * 200_000 and isinstance(seen._runs[0][0], np.ndarray)
