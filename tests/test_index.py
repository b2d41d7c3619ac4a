"""The id index end to end on a real catalog: writers, lookups, visibility, fallback, verify, rebuild.

Ingest, backfill and compaction index their files before each logical commit (see
:mod:`omni_iceberg.index.staged`); the ``indexed_writes`` fixture points them at the
backend under test. Everything is the real pipeline: real pyiceberg catalog, real
Parquet files, real LMDB / HBase.
"""

from __future__ import annotations

import json
import uuid

import pytest

from catalog_ext.contract import ID_COLUMN
from catalog_ext.physical import StagedWrite
from catalog_ext.staging import sweep_stale_branches
from catalog_ext.store import FamilyStore
from omni_iceberg.api import Omni
from omni_iceberg.explore.lookup import get_rows
from omni_iceberg.index import (
    FOUND_COLUMN, IndexUnavailableError, MalformedIdError, open_index, rebuild, verify,
)
from omni_iceberg.index import visibility
from omni_iceberg.index.backend import RUN_PREFIX, RunRecord


class CrashBeforeCommit(RuntimeError):
    pass


@pytest.fixture(params=["lmdb", pytest.param("hbase", marks=pytest.mark.hbase)])
def spec(request):
    if request.param == "lmdb":
        return "lmdb"
    from tests.services.hbase import shared_server

    return shared_server().spec


@pytest.fixture
def omni(omni_home):
    return Omni(config=omni_home)


@pytest.fixture
def name():
    return f"web_{uuid.uuid4().hex[:8]}"  # HBase tables outlive a test: one name per test


def _index(omni, name, spec):
    return open_index(omni.config, f"aidata.{name}", spec, timeout_ms=20000)


@pytest.fixture
def indexed_writes(monkeypatch, omni, spec):
    """Writers index into ``spec`` (as configured by a user); ``crash`` kills the next commit.

    The crash lands after the writers finished indexing (``StagedWrite.before_commit``)
    and before the logical commit: the worst moment for write-then-commit.
    """
    control = {"crash": False}
    monkeypatch.setenv("OMNI_INDEX", spec)
    monkeypatch.setenv("OMNI_INDEX_TIMEOUT_MS", "20000")
    original = FamilyStore._write_family

    def write_family(self, location, state, *args, **kwargs):
        if control["crash"]:
            control["crash"] = False
            raise CrashBeforeCommit("the process died between indexing and the logical commit")
        return original(self, location, state, *args, **kwargs)

    monkeypatch.setattr(FamilyStore, "_write_family", write_family)
    return control


def _jsonl(tmp_path, tag, n, start=0):
    path = tmp_path / f"{tag}.jsonl"
    with open(path, "w") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"raw_data": f"<p>page {i} of {tag}: the text {i * 7}</p>",
                                "url": f"https://example.org/{tag}/{i}", "lang": "en" if i % 2 else "de"}) + "\n")
    return str(path)


def _ids(omni, name, batch=None, as_of=None):
    data = omni.read(name, columns=[ID_COLUMN, "_ai_append_name_"], as_of=as_of)
    return [r[ID_COLUMN] for r in data.to_pylist() if batch is None or r["_ai_append_name_"] == batch]


def test_lookup_reads_only_the_indexed_rows_with_nested_fields(omni, name, spec, indexed_writes, tmp_path):
    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 30)], batch="a")
    omni.submit(name, [_jsonl(tmp_path, "b", 30)], batch="b")
    full = {r[ID_COLUMN]: r for r in omni.read(name, columns=[ID_COLUMN, "_ai_append_name_", "RawData.url",
                                                              "RawData.lang"]).to_pylist()}
    ask = sorted(full)[::7]
    lookup = get_rows(omni, name, ask, columns=["RawData.url", "RawData.lang", "_ai_append_name_"],
                      explain=True, index=spec)
    rows = lookup.rows.to_pylist()
    assert [r[ID_COLUMN] for r in rows] == ask and all(r[FOUND_COLUMN] for r in rows)
    for r in rows:
        expect = full[r[ID_COLUMN]]
        assert (r["RawData.url"], r["RawData.lang"], r["_ai_append_name_"]) == (
            expect["RawData.url"], expect["RawData.lang"], expect["_ai_append_name_"])
    [base] = lookup.tables
    assert base.method == "index" and base.reason == ""
    # small leaves are answered from the entries' inline values: no data file opened
    assert base.files_read == 0 and 0 < base.files_inline <= len(ask)
    whole = get_rows(omni, name, ask[:2], index=spec)  # default: the whole logical row, stages as structs
    assert whole.column("RawData").to_pylist()[0]["url"] == full[ask[0]]["RawData.url"]


def test_unknown_ids_are_not_found_rows_and_malformed_ids_are_named(omni, name, spec, indexed_writes, tmp_path):
    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 5)], batch="a")
    known = _ids(omni, name)[0]
    unknown = "0" * 32
    rows = get_rows(omni, name, [unknown, known.upper(), known], columns=["RawData.url"], index=spec).to_pylist()
    assert [(r[ID_COLUMN], r[FOUND_COLUMN]) for r in rows] == [(unknown, False), (known, True)]
    assert rows[0]["RawData.url"] is None and rows[1]["RawData.url"].startswith("https://example.org/a/")
    with pytest.raises(MalformedIdError, match="'not-an-id'.*32 hex"):
        get_rows(omni, name, [known, "not-an-id"], index=spec)


