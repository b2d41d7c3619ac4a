"""Ingestion on the embedded catalog: dedup, idempotence, versions, atomicity, bad input."""

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog_ext import system_tables
from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from catalog_ext.errors import (
    InvalidIdentifierError, NoSuchLogicalTableError, NoSuchVersionError, RejectLimitExceededError,
    SchemaConflictError, SourceError,
)
from omni_iceberg.ingest import pipeline
from omni_iceberg.ingest.identity import content_id
from omni_iceberg.ingest.sources import SourceBlock


@pytest.fixture
def omni(tmp_path) -> Omni:
    return Omni(home=tmp_path / "home")


@pytest.fixture(scope="module")
def pages() -> list[Path]:
    """Real Python documentation pages (fetched from Debian's python3.11-doc)."""
    return sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:40]


def _ids(omni, name, batches=None):
    return sorted(omni.read(name, columns=["_ai_unique_id_"], batches=batches).column(0).to_pylist())


def test_dedup_within_and_across_batches(omni, pages):
    omni.create_table("web")
    first = omni.submit("web", [str(p) for p in pages[:30]] + [str(pages[0])], batch="a")
    assert (first.read, first.written, first.duplicates) == (31, 30, 1)
    second = omni.submit("web", [str(p) for p in pages[20:]], batch="b")
    assert (second.read, second.written, second.duplicates) == (20, 10, 10)
    ids = _ids(omni, "web")
    assert len(ids) == len(set(ids)) == 40
    assert content_id(pages[0].read_text(encoding="utf-8")) in ids
    assert _ids(omni, "web", ["b"]) == sorted(content_id(p.read_text(encoding="utf-8")) for p in pages[30:])


def test_uuid_tables_keep_identical_content_apart(omni, tmp_path):
    src = tmp_path / "sft.jsonl"
    src.write_text('{"raw_data": "same"}\n{"raw_data": "same"}\n')
    omni.create_table("sft", id_mode="uuid")
    r = omni.submit("sft", [str(src)], batch="x")
    assert (r.written, r.duplicates) == (2, 0)
    assert len(set(_ids(omni, "sft"))) == 2


def test_resubmit_of_committed_batch_is_a_noop(omni, pages):
    omni.create_table("web")
    r1 = omni.submit("web", [str(p) for p in pages[:5]], batch="a")
    r2 = omni.submit("web", [str(p) for p in pages[:5]], batch="a")
    assert r2.already_committed and r2.logical_version == r1.logical_version == 2
    assert [v.version for v in omni.log("web")] == [1, 2]


def test_reader_pinned_to_a_version_keeps_seeing_it(omni, pages):
    omni.create_table("web")
    v2 = omni.submit("web", [str(p) for p in pages[:10]], batch="a").logical_version
    before = omni.read("web", columns=["_ai_unique_id_", "RawData"], as_of=v2)
    omni.submit("web", [str(p) for p in pages[10:20]], batch="b")
    assert omni.read("web", as_of=v2).num_rows == 10
    assert omni.read("web", columns=["_ai_unique_id_", "RawData"], as_of=v2).equals(before)
    assert omni.read("web").num_rows == 20
    log = omni.log("web")
    assert [(v.version, v.operation) for v in log] == [(1, "create"), (2, "ingest"), (3, "ingest")]
    assert log[2].summary["omni.batch"] == "b"
    with pytest.raises(NoSuchVersionError, match="no version 9"):
        omni.read("web", as_of=9)


def test_staged_data_is_invisible_until_the_logical_commit(omni, pages, monkeypatch):
    """A crash after the data files are written and staged commits nothing."""
    omni.create_table("web")
    omni.submit("web", [str(p) for p in pages[:5]], batch="a")
    state = omni.state("web")

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash before the logical commit")

    monkeypatch.setattr(omni.store, "commit", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        omni.submit("web", [str(p) for p in pages[5:15]], batch="b")
    monkeypatch.undo()
    after = omni.state("web")
    assert after == state and after.batch("b") is None
    assert omni.read("web").num_rows == 5
    base = omni.catalog.load_table(state.base_table.identifier)
    assert base.metadata.refs["main"].snapshot_id == state.base_table.snapshot_id
    assert not [r for r in base.metadata.refs if r.startswith("omni-stage-")]  # staging branch removed
    again = omni.submit("web", [str(p) for p in pages[5:15]], batch="b")  # and the batch can be redone
    assert again.written == 10 and omni.read("web").num_rows == 15


def test_a_source_failing_midway_commits_nothing(omni, tmp_path, pages):
    omni.create_table("web")
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"raw_data": f"doc {i}"}) + "\n" for i in range(50)))
    before = omni.state("web")
    with pytest.raises(SourceError, match="not found"):
        omni.submit("web", [str(good), str(tmp_path / "missing.jsonl")], batch="x")
    assert omni.state("web") == before


