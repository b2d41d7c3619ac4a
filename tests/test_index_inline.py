"""Inline index values: what a file's rows encode to decodes back to the same values.

Three decoders exist - whole arrays per file (bulk reads), row by row across files
(small point lookups) and whole arrays across files of many layouts (large lookups) -
and all must agree with the data, nulls, non-ASCII text and all.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from omni_iceberg.index import inline as I


def _columns(rnd: random.Random, n: int) -> list[tuple[str, pa.Array]]:
    def maybe(v):
        return None if rnd.random() < 0.15 else v

    words = ["a", "héllo", "日本", "", "x" * 40, "url://example.org/p?q=1"]
    return [
        ("i8", pa.array([maybe(rnd.randint(-2 ** 62, 2 ** 62)) for _ in range(n)], pa.int64())),
        ("i4", pa.array([maybe(rnd.randint(-2 ** 30, 2 ** 30)) for _ in range(n)], pa.int32())),
        ("u2", pa.array([maybe(rnd.randint(0, 65535)) for _ in range(n)], pa.uint16())),
        ("f8", pa.array([maybe(rnd.random() * 1e6) for _ in range(n)], pa.float64())),
        ("f4", pa.array([maybe(0.5 * rnd.randint(0, 100)) for _ in range(n)], pa.float32())),
        ("b", pa.array([maybe(rnd.random() < 0.5) for _ in range(n)], pa.bool_())),
        ("s", pa.array([maybe(rnd.choice(words)) for _ in range(n)], pa.string())),
        ("ascii", pa.array([maybe(f"https://example.org/{i}") for i in range(n)], pa.string())),
        ("y", pa.array([maybe(bytes(rnd.randrange(256) for _ in range(rnd.randrange(5)))) for _ in range(n)],
                       pa.binary())),
        ("nulls", pa.array([None] * n, pa.string())),
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_both_decoders_return_the_encoded_values(seed):
    rnd = random.Random(seed)
    n = 300
    cols = _columns(rnd, n)
    layout = I.plan(cols)
    assert [s.name for s in layout.slots] == [name for name, _ in cols]
    rows = I.split_rows(I.encode(layout, dict(cols), n))
    assert all(len(r) == layout.row_bytes for r in rows)
    pick = rnd.sample(range(n), 40)
    names = [name for name, _ in cols]
    by_array = I.decode(layout, [rows[i] for i in pick], names)
    by_row = I.decode_rows([(layout, rows[i]) for i in pick], names)
    across = I.decode_columns([b"pos!" + rows[i] for i in pick], 4, [layout], np.zeros(len(pick), np.int64), names)
    one_by_one = [I.decode_row(layout, b"pos!" + rows[i], 4, names) for i in pick]
    for name, arr in cols:
        expected = [arr[i].as_py() for i in pick]
        assert [row[name] for row in one_by_one] == expected, name
        assert by_array[name].to_pylist() == expected, name
        assert by_row[name].to_pylist() == expected, name
        assert across[name].to_pylist() == expected, name
        assert by_row[name].type == by_array[name].type == across[name].type


def test_rows_of_many_layouts_decode_as_arrays_in_the_order_given():
    """Files differ in string widths and slot sets; rows come interleaved, as a lookup reads them."""
    rnd = random.Random(9)
    files = []
    for f in range(6):
        cols = _columns(rnd, 20 + f)
        if f % 2:
            cols = [c for c in cols if c[0] != "u2"]  # another slot set: offsets move
        layout = I.plan(cols)
        files.append((layout, dict(cols), I.split_rows(I.encode(layout, dict(cols), 20 + f))))
    picks = [(rnd.randrange(6), None) for _ in range(200)]
    picks = [(f, rnd.randrange(20 + f)) for f, _ in picks]
    names = ["i8", "f8", "b", "s", "ascii", "y", "nulls"]
    got = I.decode_columns([b"\0\0\0\1" + files[f][2][r] for f, r in picks], 4, [lay for lay, _, _ in files],
                           np.array([f for f, _ in picks], np.int64), names)
    for name in names:
        assert got[name].to_pylist() == [files[f][1][name][r].as_py() for f, r in picks], name


def test_a_leaf_of_another_kind_in_one_layout_is_left_to_the_row_decoder():
    a, b = I.plan([("v", pa.array([1], pa.int64()))]), I.plan([("v", pa.array(["1"]))])
    rows = [I.split_rows(I.encode(a, {"v": pa.array([1], pa.int64())}, 1))[0],
            I.split_rows(I.encode(b, {"v": pa.array(["1"])}, 1))[0]]
    assert I.decode_columns(rows, 0, [a, b], np.array([0, 1]), ["v"]) is None


def test_a_sliced_array_and_rows_of_two_layouts_decode_together():
    a = pa.array(["zz", "abc", None, "q"]).slice(1, 3)
    b = pa.array(["much longer text"])
    la, lb = I.plan([("t", a)]), I.plan([("t", b)])
    assert la != lb  # widths follow each file's longest value
    ra, rb = I.split_rows(I.encode(la, {"t": a}, 3)), I.split_rows(I.encode(lb, {"t": b}, 1))
    got = I.decode_rows([(la, ra[0]), (lb, rb[0]), (la, ra[1])], ["t"])
    assert got["t"].to_pylist() == ["abc", "much longer text", None]


def test_long_values_and_wide_rows_stay_out():
    long = pa.array(["x" * (I.STRING_MAX + 1)])
    assert I.plan([("long", long)]).slots == ()
    many = [(f"c{i}", pa.array([1.0], pa.float64())) for i in range(200)]  # 1,600 bytes of doubles
    layout = I.plan(many)
    assert layout.row_bytes <= I.ROW_MAX and 0 < len(layout.slots) < 200


# ---- what indexing a file writes: ids from Arrow, entries in key order ----------------------
def _md5s(n: int) -> list[str]:
    import hashlib

    return [hashlib.md5(str(i).encode()).hexdigest() for i in range(n)]


@pytest.mark.parametrize("kind", ["string", "large_string", "chunked", "sliced"])
def test_ids_from_the_arrow_column_decode_as_the_strings_do(kind):
    ids = _md5s(300)
    arr = {"string": lambda: pa.array(ids), "large_string": lambda: pa.array(ids, pa.large_string()),
           "chunked": lambda: pa.chunked_array([ids[:120], ids[120:]]),
           "sliced": lambda: pa.array(["f" * 32] * 7 + ids).slice(7)}[kind]()
    rows = I.IndexedRows(arr, I.Layout(), None)
    assert len(rows) == 300 and rows.ids == ids
    for lo, hi in ((0, 300), (17, 41), (290, 999)):
        want = np.frombuffer(bytes.fromhex("".join(ids[lo:hi])), np.uint8).reshape(-1, 16)
        assert (rows.id_keys(lo, hi) == want).all()


def test_ids_that_are_not_all_32_hex_digits_take_the_checked_path():
    ids = _md5s(3)
    assert I._hex_matrix(pa.array(ids + ["ab"]), 16) is None  # another length
    assert I._hex_matrix(pa.array(ids + [None]), 16) is None
    assert I._hex_matrix(pa.array(ids + ["zz" * 16]), 16) is None
    with pytest.raises(ValueError, match="non-hexadecimal"):  # a bad id still fails loudly
        I.IndexedRows(pa.array(ids + ["zz" * 16]), I.Layout(), None).id_keys(0, 4)


def test_entries_of_several_files_reach_lmdb_as_one_sorted_run_per_value_width():
    from omni_iceberg.index.backend import FileEntries
    from omni_iceberg.index.lmdb_backend import _chunks, _runs

    rnd = np.random.default_rng(7)

    def file(n: int, width: int) -> FileEntries:
        return FileEntries(b"k", rnd.integers(0, 256, (n, 24), np.uint8), rnd.integers(0, 256, (n, width), np.uint8))

    files = [file(50, 8), file(70, 8), file(30, 12), file(0, 8)]
    loose = (b"i" * 16, b"f" * 8, 3, b"v")
    runs = _runs(files + [loose])
    assert [len(k) for k, _ in runs] == [120, 30, 1]
    for (keys, values), members in zip(runs[:2], ([files[0], files[1]], [files[2]])):
        assert keys == sorted(keys)
        want = dict(zip((k for f in members for k in I.split_rows(f.key_matrix)),
                        (v for f in members for v in I.split_rows(f.value_matrix))))
        assert dict(zip(keys, values)) == want  # each key kept its own value
    assert runs[2] == ([b"i" * 16 + b"f" * 8], [(3).to_bytes(4, "big") + b"v"])
    # cut into transactions: every entry once, in order, none larger than asked
    chunks = _chunks(runs, 40)
    assert all(sum(len(k) for k, _ in c) <= 40 for c in chunks)
    assert [k for c in chunks for ks, _ in c for k in ks] == [k for ks, _ in runs for k in ks]
    assert _chunks(runs, None) == [runs]


def test_distinct_small_codes_match_numpy_unique_and_the_module_examples_hold():
    """The lookup's mark-array distinct (no sort) must give exactly np.unique's answer."""
    import doctest

    rng = np.random.default_rng(3)
    for size in (1, 2, 17, 1000):
        for n in (0, 1, 5, 3000):
            codes = rng.integers(0, size, n)
            assert I.distinct_small(codes, size).tolist() == np.unique(codes).tolist()
            assert I.count_distinct(codes, size) == len(np.unique(codes))
    assert doctest.testmod(I).failed == 0


def test_decoding_through_a_file_table_agrees_and_the_table_grows_with_new_files():
    """Lookups read per-file facts from the index's FileTable (fids, arrays); the same rows
    decode the same as through the layouts, before and after more files are registered,
    and a coverage sees only its table's visible, unretired files."""
    from types import SimpleNamespace

    from omni_iceberg.index.backend import FileRecord
    from omni_iceberg.index.file_table import FileTable

    rnd = random.Random(4)
    table = FileTable()
    files = []
    for f in range(8):
        cols = _columns(rnd, 10 + f)
        if f % 3 == 1:
            cols = [c for c in cols if c[0] != "u2"]
        layout = I.plan(cols)
        rec = FileRecord(path=f"file:///f{f}.parquet", table="ns.t" if f < 6 else "ns.other",
                         run=f"r{f % 2}", batch="" if f == 5 else "b", rows=10 + f)
        files.append((layout, dict(cols), I.split_rows(I.encode(layout, dict(cols), 10 + f))))
        fid = table.add(1000 + f, bytes([f]) * 8, rec, layout)
        assert fid == f and table.add(1000 + f, bytes([f]) * 8, rec, layout) == f  # registered once
        if f == 3:  # a lookup in between: the arrays are extended later, not rebuilt wrong
            cov = SimpleNamespace(table="ns.t", snapshot_id=1, visible_runs=frozenset({"r0"}),
                                  retired=frozenset({bytes([2]) * 8}))
            assert table.visible(cov).tolist() == [True, False, False, False]
    assert table.visible(cov).tolist() == [True, False, False, False, True, False, False, False]
    assert table.batchless().tolist() == [f == 5 for f in range(8)]
    assert table.value_width().tolist() == [4 + lay.row_bytes for lay, _, _ in files]
    names = ["i8", "f8", "b", "s", "ascii", "y", "nulls"]
    picks = [(f, rnd.randrange(10 + f)) for f in (rnd.randrange(8) for _ in range(150))]
    values = [b"\0\0\0\1" + files[f][2][r] for f, r in picks]
    codes = np.array([f for f, _ in picks], np.int64)
    lengths = np.array([len(v) for v in values])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) + 4
    buf = np.frombuffer(b"".join(values), np.uint8)
    used = sorted(set(codes.tolist()))
    got = I.decode_column_arrays(buf, starts, table.layouts, codes, names, used, table)
    plain = I.decode_columns(values, 4, table.layouts, codes, names)
    for name in names:
        assert got[name].to_pylist() == plain[name].to_pylist() == [files[f][1][name][r].as_py() for f, r in picks]
    assert table.leaves(["u2"])[0].tolist() == [f % 3 != 1 for f in range(8)]
    assert I.decode_column_arrays(buf, starts, table.layouts, codes, ["u2"], used, table) is None  # not in all