def _crash_second_batch(omni, name, tmp_path, indexed_writes) -> list[str]:
    """Batch a committed, then batch b indexed but crashed before its logical commit: b's ids."""
    from omni_iceberg.ingest.identity import content_id

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 10)], batch="a")
    indexed_writes["crash"] = True
    with pytest.MonkeyPatch.context() as mp, pytest.raises(CrashBeforeCommit):
        mp.setattr(StagedWrite, "abandon", lambda self: (0, 0))  # a killed process cleans nothing up
        omni.submit(name, [_jsonl(tmp_path, "b", 10)], batch="b")
    return [content_id(f"<p>page {i} of b: the text {i * 7}</p>") for i in range(10)]


def test_a_crash_before_the_logical_commit_leaves_no_visible_entry(omni, name, spec, indexed_writes, tmp_path):
    lost = _crash_second_batch(omni, name, tmp_path, indexed_writes)
    idx = _index(omni, name, spec)
    assert [r.complete for r in idx.all_runs()] == [True, True]  # both indexed fully before committing
    assert idx.backend.get_entries([bytes.fromhex(i) for i in lost])  # the entries are there...
    lookup = get_rows(omni, name, lost, columns=["RawData.url"], explain=True, index=spec)
    assert not any(lookup.rows.column(FOUND_COLUMN).to_pylist())  # ...and nobody can see them
    assert lookup.tables[0].method == "index"
    view = idx.at(omni.catalog, omni.state(name))
    assert view.contains_many("base", sorted(lost + _ids(omni, name))) == set(_ids(omni, name))
    report = verify(omni.catalog, omni.state(name), idx)  # the crashed run may still be alive: pending, no fault
    assert report.pending == 10 and report.dangling == 0 and report.missing == 0 and report.stale == 0


def test_a_point_read_and_a_bulk_read_keep_the_same_entries(omni, name, spec, indexed_writes, tmp_path):
    """Up to ``FEW_IDS`` ids are read as Python tuples (a point lookup), more as arrays:
    both must keep exactly the visible entries - none of a crashed run, none dangling (no
    file record) - and the tuple form must convert to the same arrays."""
    from omni_iceberg.index.core import FEW_IDS

    lost = _crash_second_batch(omni, name, tmp_path, indexed_writes)[:3]
    idx = _index(omni, name, spec)
    known = _ids(omni, name)
    idx.backend.put_entries([(bytes.fromhex(known[1]), b"\xee" * 8, 5, b"")])  # a file nobody registered
    ask = known[:3] + lost + ["f" * 32]
    assert len(ask) <= FEW_IDS
    cov = idx.at(omni.catalog, omni.state(name)).coverage("base")
    few = idx.entry_rows_in([cov], ask)
    padded = ask + [f"{i:032x}" for i in range(FEW_IDS)]  # unknown ids past the point-read size

    def kept(entries):
        return sorted((entries.ids[a], int(c), v) for a, c, v in zip(entries.asked.tolist(), entries.codes,
                                                                       entries.values))

    as_arrays = few.as_entries(ask)[cov.table]
    bulk = idx.entries_in([cov], padded)[cov.table]
    assert kept(as_arrays) == kept(bulk)
    assert sorted(rid for rid, _, _ in kept(bulk)) == sorted(known[:3])  # one row each, nothing else
    assert sorted((ask[a], fid, v) for a, fid, v in few.by_table[cov.table]) == kept(bulk)


def test_a_reader_at_an_older_version_sees_only_that_version(omni, name, spec, indexed_writes, tmp_path):
    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 8)], batch="a")
    v_a = omni.state(name).version
    omni.submit(name, [_jsonl(tmp_path, "b", 8)], batch="b")
    a_id, b_id = _ids(omni, name, "a")[0], _ids(omni, name, "b")[0]
    old = get_rows(omni, name, [a_id, b_id], columns=["RawData.url"], as_of=v_a, index=spec)
    assert old.column(FOUND_COLUMN).to_pylist() == [True, False]
    new = get_rows(omni, name, [a_id, b_id], columns=["RawData.url"], index=spec)
    assert new.column(FOUND_COLUMN).to_pylist() == [True, True]


def test_unindexed_writes_fall_back_to_the_scan_until_rebuilt(omni, name, spec, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_INDEX", "off")  # a writer that does not index: the index lags
    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 12)], batch="a")
    ids = _ids(omni, name)[:4] + ["f" * 32]
    lookup = get_rows(omni, name, ids, columns=["RawData.url"], explain=True, index=spec)
    assert lookup.tables[0].method == "scan" and "not indexed" in lookup.tables[0].reason
    assert lookup.rows.column(FOUND_COLUMN).to_pylist() == [True] * 4 + [False]
    idx = _index(omni, name, spec)
    assert idx.at(omni.catalog, omni.state(name)).contains_many("base", sorted(ids)) == set(ids[:4])
    assert verify(omni.catalog, omni.state(name), idx).missing == 12
    report = rebuild(omni.catalog, omni.state(name), idx)
    assert report.runs_indexed == 1 and report.rows == 12
    again = get_rows(omni, name, ids, columns=["RawData.url"], explain=True, index=spec)
    assert again.tables[0].method == "index"
    assert again.rows.to_pylist() == lookup.rows.to_pylist()
    assert verify(omni.catalog, omni.state(name), idx).ok