def test_per_record_problems_are_counted_and_kept(omni, tmp_path):
    src = tmp_path / "mixed.jsonl"
    src.write_bytes(
        b'{"body_text": "good one", "n": 1}\n'
        b'{not json\n'
        b'{"body_text": "bad \xff\xfe utf8"}\n'
        b'{"other": "no body"}\n'
        b'{"body_text": "   "}\n'
        b'{"body_text": "type clash", "n": "seven"}\n'
        b'{"body_text": "good two", "n": 2}\n'
    )
    omni.create_table("web")
    r = omni.submit("web", [str(src)], batch="b1", field_map={"body_text": "raw_data"})
    assert (r.read, r.written, r.rejected) == (7, 2, 5)
    rejects = omni.rejects("web", "b1").sort_by("line").to_pylist()
    assert [x["line"] for x in rejects] == [2, 3, 4, 5, 6]
    assert all(x["source_file"] == str(src) and x["batch"] == "b1" for x in rejects)
    assert "JSON" in rejects[0]["reason"]
    assert "UTF-8" in rejects[1]["reason"] or "utf-8" in rejects[1]["reason"].lower()
    assert rejects[2]["field"] == "raw_data" and "missing mapped field" in rejects[2]["reason"]
    assert "body_text" in rejects[2]["reason"]
    assert rejects[3]["reason"] == "empty raw content"
    assert rejects[4]["field"] == "n" and "expected long" in rejects[4]["reason"]
    assert any("mixed.jsonl:2" in m for m in r.reject_messages)