def test_rebuild_resumes_after_an_interruption(omni, name, spec, tmp_path, monkeypatch):
    from omni_iceberg.index.core import IndexWriter

    monkeypatch.setenv("OMNI_INDEX", "off")  # tables written without the index, then indexed by rebuild
    omni.create_table(name)
    for b in ("a", "b", "c"):
        omni.submit(name, [_jsonl(tmp_path, b, 40)], batch=b)
    idx = _index(omni, name, spec)
    original, calls = IndexWriter.add_file, {"n": 0}

    def flaky(self, path, **kw):
        calls["n"] += 1
        if calls["n"] == 20:
            raise KeyboardInterrupt
        return original(self, path, **kw)

    monkeypatch.setattr(IndexWriter, "add_file", flaky)
    with pytest.raises(KeyboardInterrupt):
        rebuild(omni.catalog, omni.state(name), idx)
    monkeypatch.setattr(IndexWriter, "add_file", original)
    assert not get_rows(omni, name, _ids(omni, name)[:1], explain=True, index=spec).tables[0].method == "index"
    report = rebuild(omni.catalog, omni.state(name), idx)
    assert report.runs_skipped >= 1 and report.runs_indexed + report.runs_skipped == 3
    assert verify(omni.catalog, omni.state(name), idx).ok
    assert get_rows(omni, name, _ids(omni, name)[:1], explain=True, index=spec).tables[0].method == "index"


def test_compaction_keeps_old_versions_resolvable_and_verify_finds_stale_entries(omni, name, spec, indexed_writes,
                                                                                 tmp_path):
    from governance.compaction import compact

    omni.create_table(name)
    for b in ("a", "a2"):
        omni.submit(name, [_jsonl(tmp_path, b, 20)], batch="a" if b == "a" else "b")
    omni.submit(name, [_jsonl(tmp_path, "a3", 20, start=100)], batch="c")
    idx = _index(omni, name, spec)
    v_before = omni.state(name).version
    ids = _ids(omni, name)[::9]
    before = get_rows(omni, name, ids, columns=["RawData.url"], explain=True, index=spec)
    compact(omni.store, name, min_files=1)  # indexes its new files and retires the old ones
    now = get_rows(omni, name, ids, columns=["RawData.url"], explain=True, index=spec)
    old = get_rows(omni, name, ids, columns=["RawData.url"], as_of=v_before, explain=True, index=spec)
    assert now.tables[0].method == old.tables[0].method == before.tables[0].method == "index"
    assert now.rows.to_pylist() == old.rows.to_pylist() == before.rows.to_pylist()
    assert all(now.rows.column(FOUND_COLUMN).to_pylist())
    new_files = {loc.path for locs in idx.at(omni.catalog, omni.state(name)).locations(
        "base", ids).values() for loc in locs}
    old_files = {loc.path for locs in idx.at(omni.catalog, omni.state(name, as_of=v_before)).locations(
        "base", ids).values() for loc in locs}
    assert new_files and old_files and new_files != old_files  # each version resolves to its own files
    assert verify(omni.catalog, omni.state(name), idx).ok
    # corrupt the index: forget which files the compaction retired -> their entries are stale
    for key, value in list(idx.backend.scan_meta(RUN_PREFIX)):
        rec = RunRecord.from_bytes(value)
        if rec.retired:
            idx.backend.put_meta({key: RunRecord(**{**rec.__dict__, "retired": ()}).to_bytes()})
    idx.forget_caches()
    report = verify(omni.catalog, omni.state(name), idx)
    assert report.stale > 0 and not report.ok and "--fresh" in report.text()


def test_a_wrong_position_is_never_returned_and_verify_calls_it_stale(omni, name, spec, indexed_writes, tmp_path):
    from omni_iceberg.index.keys import file_key

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 40)], batch="a")
    idx = _index(omni, name, spec)
    view = idx.at(omni.catalog, omni.state(name))
    ids = _ids(omni, name)
    loc = {i: view.locations("base", [i])[i][0] for i in ids}
    a, b = next((x, y) for x in ids for y in ids if x != y and loc[x].path == loc[y].path)
    # corrupt: a's entry now points at b's row of the same file
    idx.backend.delete_entries([(bytes.fromhex(a), file_key(loc[a].path))])
    idx.backend.put_entries([(bytes.fromhex(a), file_key(loc[a].path), loc[b].position)])
    lookup = get_rows(omni, name, [a], columns=["RawData.url"], explain=True, index=spec)
    assert lookup.tables[0].method == "scan" and "other ids" in lookup.tables[0].reason
    assert lookup.rows.to_pylist()[0]["RawData.url"] == omni.read(name, columns=[ID_COLUMN, "RawData.url"]
                                                                  ).to_pylist()[ids.index(a)]["RawData.url"]
    report = verify(omni.catalog, omni.state(name), idx)
    assert report.stale == 1 and a in report.examples["stale"][0]


def test_large_values_are_read_from_the_file_small_ones_from_the_index(omni, name, spec, indexed_writes, tmp_path):
    from omni_iceberg.index.inline import STRING_MAX

    path = tmp_path / "long.jsonl"
    with open(path, "w") as f:
        for i in range(40):
            f.write(json.dumps({"raw_data": f"page {i} " + "x" * (STRING_MAX + 50),
                                "url": f"https://example.org/long/{i}"}) + "\n")
    omni.create_table(name)
    omni.submit(name, [str(path)], batch="a")
    full = {r[ID_COLUMN]: r for r in omni.read(name, columns=[ID_COLUMN, "RawData.url", "RawData.raw_data"]
                                               ).to_pylist()}
    ask = sorted(full)[::5]
    small = get_rows(omni, name, ask, columns=["RawData.url"], explain=True, index=spec)
    assert small.tables[0].files_read == 0 and small.tables[0].files_inline > 0
    large = get_rows(omni, name, ask, columns=["RawData.url", "RawData.raw_data"], explain=True, index=spec)
    assert large.tables[0].method == "index" and large.tables[0].files_read > 0 and large.tables[0].files_inline == 0
    assert "data file(s) read" in large.explain_text()
    for got in (small.rows.to_pylist(), large.rows.to_pylist()):
        for r in got:
            assert r["RawData.url"] == full[r[ID_COLUMN]]["RawData.url"]
    assert [r["RawData.raw_data"] for r in large.rows.to_pylist()] == [full[i]["RawData.raw_data"] for i in ask]


def test_verify_reports_inline_values_that_differ_from_the_row(omni, name, spec, indexed_writes, tmp_path):
    from omni_iceberg.index.keys import file_key

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 20)], batch="a")
    idx = _index(omni, name, spec)
    ids = _ids(omni, name)
    loc = idx.at(omni.catalog, omni.state(name)).locations("base", [ids[3]])[ids[3]][0]
    assert loc.inline and loc.layout.slots
    forged = bytes(len(loc.inline))  # same width, every value zeroed
    idx.backend.delete_entries([(bytes.fromhex(ids[3]), file_key(loc.path))])
    idx.backend.put_entries([(bytes.fromhex(ids[3]), file_key(loc.path), loc.position, forged)])
    report = verify(omni.catalog, omni.state(name), idx)
    assert report.stale == 1 and ids[3] in report.examples["stale"][0] and "inline" in report.examples["stale"][0]


def test_feature_columns_join_from_their_own_tables(omni, name, spec, indexed_writes, tmp_path):
    from tests import feature_udfs as U

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 6)], batch="a")
    omni.register_features(name, [U.t_parse, U.t_len])
    omni.backfill(name, ["t_len"], isolation="inline")
    omni.submit(name, [_jsonl(tmp_path, "b", 4)], batch="b")  # no feature values yet: nulls
    cols = ["RawData.url", "ProcessedData.parsed_text", "t_len"]
    expected = {r[ID_COLUMN]: r for r in omni.read(name, columns=[ID_COLUMN] + cols).to_pylist()}
    ask = sorted(expected)
    lookup = get_rows(omni, name, ask, columns=cols, explain=True, index=spec)
    assert [t.method for t in lookup.tables] == ["index"] * len(lookup.tables) and len(lookup.tables) == 3
    for r in lookup.rows.to_pylist():
        assert {c: r[c] for c in cols} == {c: expected[r[ID_COLUMN]][c] for c in cols}
    assert sum(r["t_len"] is None for r in lookup.rows.to_pylist()) == 4


def test_a_few_ids_with_a_column_not_inlined_fall_back_after_the_tables_that_were(omni, name, spec, indexed_writes,
                                                                                  tmp_path):
    """The row-wise path answers the base from inline values, then meets a feature table whose
    text is too long to inline: the lookup reads that table's file instead, and the explain
    info names each table once."""
    from tests import feature_udfs as U

    omni.create_table(name)
    src = tmp_path / "long.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"<p>doc {i}: " + "long text " * 60 + "</p>",
                                       "url": f"https://example.org/long/{i}"}) + "\n" for i in range(4)))
    omni.submit(name, [str(src)], batch="a")
    omni.register_features(name, [U.t_parse, U.t_len])
    omni.backfill(name, ["t_len"], isolation="inline")
    cols = ["RawData.url", "ProcessedData.parsed_text", "t_len"]
    expected = {r[ID_COLUMN]: r for r in omni.read(name, columns=[ID_COLUMN] + cols).to_pylist()}
    ask = sorted(expected)[:2]
    lookup = get_rows(omni, name, ask, columns=cols, explain=True, index=spec)
    assert len(lookup.tables) == len({t.key for t in lookup.tables}) == 3
    parsed = next(t for t in lookup.tables if t.files_read)  # the long text came from its data file
    assert parsed.method == "index" and parsed.rows == 2
    assert [{c: r[c] for c in cols} for r in lookup.rows.to_pylist()] == [{c: expected[i][c] for c in cols}
                                                                          for i in ask]