def test_reject_budget_commits_nothing_but_keeps_rejects(omni, tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"raw_data": "ok"}\n{oops\n{oops\n')
    omni.create_table("web")
    with pytest.raises(RejectLimitExceededError, match="2 of 3"):
        omni.submit("web", [str(src)], batch="b", max_reject_ratio=0.5)
    assert omni.state("web").batch("b") is None and omni.read("web").num_rows == 0
    assert omni.rejects("web", "b").num_rows == 2


def test_new_source_fields_extend_rawdata_and_old_versions_stay(omni, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"raw_data": "x1"}\n')
    b.write_text('{"raw_data": "x2", "url": "http://e/2", "score": 1.5}\n')
    omni.create_table("web")
    v2 = omni.submit("web", [str(a)], batch="a").logical_version
    r = omni.submit("web", [str(b)], batch="b")
    assert sorted(r.new_fields) == ["score", "url"]
    latest = omni.read("web", columns=["RawData"]).column("RawData").to_pylist()
    assert {"raw_data": "x2", "content_type": "text/plain", "url": "http://e/2", "score": 1.5} in latest
    assert omni.read("web", columns=["RawData"], as_of=v2).column("RawData").type.names == ["raw_data",
                                                                                           "content_type"]


def test_parquet_schema_conflict_is_fatal_and_names_file_and_field(omni, tmp_path):
    omni.create_table("web")
    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"raw_data": "x", "n": 1}\n')
    omni.submit("web", [str(ok)], batch="a")
    bad = tmp_path / "clash.parquet"
    pq.write_table(pa.table({"raw_data": ["y"], "n": ["not a number"]}), bad)
    before = omni.state("web")
    with pytest.raises(SchemaConflictError) as e:
        omni.submit("web", [str(bad)], batch="b")
    assert "clash.parquet" in str(e.value) and "'n'" in str(e.value)
    assert omni.state("web") == before


def test_warc_and_gzip_jsonl_sources(omni, tmp_path):
    warcs = sorted(corpora.fetch("pywb-warcs").rglob("*.warc.gz"))
    gz = tmp_path / "x.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write('{"text": "gz one"}\n{"text": "gz two"}\n')
    omni.create_table("web")
    r = omni.submit("web", [str(w) for w in warcs], batch="crawl")
    # every record the WARC reader yields is accounted for, and every written one is a row
    from omni_iceberg.ingest.sources import reader_for

    items = sum(1 for w in warcs for _ in reader_for(str(w)).read(str(w)))
    assert r.read == items == r.written + r.duplicates + r.rejected and r.written > 0
    ids = omni.read("web", columns=["_ai_unique_id_"], batches=["crawl"]).column(0).to_pylist()
    assert len(ids) == len(set(ids)) == r.written
    urls = [x["url"] for x in omni.read("web", columns=["RawData"]).column("RawData").to_pylist()]
    assert all(u and u.startswith("http") for u in urls)
    r2 = omni.submit("web", [str(gz)], batch="gz", field_map={"text": "raw_data"})
    assert r2.written == 2


@pytest.mark.parametrize("name", ["bad-name", "1abc", "_ai_x", "RawData", "a__b", "x.y.z"])
def test_invalid_or_reserved_table_names(omni, name):
    with pytest.raises(InvalidIdentifierError):
        omni.create_table(name)


def test_invalid_batch_and_map_targets(omni, tmp_path):
    omni.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text('{"raw_data": "x"}\n')
    with pytest.raises(InvalidIdentifierError, match="batch"):
        omni.submit("web", [str(src)], batch="bad batch!")
    with pytest.raises(InvalidIdentifierError, match="reserved"):
        omni.submit("web", [str(src)], batch="a", field_map={"raw_data": "_ai_unique_id_"})


def test_unknown_logical_table(omni, tmp_path):
    omni.create_table("web")
    with pytest.raises(NoSuchLogicalTableError, match="aidata.wbe.*known in aidata: aidata.web"):
        omni.submit("wbe", [str(tmp_path)], batch="a")


def test_memory_stays_bounded_by_chunks(omni, tmp_path, monkeypatch):
    """Many small chunks: every chunk is written as it fills, never held together.

    The reader is wrapped: records pulled from the source past the last one written are
    at most what the overlapped steps may hold (see ingest.overlap), here with their byte
    budgets at their least: two blocks read ahead (one queued, one waiting for room), the
    chunk being filled and the chunk being written - four chunks of 300, whatever the
    input's length.
    """
    src = tmp_path / "many.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"document number {i}"}) + "\n" for i in range(6000)))
    monkeypatch.setattr(pipeline, "READ_AHEAD_BYTES", 1)
    monkeypatch.setattr(pipeline, "WRITE_QUEUE_BYTES", 1)
    seen = {"peak_rows": 0, "written": 0, "pulled": 0, "max_ahead": 0}
    real_write = pipeline.StagedWrite.write
    real_iter = pipeline.iter_sources

    def spy(self, data, **kwargs):
        seen["peak_rows"] = max(seen["peak_rows"], data.num_rows)
        out = real_write(self, data, **kwargs)
        seen["written"] += data.num_rows
        return out

    def counting_reader(*args, **kwargs):
        for item in real_iter(*args, **kwargs):
            seen["pulled"] += len(item) if isinstance(item, SourceBlock) else 1  # a block: many records
            seen["max_ahead"] = max(seen["max_ahead"], seen["pulled"] - seen["written"])
            yield item

    monkeypatch.setattr(pipeline.StagedWrite, "write", spy)
    monkeypatch.setattr(pipeline, "iter_sources", counting_reader)
    omni.create_table("web")
    r = pipeline.submit(omni.store, "aidata", "web", [str(src)], "a", chunk_rows=300)
    assert r.written == 6000 and seen["peak_rows"] == 300
    assert seen["pulled"] == seen["written"] == 6000
    assert 300 <= seen["max_ahead"] <= 4 * 300  # a few chunks, not the input
    assert omni.read("web").num_rows == 6000
    snap = omni.catalog.load_table("aidata.web__base").snapshot_by_id(omni.state("web").base_table.snapshot_id)
    assert snap.summary["omni.batch"] == "a"  # the batch is ONE snapshot however many chunks


def test_rejects_table_is_plain_iceberg(omni, tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{broken\n{"raw_data": "fine"}\n')
    omni.create_table("web")
    omni.submit("web", [str(src)], batch="a")
    table = omni.catalog.load_table("omni_sys.rejects")
    assert table.scan().to_arrow().num_rows == 1
    assert system_tables.read_rows(omni.catalog, system_tables.REJECTS).column("line").to_pylist() == [1]