def test_array_and_row_decoding_of_a_large_lookup_agree_with_the_scan(omni, name, spec, indexed_writes, tmp_path,
                                                                      monkeypatch):
    """A 1,000-id lookup decodes inline values as whole arrays, a small one row by row, and
    a few ids are built as Python rows with one Arrow table at the end: all three must
    return exactly what the scan does - features with nulls (a batch not backfilled), files
    of several batches after compaction (each row's batch comes from its own bytes), ids
    that are not there."""
    from catalog_ext.physical import file_batch
    from governance.compaction import compact
    from omni_iceberg.index import lookup as L
    from omni_iceberg.index import lookup_rows
    from tests import feature_udfs as U

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 60)], batch="a")
    omni.submit(name, [_jsonl(tmp_path, "b", 50)], batch="b")
    omni.register_features(name, [U.t_parse, U.t_len])
    omni.backfill(name, ["t_len"], isolation="inline")
    omni.submit(name, [_jsonl(tmp_path, "c", 40)], batch="c")  # no feature values: nulls
    idx = _index(omni, name, spec)
    cols = ["_ai_append_name_", "RawData.url", "RawData.lang", "t_len"]
    join_parts, by_position = L._join_parts, L._inline_by_position

    def agree_with_scan(state, ask, columns, paths):
        monkeypatch.setattr(L, "_join_parts", join_parts)  # the scan joins its parts
        scan = lookup_rows(omni.catalog, state, idx, ask, columns, force_scan=True).rows
        for path in paths:
            # by position: every table's values placed straight into the answer (no join);
            # arrays / rows per table: parts joined; whole rows: Python rows, one table made
            threshold, rowwise, fused = {"by position": (1, 0, True), "arrays": (1, 0, False),
                                         "rows per table": (10 ** 9, 0, False), "whole rows": (1, 10 ** 9, False)}[path]
            monkeypatch.setattr(L, "ARRAY_DECODE_MIN_ROWS", threshold)
            monkeypatch.setattr(L, "ROWWISE_MAX_IDS", rowwise)
            monkeypatch.setattr(L, "_inline_by_position", by_position if fused else lambda *a: None)

            def no_join(*args, path=path):  # these paths must not fall back to the per-table path
                assert path not in ("whole rows", "by position"), f"the {path} lookup fell back to joining parts"
                return join_parts(*args)

            monkeypatch.setattr(L, "_join_parts", no_join)
            got = lookup_rows(omni.catalog, state, idx, ask, columns)
            assert [t.method for t in got.tables] == ["index"] * len(got.tables) and \
                all(t.files_read == 0 for t in got.tables)
            assert got.rows.schema == scan.schema and got.rows.to_pylist() == scan.to_pylist(), path
            assert got.not_found == ["1" * 32, "0" * 32]
            assert got.rows.column("_ai_unique_id_").to_pylist() == ask
        return scan

    known = _ids(omni, name)[::2]
    ask = known[:5] + ["1" * 32] + known[5:] + ["0" * 32]  # unknown ids inside and at the end: asked order holds
    agree_with_scan(omni.state(name), ask, cols, ["by position", "arrays", "rows per table", "whole rows"])
    # a stage as a struct (null for an id not found; its one field inlined), features of batches a and b only
    agree_with_scan(omni.state(name), ask, ["ProcessedData", "t_len"], ["by position", "arrays", "whole rows"])
    compact(omni.store, name, min_files=1)  # base files now hold rows of several batches
    state = omni.state(name)
    known = _ids(omni, name)[::2]
    ask = known[:5] + ["1" * 32] + known[5:] + ["0" * 32]
    # rows that carry their own batch are joined as parts: "by position" compares batches by file
    scan = agree_with_scan(state, ask, cols, ["arrays", "rows per table", "whole rows"])
    in_c = set(_ids(omni, name, batch="c"))
    assert sum(r["t_len"] is None for r in scan.to_pylist()) == len(in_c & set(ask)) + 2 > 2
    base = omni.catalog.load_table(state.base_table.identifier)
    assert any(file_batch(base, t.file) is None for t in base.scan(snapshot_id=state.base_table.snapshot_id)
               .plan_files())  # compaction did merge batches: their rows' batches were decoded


def test_ingest_dedups_through_the_index_without_reading_the_table(omni, name, spec, indexed_writes, tmp_path,
                                                                   monkeypatch):
    from omni_iceberg.ingest import dedup

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 30)], batch="a")

    def no_scan(*_a, **_k):
        raise AssertionError("dedup read the whole table although the index is authoritative")

    monkeypatch.setattr(dedup, "_all_ids", no_scan)
    # 10 rows seen in batch a, 10 new ones, and one repeated inside this batch
    again = _jsonl(tmp_path, "a", 20, start=20)
    with open(again) as f:
        lines = f.readlines()
    with open(again, "a") as f:
        f.write(lines[15])  # page 35 twice in this batch
    report = omni.submit(name, [again], batch="b")
    assert report.dedup == "index" and report.duplicates == 11 and report.written == 10
    ids = _ids(omni, name)
    assert len(ids) == len(set(ids)) == 40
    assert verify(omni.catalog, omni.state(name), _index(omni, name, spec)).ok
    # the same batch content again: everything is a duplicate, found by the index
    assert omni.submit(name, [again], batch="c").written == 0


def test_a_lagging_index_makes_dedup_scan_and_says_how_to_fix_it(omni, name, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_INDEX", "off")
    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 5)], batch="a")
    monkeypatch.setenv("OMNI_INDEX", "lmdb")
    report = omni.submit(name, [_jsonl(tmp_path, "a", 8)], batch="b")
    assert report.dedup == "scan" and report.duplicates == 5 and report.written == 3
    assert any("omni index rebuild" in w and "lags" in w for w in report.warnings)
    omni.rebuild_index(name, progress=False)
    assert omni.submit(name, [_jsonl(tmp_path, "a", 9)], batch="c").dedup == "index"


def test_recomputed_batches_retire_the_old_feature_files(omni, name, spec, indexed_writes, tmp_path):
    from tests import feature_udfs as U

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 6)], batch="a")
    omni.register_features(name, [U.t_parse, U.t_len])
    omni.backfill(name, ["t_len"], isolation="inline")
    state = omni.state(name)
    idx = _index(omni, name, spec)
    assert verify(omni.catalog, state, idx).ok
    ids = _ids(omni, name)
    lookup = get_rows(omni, name, ids, columns=["t_len"], explain=True, index=spec)
    assert all(t.method == "index" for t in lookup.tables)
    expected = {r[ID_COLUMN]: r["t_len"] for r in omni.read(name, columns=[ID_COLUMN, "t_len"]).to_pylist()}
    assert {r[ID_COLUMN]: r["t_len"] for r in lookup.rows.to_pylist()} == expected


def test_cli_get_and_index_commands(omni, name, tmp_path, monkeypatch, capsys):
    from omni_iceberg.cli import main

    monkeypatch.setenv("OMNI_INDEX", "off")  # written without the index...
    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 5)], batch="a")
    monkeypatch.setenv("OMNI_INDEX", "lmdb")  # ...then looked up with it
    home = ["--home", str(omni.config.home)]
    capsys.readouterr()
    assert main(home + ["index", "verify", name]) == 1 and "5 missing" in capsys.readouterr().out
    assert main(home + ["index", "rebuild", name, "--no-progress"]) == 0 and "5 row(s)" in capsys.readouterr().out
    assert main(home + ["index", "verify", name]) == 0
    capsys.readouterr()
    some = _ids(omni, name)[0]
    assert main(home + ["get", name, some, "1" * 32, "--columns", "RawData.url", "--json", "--explain"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0][ID_COLUMN] == some and lines[0][FOUND_COLUMN] and not lines[1][FOUND_COLUMN]
    assert lines[2]["explain"]["tables"][0]["method"] == "index"
    assert main(home + ["get", name, some, "--explain"]) == 0
    assert "index -> 0 data file(s) read, 1 answered from inline values" in capsys.readouterr().out
    assert main(home + ["get", name, "not-an-id"]) == 2
    assert "not-an-id" in capsys.readouterr().err


def test_unreachable_hbase_names_host_and_port(omni, name, tmp_path):
    from tests.services import free_port

    omni.create_table(name)
    port = free_port()
    with pytest.raises(IndexUnavailableError, match=f"127.0.0.1:{port}"):
        get_rows(omni, name, ["a" * 32], index=f"hbase://127.0.0.1:{port}")


def test_backend_selection_by_config(omni, name, tmp_path, monkeypatch):
    from catalog_ext.errors import ConfigError

    monkeypatch.delenv("OMNI_INDEX", raising=False)
    default = open_index(omni.config, f"aidata.{name}")
    assert default.backend.location == str(omni.config.home / "index" / f"aidata.{name}")
    monkeypatch.setenv("OMNI_INDEX", f"lmdb://{tmp_path}/elsewhere")
    assert open_index(omni.config, f"aidata.{name}").backend.location == f"{tmp_path}/elsewhere/aidata.{name}"
    for bad in ("redis://h:1", "hbase://nohost"):
        with pytest.raises(ConfigError, match="OMNI_INDEX"):
            open_index(omni.config, f"aidata.{name}", bad)
    monkeypatch.delenv("OMNI_INDEX")
    (tmp_path / ".pyiceberg.yaml").write_text(f"omni:\n  index: lmdb://{tmp_path}/from-yaml\n")
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    assert open_index(omni.config, f"aidata.{name}").backend.location == f"{tmp_path}/from-yaml/aidata.{name}"
    monkeypatch.setenv("OMNI_INDEX_TIMEOUT_MS", "soon")
    with pytest.raises(ConfigError, match="OMNI_INDEX_TIMEOUT_MS='soon'"):
        open_index(omni.config, f"aidata.{name}", "hbase://127.0.0.1:1")


def test_sql_id_predicates_read_through_the_index_and_agree_with_the_scan(omni, name, spec, indexed_writes, tmp_path,
                                                                          monkeypatch):
    from tests import feature_udfs as U

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 20)], batch="a")
    omni.submit(name, [_jsonl(tmp_path, "b", 20)], batch="b")
    omni.register_features(name, [U.t_parse, U.t_len])
    omni.backfill(name, ["t_len"], isolation="inline")
    a, b = _ids(omni, name, "a"), _ids(omni, name, "b")
    queries = [
        f"SELECT _ai_unique_id_, RawData.url, t_len FROM {name} WHERE _ai_unique_id_ = '{a[3]}'",
        f"SELECT RawData, t_len FROM {name} WHERE _ai_unique_id_ IN ('{a[1]}', '{b[2]}', '{'0' * 32}', 'nope') "
        f"ORDER BY t_len, RawData.url",
        # the batch filter still applies to rows found through the index
        f"SELECT count(*) AS n FROM {name} WHERE _ai_unique_id_ IN ('{a[1]}', '{b[2]}') AND _ai_append_name_ = 'b'",
        f"SELECT count(*) AS n FROM {name} WHERE _ai_unique_id_ = 'NOT-AN-ID'",
    ]
    through_index = []
    for q in queries:
        plan = omni.explain(q)
        assert "through the id index" in plan and "lags" not in plan, plan
        through_index.append(omni.query(q).to_pylist())
    assert through_index[0][0]["url"] == omni.read(name, columns=[ID_COLUMN, "RawData.url"]).to_pylist()[
        _ids(omni, name).index(a[3])]["RawData.url"]
    assert len(through_index[1]) == 2 and through_index[2] == [{"n": 1}] and through_index[3] == [{"n": 0}]
    # the same queries where the index cannot vouch: scanned, same answers
    index_dir = tmp_path / "empty-index"
    monkeypatch.setenv("OMNI_INDEX", f"lmdb://{index_dir}")
    for q, expected in zip(queries, through_index):
        plan = omni.explain(q)
        assert "scanned for" in plan and "lags" in plan, plan
        assert omni.query(q).to_pylist() == expected


def test_lmdb_map_grows_when_full_and_open_indexes_are_bounded(tmp_path, monkeypatch):
    from omni_iceberg.index import lmdb_backend, select
    from omni_iceberg.index.lmdb_backend import LmdbBackend

    monkeypatch.setattr(lmdb_backend, "MAP_SIZE", 1 << 20)  # 1 MiB: full after a few thousand entries
    backend = LmdbBackend(tmp_path / "small")
    entries = [(i.to_bytes(16, "big"), b"f" * 8, i) for i in range(60_000)]
    backend.write(entries, {b"Rrun": b"{}"})
    assert backend._env.info()["map_size"] > 1 << 20
    assert len(backend.get_entries([entries[59_999][0]])) == 1
    backend.close()

    from catalog_ext.config import OmniConfig

    monkeypatch.setattr(select, "MAX_OPEN", 3)
    config = OmniConfig.resolve(home=tmp_path / "h")
    opened = [open_index(config, f"aidata.t{i}", "lmdb") for i in range(5)]
    assert len(select._OPEN) <= 3
    assert open_index(config, "aidata.t4", "lmdb") is opened[4]  # recent ones stay cached
    assert open_index(config, "aidata.t0", "lmdb") is not opened[0]  # evicted ones were closed, reopen


def test_a_sealed_index_answers_like_the_unsealed_one_through_writes_compaction_and_rebuild(
        omni, name, spec, indexed_writes, tmp_path, monkeypatch, capsys):
    """Lookups, dedup, old versions and verify read the sealed segment plus what was
    written since exactly as they read the LMDB tree alone (``omni_iceberg.index.sealed``)."""
    from governance.compaction import compact
    from governance.maintenance import maintain
    from omni_iceberg.cli import main
    from omni_iceberg.index import lookup_rows
    from omni_iceberg.index import maintenance as M
    from tests import feature_udfs as U

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 60)], batch="a")
    if spec != "lmdb":  # HBase keeps its entries in sorted store files and compacts them itself
        assert omni.seal_index(name, index=spec) is None
        return
    omni.register_features(name, [U.t_parse, U.t_len])
    omni.backfill(name, ["t_len"], isolation="inline")
    cols = ["_ai_append_name_", "RawData.url", "t_len"]

    def agree(ids, as_of=None):  # index and scan give the same rows, through the index
        state = omni.state(name, as_of)
        idx = _index(omni, name, "lmdb")
        got = lookup_rows(omni.catalog, state, idx, ids, cols)
        assert all(t.method == "index" for t in got.tables), got.explain()
        assert got.rows.to_pylist() == lookup_rows(omni.catalog, state, idx, ids, cols, force_scan=True).rows.to_pylist()
        return got.rows.to_pylist()

    ask = _ids(omni, name)[::2] + ["1" * 32]
    before = agree(ask)
    sealed = omni.seal_index(name, progress=False)
    assert sealed["report"]["added"] > 60 and sealed["report"]["delta_left"] == 0  # base and feature entries
    assert agree(ask) == before and agree(ask[:3]) == before[:3]
    # dedup reads the segment: half of batch b is batch a's content again
    report = omni.submit(name, [_jsonl(tmp_path, "a", 40, start=40)], batch="b")
    assert report.dedup == "index" and report.duplicates == 20 and report.written == 20
    everything = _ids(omni, name)
    now = agree(everything)  # batch b's entries are unsealed, batch a's sealed
    rebuilt = rebuild(omni.catalog, omni.state(name), _index(omni, name, "lmdb"), fresh=True, progress=False)
    assert rebuilt.sealed["report"]["generation"] == 1 and rebuilt.sealed["report"]["delta_left"] == 0
    assert agree(everything) == now
    v_before = omni.state(name).version
    compact(omni.store, name, min_files=1)  # its entries land unsealed, the retired ones stay sealed
    assert agree(everything) == agree(everything, as_of=v_before) == now
    monkeypatch.setattr(M, "SEAL_MIN_ENTRIES", 1)
    rep = maintain(omni.store, name, progress=False)
    assert rep.index_seal["due"] and rep.index_seal["report"]["generation"] == 2, rep.index_seal
    assert "id index:" in rep.describe()
    assert agree(everything) == now
    assert verify(omni.catalog, omni.state(name), _index(omni, name, "lmdb")).ok
    home = ["--home", str(omni.config.home)]
    capsys.readouterr()
    assert main(home + ["index", "seal", name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unsealed"] == 0


def test_rebuild_after_retention_cut_the_history_indexes_the_files_below_the_cut(omni, name, tmp_path, monkeypatch):
    """Compaction and re-bucketing leave snapshots whose parents retention expires; the
    snapshots that added the live files are gone, so rebuild indexes those files under a
    run of retention's cut record - and lookups go through the index again."""
    from governance.maintenance import maintain
    from omni_iceberg.index import lookup_rows

    monkeypatch.setenv("OMNI_INDEX", "off")  # written without the index, then rebuilt
    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 40)], batch="a")
    omni.submit(name, [_jsonl(tmp_path, "b", 30)], batch="b")
    maintain(omni.store, name, keep_last=1, compact_min_files=1, progress=False)
    monkeypatch.setenv("OMNI_INDEX", "lmdb")
    state = omni.state(name)
    idx = _index(omni, name, "lmdb")
    report = rebuild(omni.catalog, state, idx, fresh=True, progress=False)
    assert report.rows == 70, report
    assert verify(omni.catalog, state, idx).ok
    ids = _ids(omni, name)[::3]
    got = lookup_rows(omni.catalog, state, idx, ids, ["RawData.url"])
    assert all(t.method == "index" for t in got.tables), got.explain_text()
    assert got.rows.to_pylist() == lookup_rows(omni.catalog, state, idx, ids, ["RawData.url"],
                                               force_scan=True).rows.to_pylist()


def _when_committing(omni, monkeypatch, operation, meanwhile):
    """Run ``meanwhile()`` once, right before the next logical commit of ``operation``: the
    other writer wins the race this one then loses."""
    real_commit = omni.store.commit

    def commit(*args, **kwargs):
        if kwargs.get("operation") == operation:
            monkeypatch.setattr(omni.store, "commit", real_commit)
            meanwhile()
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(omni.store, "commit", commit)


def test_a_submit_that_loses_the_race_with_the_same_content_leaves_no_entry_behind(
        omni, name, spec, indexed_writes, tmp_path, monkeypatch):
    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 10)], batch="a")
    same = _jsonl(tmp_path, "b", 12)
    _when_committing(omni, monkeypatch, "ingest", lambda: omni.submit(name, [same], batch="winner"))
    loser = omni.submit(name, [same], batch="loser")
    assert loser.written == 0 and loser.duplicates == 12  # every row was the winner's
    idx = _index(omni, name, spec)
    report = verify(omni.catalog, omni.state(name), idx)
    assert report.ok and (report.dangling, report.pending, report.rows_checked) == (0, 0, 22), report.text()
    # the loser's entries are gone, not merely invisible: one entry per id, the winner's
    entries = idx.backend.get_entries([bytes.fromhex(i) for i in _ids(omni, name, "winner")])
    assert sorted(len(e) for e in entries.values()) == [1] * 12
    assert {r.run for r in idx.all_runs()} == set(visibility.history(
        omni.catalog, omni.state(name).base_table.identifier, omni.state(name).base_table.snapshot_id).runs)


def test_a_backfill_whose_units_a_concurrent_backfill_committed_leaves_no_entry_behind(
        omni, name, spec, indexed_writes, tmp_path):
    """Two backfills with different plans share an ancestor: the loser's copy of it is left out
    of its commit (never published), and so are its index entries."""
    from omni_iceberg.backfill.local import LocalExecutor
    from omni_iceberg.backfill.run import BackfillRun, start_report
    from omni_iceberg.backfill.planner import plan_backfill
    from tests import feature_udfs as U

    omni.create_table(name)
    omni.submit(name, [_jsonl(tmp_path, "a", 14)], batch="a")
    omni.register_features(name, [U.t_parse, U.t_lang, U.t_len])
    state = omni.state(name)
    plan = plan_backfill(state, ["t_len"], has_gpu=False)
    late = BackfillRun(omni, state, plan, start_report(state, plan, "local", "test"), LocalExecutor("inline"),
                       progress=False)
    late.execute()  # t_parse and t_len staged and indexed, not committed
    omni.backfill(name, ["t_lang"], isolation="inline", progress=False)  # commits t_parse first
    assert late.run_to_commit("backfill").raced_units == ["t_parse/a"]
    idx = _index(omni, name, spec)
    report = verify(omni.catalog, omni.state(name), idx)
    assert report.ok and (report.dangling, report.pending) == (0, 0), report.text()
    assert report.rows_checked == 4 * 14  # base, t_parse, t_lang, t_len
    parse = omni.state(name).physical_table(omni.state(name).feature("t_parse").table_key).identifier
    assert [r.run for r in idx.all_runs() if r.table == parse] == [
        u.run_id for u in omni.state(name).computed if u.feature == "t_parse"]


def test_plain_rebuild_sweeps_what_verify_calls_dangling(omni, name, spec, indexed_writes, tmp_path, monkeypatch):
    """A crashed writer's entries and an entry of no file: invisible, reported, and swept by a plain rebuild.
    While the crashed run could still be a live one (within the staging grace period) they are
    pending, not damage, and rebuild leaves them alone."""
    lost = _crash_second_batch(omni, name, tmp_path, indexed_writes)
    idx = _index(omni, name, spec)
    known = _ids(omni, name)
    idx.backend.put_entries([(bytes.fromhex(known[1]), b"\xee" * 8, 5, b"")])  # an entry of no file
    report = verify(omni.catalog, omni.state(name), idx)
    assert (report.pending, report.dangling) == (10, 1) and not report.ok
    assert "omni index rebuild" in report.text() and "--fresh" not in report.text()
    rebuild(omni.catalog, omni.state(name), idx)
    report = verify(omni.catalog, omni.state(name), idx)
    assert (report.pending, report.dangling) == (10, 0) and report.ok  # the crashed run may be alive: kept
    assert len(idx.backend.get_entries([bytes.fromhex(i) for i in lost])) == 10
    monkeypatch.setenv("OMNI_STAGE_GRACE_S", "0")  # now it cannot be...
    monkeypatch.setenv("OMNI_STAGE_INGEST_GRACE_S", "0")
    assert not verify(omni.catalog, omni.state(name), idx).dangling  # ...but its staging branch is left
    sweep_stale_branches(omni.catalog, omni.state(name))  # as the next submit, backfill or maintain does
    report = verify(omni.catalog, omni.state(name), idx)
    assert (report.pending, report.dangling) == (0, 10) and not report.ok
    swept = rebuild(omni.catalog, omni.state(name), idx)
    assert (swept.runs_swept, swept.entries_swept) == (1, 10)
    report = verify(omni.catalog, omni.state(name), idx)
    assert report.ok and (report.dangling, report.pending, report.rows_checked) == (0, 0, 10), report.text()
    assert idx.backend.get_entries([bytes.fromhex(i) for i in lost]) == {}
    assert get_rows(omni, name, known, columns=["RawData.url"], index=spec).column(FOUND_COLUMN).to_pylist() == \
        [True] * 10
