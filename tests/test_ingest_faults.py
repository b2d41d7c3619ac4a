"""Bad input never sinks a batch; colliding names never lose a value; empty input uses no name.

Each test feeds the real pipeline (embedded SQLite catalog, real Iceberg tables) one
kind of fault from the issue list and checks what landed, what was rejected and why.
"""

import gzip
import io
import json
import os
import signal
import socket
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog_ext.errors import InvalidIdentifierError, RejectLimitExceededError, SchemaConflictError, SourceError
from omni_iceberg.api import Omni
from omni_iceberg.cli import main
from omni_iceberg.ingest.identity import content_id


@pytest.fixture
def omni(tmp_path) -> Omni:
    o = Omni(home=tmp_path / "home")
    o.create_table("web")
    return o


def _texts(omni, name="web"):
    return sorted(r["raw_data"] for r in omni.read(name, columns=["RawData"]).column("RawData").to_pylist())


def _rejects(omni, batch):
    return sorted(omni.rejects("web", batch).to_pylist(), key=lambda r: (r["line"] or 0, r["offset"] or 0))


# ---- 2. one bad record never sinks the batch ------------------------------------------------

def test_lone_surrogate_and_huge_int_in_jsonl_are_rejects(omni, tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text(
        '{"raw_data": "good one", "n": 1}\n'
        '{"raw_data": "a \\ud800"}\n'                      # lone surrogate in the content
        '{"raw_data": "surrogate key", "k\\udc80": 1}\n'    # in a key: fine, the name is normalised to k_
        '{"raw_data": "meta", "note": "b \\udfff c"}\n'     # ... in another field
        '{"raw_data": "big", "n": 18446744073709551615}\n'  # above int64
        '{"raw_data": "small", "n": -9223372036854775809}\n'
        '{"raw_data": "edge", "n": 9223372036854775807}\n'  # int64 max itself is fine
        '{"raw_data": "good two", "n": 2}\n'
    )
    r = omni.submit("web", [str(src)], batch="b")
    assert (r.read, r.written, r.rejected) == (8, 4, 4)
    assert _texts(omni) == ["edge", "good one", "good two", "surrogate key"]
    rejects = _rejects(omni, "b")
    assert [(x["line"], x["field"]) for x in rejects] == [(2, "raw_data"), (4, "note"), (5, "n"), (6, "n")]
    assert "lone surrogate U+D800 at character 2" in rejects[0]["reason"]
    assert "U+DFFF" in rejects[1]["reason"]
    assert "does not fit a long" in rejects[2]["reason"] and "18446744073709551615" in rejects[2]["reason"]
    assert all(x["source_file"] == str(src) for x in rejects)


def test_uint64_and_binary_parquet_values_are_rejects(omni, tmp_path):
    src = tmp_path / "a.parquet"
    pq.write_table(pa.table({
        "raw_data": pa.array([b"doc one", b"doc \xff two", b"doc three", b"doc four"], pa.binary()),
        "big": pa.array([1, 2, 2**64 - 1, 3], pa.uint64()),
    }), src)
    r = omni.submit("web", [str(src)], batch="b")
    assert (r.read, r.written, r.rejected) == (4, 2, 2)
    assert _texts(omni) == ["doc four", "doc one"]
    rejects = _rejects(omni, "b")
    assert [(x["offset"], x["field"]) for x in rejects] == [(1, "raw_data"), (2, "big")]
    assert rejects[0]["reason"].startswith("invalid UTF-8 at byte 4 (bytes ff")  # never U+FFFD
    assert "does not fit a long" in rejects[1]["reason"]


def test_truncated_parquet_is_a_per_file_reject_and_the_other_files_land(omni, tmp_path):
    good, cut = tmp_path / "good.parquet", tmp_path / "cut.parquet"
    pq.write_table(pa.table({"raw_data": [f"row {i}" for i in range(20)]}), good)
    pq.write_table(pa.table({"raw_data": [f"other {i}" for i in range(20)]}), cut)
    cut.write_bytes(cut.read_bytes()[:-30])
    r = omni.submit("web", [str(cut), str(good)], batch="b")
    assert (r.read, r.written, r.rejected) == (21, 20, 1)
    (reject,) = _rejects(omni, "b")
    assert reject["source_file"] == str(cut) and "Parquet" in reject["reason"]


def test_cli_truncated_parquet_alone_exits_4_and_commits_nothing(tmp_path):
    cut = tmp_path / "cut.parquet"
    pq.write_table(pa.table({"raw_data": ["x", "y"]}), cut)
    cut.write_bytes(cut.read_bytes()[:-30])
    home = tmp_path / "home"
    assert main(["--home", str(home), "table", "create", "web"]) == 0
    assert main(["--home", str(home), "submit", "web", str(cut), "--batch", "b", "--no-progress"]) == 4
    assert Omni(home=home).state("web").batch("b") is None


def test_nested_junk_lands_as_json_text_or_is_rejected_with_a_reason(omni, tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text(
        '{"raw_data": "nested", "meta": {"b": [1, {"c": null}], "a": "\\u0000x"}}\n'
        '{"raw_data": "nested surrogate", "meta": {"k": "\\ud800"}}\n'
    )
    r = omni.submit("web", [str(src)], batch="b")
    assert (r.written, r.rejected) == (1, 1)
    row = omni.read("web", columns=["RawData"]).column("RawData").to_pylist()[0]
    assert json.loads(row["meta"]) == {"a": "\x00x", "b": [1, {"c": None}]}
    assert _rejects(omni, "b")[0]["field"] == "meta"


# ---- 3. colliding field names ---------------------------------------------------------------

def test_fields_normalising_to_one_name_reject_the_record(omni, tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text(
        '{"raw_data": "one", "raw-data": "two"}\n'
        '{"raw_data": "three", "x-y": 1, "x_y": 2, "x y": 3}\n'
        '{"raw_data": "fine", "x-y": 5}\n'
    )
    r = omni.submit("web", [str(src)], batch="b")
    assert (r.written, r.rejected) == (1, 2)
    rejects = _rejects(omni, "b")
    assert rejects[0]["field"] == "raw_data" and "'raw_data' and 'raw-data'" in rejects[0]["reason"]
    assert rejects[1]["field"] == "x_y" and "'x-y' and 'x_y'" in rejects[1]["reason"]
    assert "--map" in rejects[1]["reason"]
    assert omni.read("web", columns=["RawData"]).column("RawData").to_pylist()[0]["x_y"] == 5


@pytest.mark.parametrize("order", ["body first", "raw_data first"])
def test_a_mapping_onto_an_existing_field_rejects_whatever_the_key_order(omni, tmp_path, order):
    src = tmp_path / "a.jsonl"
    pair = ['"body": "from body"', '"raw_data": "from raw"']
    if order != "body first":
        pair.reverse()
    src.write_text("{" + ", ".join(pair) + "}\n" + '{"body": "only body"}\n')
    r = omni.submit("web", [str(src)], batch="b", field_map={"body": "raw_data"})
    assert (r.written, r.rejected) == (1, 1)
    assert _texts(omni) == ["only body"]
    (reject,) = _rejects(omni, "b")
    assert "'body' (mapped)" in reject["reason"] and "--map raw_data=OTHER_NAME" in reject["reason"]


def test_a_mapping_onto_an_existing_field_is_undone_by_mapping_that_field_away(omni, tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"raw_data": "from raw", "body": "from body"}\n')
    r = omni.submit("web", [str(src)], batch="b", field_map={"body": "raw_data", "raw_data": "orig"})
    assert r.written == 1
    (row,) = omni.read("web", columns=["RawData"]).column("RawData").to_pylist()
    assert (row["raw_data"], row["orig"]) == ("from body", "from raw")


def test_parquet_columns_that_collide_are_refused_before_writing(omni, tmp_path):
    src = tmp_path / "a.parquet"
    pq.write_table(pa.table({"raw_data": ["x"], "x-y": [1], "x_y": [2]}), src)
    before = omni.state("web")
    with pytest.raises(SchemaConflictError, match=r"a\.parquet: fields 'x-y' and 'x_y' both land in RawData\.x_y"):
        omni.submit("web", [str(src)], batch="b")
    assert omni.state("web") == before


def test_two_sources_mapped_to_one_target_are_refused(omni, tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"a": "x", "b": "y"}\n')
    with pytest.raises(InvalidIdentifierError, match="both 'a' and 'b' are mapped to 'raw_data'"):
        omni.submit("web", [str(src)], batch="b", field_map=["a=raw_data", "b=raw_data"])


# ---- 4. empty and odd input -----------------------------------------------------------------

def test_empty_input_commits_nothing_and_leaves_the_name_free(omni, tmp_path):
    empty, real = tmp_path / "empty.jsonl", tmp_path / "real.jsonl"
    empty.write_text("\n\n")
    real.write_text('{"raw_data": "now with content"}\n')
    with pytest.raises(SourceError, match="no records in .*empty.jsonl.*batch 'b' is still free") as e:
        omni.submit("web", [str(empty)], batch="b")
    assert e.value.exit_code == 2
    assert omni.state("web").version == 1
    r = omni.submit("web", [str(real)], batch="b")
    assert not r.already_committed and r.written == 1


def test_all_rejected_commits_nothing_and_rejects_of_failed_attempts_are_not_the_batchs(omni, tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"raw_data": ""}\n{oops\n')
    with pytest.raises(RejectLimitExceededError, match="all 2 records rejected"):
        omni.submit("web", [str(src)], batch="b")
    assert omni.state("web").batch("b") is None
    assert len(_rejects(omni, "b")) == 2  # an uncommitted batch shows every attempt's rejects
    src.write_text('{"raw_data": "fixed"}\n{still bad\n')
    r = omni.submit("web", [str(src)], batch="b")
    assert (r.written, r.rejected) == (1, 1)
    rejects = _rejects(omni, "b")
    assert [x["submit_id"] for x in rejects] == [r.submit_id]
    assert len(rejects) == omni.state("web").batch("b").rejected == 1


def test_a_mistyped_mapping_stops_the_batch_with_one_error(omni, tmp_path, capsys):
    """#40: `--map body_txt=raw_data` used to reject all 1,200 records one by one and store each reject."""
    src = tmp_path / "dump.jsonl"
    src.write_text("".join(json.dumps({"body_text": f"page {i}", "url": f"u{i}"}) + "\n" for i in range(1200)))
    home = ["--home", str(tmp_path / "home")]
    rc = main([*home, "submit", "web", str(src), "--batch", "b", "--map", "body_txt=raw_data", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err == ("omni: error: --map body_txt=raw_data: none of the first 1200 records of this batch has a field "
                   "'body_txt'; did you mean 'body_text'? (fields: body_text, url); nothing committed. "
                   "Field names are case-sensitive")
    assert omni.state("web").version == 1 and omni.state("web").batch("b") is None
    assert _rejects(omni, "b") == []  # not 1,200 rejects
    r = omni.submit("web", [str(src)], batch="b", field_map={"body_text": "raw_data"})  # the name is still free
    assert (r.written, r.rejected, r.logical_version) == (1200, 0, 2)
    # a short input is checked at its end, and every mapping is checked, not only raw_data's
    short = tmp_path / "a.jsonl"
    short.write_text('{"raw_data": "x", "title": "t"}\n')
    with pytest.raises(SchemaConflictError, match=r"--map titel=heading: none of the 1 records of this batch has "
                                                  r"a field 'titel'; did you mean 'title'\? \(fields: raw_data, title\)"):
        omni.submit("web", [str(short)], batch="c", field_map={"titel": "heading", "title": "heading2"})
    assert omni.state("web").version == 2


def test_symlink_loop_and_broken_link_are_named(omni, tmp_path):
    loop_a, loop_b, broken = tmp_path / "loop_a.jsonl", tmp_path / "loop_b.jsonl", tmp_path / "broken.jsonl"
    os.symlink(loop_b, loop_a)
    os.symlink(loop_a, loop_b)
    os.symlink(tmp_path / "gone.jsonl", broken)
    with pytest.raises(SourceError, match="symbolic link loop at .*loop_a.jsonl"):
        omni.submit("web", [str(loop_a)], batch="b")
    with pytest.raises(SourceError, match="broken symbolic link .*broken.jsonl -> .*gone.jsonl"):
        omni.submit("web", [str(broken)], batch="b")
    with pytest.raises(SourceError, match="source not found"):
        omni.submit("web", [str(tmp_path / "nothing.jsonl")], batch="b")


def test_invalid_utf8_is_rejected_with_field_and_byte_offset_in_every_reader(omni, tmp_path):
    bad = b"caf\xc3 au lait"  # a cut multi-byte sequence at byte 3
    (tmp_path / "j.jsonl").write_bytes(b'{"raw_data": "ok j"}\n{"raw_data": "' + bad + b'"}\n')
    (tmp_path / "c.csv").write_bytes(b"raw_data\nok c\n" + bad + b"\n")
    pq.write_table(pa.table({"raw_data": pa.array([b"ok p", bad], pa.binary())}), tmp_path / "p.parquet")
    html = tmp_path / "html"
    html.mkdir()
    (html / "a.html").write_bytes(b"<p>ok h</p>")
    (html / "b.html").write_bytes(b"<p>" + bad + b"</p>")
    for kind, path in [("jsonl", "j.jsonl"), ("csv", "c.csv"), ("parquet", "p.parquet"), ("html", "html")]:
        r = omni.submit("web", [str(tmp_path / path)], batch=kind)
        assert (r.written, r.rejected) == (1, 1), kind
        (reject,) = _rejects(omni, kind)
        assert "invalid UTF-8 at byte" in reject["reason"], (kind, reject)
        assert reject["field"] == "raw_data", (kind, reject)
    assert all("\ufffd" not in t for t in _texts(omni))


def test_binary_column_keeps_bytes_where_the_table_says_binary(omni, tmp_path):
    """A table whose RawData field is binary stores raw bytes as they are, valid UTF-8 or not."""
    from catalog_ext import iceberg_io
    from catalog_ext.contract import RAW_STAGE
    from catalog_ext.family import LogicalColumn, PhysicalColumn
    from catalog_ext.updates import AddLogicalColumns, AddPhysicalColumns
    from pyiceberg.types import BinaryType

    state = omni.state("web")

    def evolve(table):
        with table.update_schema() as update:
            update.add_column((RAW_STAGE, "blob"), BinaryType())

    iceberg_io.with_table_retry(omni.catalog, state.base_table.identifier, evolve)
    omni.store.commit("aidata", "web", lambda latest: (
        AddLogicalColumns((LogicalColumn(path=f"{RAW_STAGE}.blob", type="binary", kind="stage"),)),
        AddPhysicalColumns((PhysicalColumn(table="base", name=f"{RAW_STAGE}.blob", logical=f"{RAW_STAGE}.blob"),)),
    ), operation="schema")
    src = tmp_path / "a.parquet"
    pq.write_table(pa.table({"raw_data": ["doc"], "blob": pa.array([b"\x00\xff\xfe"], pa.binary())}), src)
    r = omni.submit("web", [str(src)], batch="b")
    assert r.written == 1
    (row,) = omni.read("web", columns=["RawData"]).column("RawData").to_pylist()
    assert row["blob"] == b"\x00\xff\xfe"
    assert omni.read("web", columns=["_ai_unique_id_"]).column(0).to_pylist() == [content_id("doc")]


def test_bad_names_in_a_reject_are_stored_escaped(omni, tmp_path):
    """A non-UTF-8 file name, or a surrogate in a JSON key, must not crash writing the reject itself."""
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "ok.html").write_text("<p>fine</p>")
    odd = os.path.join(os.fsencode(pages), b"caf\xe9.html")
    with open(odd, "wb") as f:
        f.write(b"<p>odd name</p>")
    r = omni.submit("web", [str(pages)], batch="h")
    assert (r.written, r.rejected) == (1, 1)
    (reject,) = _rejects(omni, "h")
    assert reject["source_file"].endswith("caf\\udce9.html") and reject["field"] == "path"
    assert "undecodable byte 0xe9" in reject["reason"]
    src = tmp_path / "k.jsonl"
    src.write_text('{"raw_data": "x", "k\\ud800": "v \\udfff"}\n{"raw_data": "y"}\n')
    r = omni.submit("web", [str(src)], batch="k")
    assert (r.written, r.rejected) == (1, 1)
    assert _rejects(omni, "k")[0]["field"] == "k\\ud800"


# ---- 5. hostile files: never a hang, a leak or an unbounded read ------------------------------

MIB = 1 << 20


@contextmanager
def _deadline(seconds: int):
    """Fail, instead of hanging the test run, when the block blocks (an open of a FIFO does)."""
    def expired(_signum, _frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _reject_pairs(omni, batch, name="web"):
    return sorted((r["source_file"], r["line"], r["offset"], r["reason"]) for r in omni.rejects(name, batch).to_pylist())


def test_fifos_and_sockets_in_a_folder_are_rejects_never_opened(omni, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text('{"raw_data": "one"}\n')
    os.mkfifo(src / "b.jsonl")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "c.jsonl"))
        (src / "d.jsonl").write_text('{"raw_data": "two"}\n')
        with _deadline(60):
            r = omni.submit("web", [str(src)], batch="b")
            # named directly, a FIFO is refused the same way
            direct = omni.submit("web", [str(src / "b.jsonl"), str(src / "d.jsonl")], batch="c")
    assert (r.read, r.written, r.rejected) == (4, 2, 2)
    assert _texts(omni) == ["one", "two"]
    assert _reject_pairs(omni, "b") == [(str(src / "b.jsonl"), None, None, "not a regular file (a FIFO): not opened"),
                                        (str(src / "c.jsonl"), None, None, "not a regular file (a socket): not opened")]
    assert (direct.read, direct.written, direct.duplicates, direct.rejected) == (2, 0, 1, 1)
    assert _reject_pairs(omni, "c") == [(str(src / "b.jsonl"), None, None, "not a regular file (a FIFO): not opened")]


def test_a_fifo_among_parquet_files_does_not_hang_the_schema_check(omni, tmp_path):
    src = tmp_path / "tables"
    src.mkdir()
    pq.write_table(pa.table({"raw_data": ["p1", "p2"]}), src / "a.parquet")
    os.mkfifo(src / "b.parquet")
    with _deadline(60):
        r = omni.submit("web", [str(src)], batch="b")
    assert (r.read, r.written, r.rejected) == (3, 2, 1)
    assert _reject_pairs(omni, "b") == [(str(src / "b.parquet"), None, None, "not a regular file (a FIFO): not opened")]


def test_a_sparse_document_is_refused_from_its_size(omni, tmp_path, monkeypatch):
    from tests.test_sources import _tiny_pdf

    monkeypatch.setenv("OMNI_MAX_DOCUMENT_BYTES", str(MIB))
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "a.html").write_text("<p>small page</p>")
    with open(pages / "big.html", "wb") as f:
        f.truncate(2 << 30)  # 2 GiB of holes: nothing on disk, all of it if read
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    (pdfs / "a.pdf").write_bytes(_tiny_pdf(["small pdf"]))
    with open(pdfs / "big.pdf", "wb") as f:
        f.truncate(64 * MIB)
    r = omni.submit("web", [str(pages)], batch="html")
    assert (r.read, r.written, r.rejected) == (2, 1, 1)
    r = omni.submit("web", [str(pdfs)], batch="pdf")
    assert (r.read, r.written, r.rejected) == (2, 1, 1)
    assert _texts(omni) == ["<p>small page</p>", "small pdf"]
    hint = "; OMNI_MAX_DOCUMENT_BYTES raises the limit"
    assert _reject_pairs(omni, "html") == [
        (str(pages / "big.html"), None, None, f"file larger than the limit ({2 << 30} bytes > {MIB}){hint}")]
    assert _reject_pairs(omni, "pdf") == [
        (str(pdfs / "big.pdf"), None, None, f"file larger than the limit ({64 * MIB} bytes > {MIB}){hint}")]


def test_an_overlong_line_is_a_reject_and_the_rest_of_the_file_lands(omni, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_MAX_RECORD_BYTES", str(MIB))
    sparse = tmp_path / "holes.jsonl"
    with open(sparse, "wb") as f:
        f.write(b'{"raw_data": "first"}\n')
        f.truncate(16 * MIB)  # one line of 16 MiB of NUL bytes, never written
    with open(sparse, "ab") as f:
        f.write(b'\n{"raw_data": "last"}\n')
    bomb = tmp_path / "bomb.jsonl.gz"
    head, tail = b'{"raw_data": "', b'"}'
    with gzip.open(bomb, "wb") as f:
        f.write(b'{"raw_data": "before"}\n' + head)
        for _ in range(64):
            f.write(b"0" * MIB)  # 64 MiB of zeros on one line, about 64 KiB compressed
        f.write(tail + b'\n{"raw_data": "after"}\n')
    assert bomb.stat().st_size < MIB
    r = omni.submit("web", [str(sparse), str(bomb)], batch="b")
    assert (r.read, r.written, r.rejected) == (6, 4, 2)
    assert _texts(omni) == ["after", "before", "first", "last"]
    assert _reject_pairs(omni, "b") == [
        (str(bomb), 2, None, f"line longer than the limit ({len(head) + 64 * MIB + len(tail)} bytes > {MIB}); "
                             "OMNI_MAX_RECORD_BYTES raises the limit"),
        (str(sparse), 2, None, f"line longer than the limit ({16 * MIB - 22} bytes > {MIB}); "
                               "OMNI_MAX_RECORD_BYTES raises the limit"),
    ]


def test_an_overlong_csv_line_stops_that_file_and_the_batch_goes_on(omni, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_MAX_RECORD_BYTES", str(MIB))
    bomb = tmp_path / "bomb.csv.gz"
    with gzip.open(bomb, "wb") as f:
        f.write(b"raw_data,n\nfirst,1\n")
        for _ in range(32):
            f.write(b"0" * MIB)
        f.write(b",2\nnever,3\n")
    good = tmp_path / "good.csv"
    good.write_text("raw_data,n\nother,4\n")
    r = omni.submit("web", [str(bomb), str(good)], batch="b")
    assert (r.read, r.written, r.rejected) == (3, 2, 1)
    assert _texts(omni) == ["first", "other"]
    assert _reject_pairs(omni, "b") == [
        (str(bomb), 3, None, f"line longer than the limit (more than {MIB} bytes); OMNI_MAX_RECORD_BYTES raises "
                             "the limit. A CSV parser cannot resume inside a record: stopped reading here")]


def test_a_warc_response_over_the_limit_is_a_reject(omni, tmp_path, monkeypatch):
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    monkeypatch.setenv("OMNI_MAX_RECORD_BYTES", str(MIB))
    path = tmp_path / "crawl.warc.gz"
    offsets = []
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        for url, body in [("https://a.example/", b"<p>small</p>"), ("https://b.example/", b"<p>" + b"x" * (2 * MIB)),
                          ("https://c.example/", b"<p>after</p>")]:
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            offsets.append(f.tell())
            writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body),
                                                          http_headers=headers))
    r = omni.submit("web", [str(path)], batch="b")
    assert (r.read, r.written, r.rejected) == (3, 2, 1)
    assert _texts(omni) == ["<p>after</p>", "<p>small</p>"]
    assert _reject_pairs(omni, "b") == [
        (str(path), None, offsets[1], f"response body longer than the limit (more than {MIB} bytes); "
                                      "OMNI_MAX_RECORD_BYTES raises the limit")]


def _outside_and_tree(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shadow").write_text("root:$6$SHADOWHASH:19000:0:99999:7:::\n")
    (outside / "more.html").write_text("<p>outside page</p>")
    (outside / "secret.py").write_text("KEY = 'SHADOWKEY'\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.html").write_text("<p>inside</p>")
    os.symlink(docs / "a.html", docs / "alias.html")      # inside the tree: read
    os.symlink(outside, docs / "ext")                     # a folder outside
    os.symlink(outside / "shadow", docs / "shadow.html")  # a file outside
    return outside, docs


def test_links_out_of_a_submitted_folder_are_refused_unless_asked_for(omni, tmp_path):
    outside, docs = _outside_and_tree(tmp_path)
    r = omni.submit("web", [str(docs)], batch="b")
    assert (r.read, r.written, r.duplicates, r.rejected) == (4, 1, 1, 2)
    assert _texts(omni) == ["<p>inside</p>"]
    assert _reject_pairs(omni, "b") == [
        (str(docs / "ext"), None, None, f"symbolic link to folder {outside}, outside the source tree {docs}: "
                                        "not followed (--follow-links reads it)"),
        (str(docs / "shadow.html"), None, None, f"symbolic link to {outside / 'shadow'}, outside the source tree "
                                                f"{docs}: refused (--follow-links reads it)"),
    ]
    r = omni.submit("web", [str(docs)], batch="c", follow_links=True)
    assert (r.read, r.written, r.duplicates, r.rejected) == (4, 2, 2, 0)
    rows = omni.read("web", columns=["RawData"], batches=["c"]).column("RawData").to_pylist()
    assert sorted((row["path"], row["raw_data"]) for row in rows) == [
        ("ext/more.html", "<p>outside page</p>"), ("shadow.html", "root:$6$SHADOWHASH:19000:0:99999:7:::\n")]


def test_links_out_of_a_code_tree_and_the_cli_flag(tmp_path):
    outside, _docs = _outside_and_tree(tmp_path)
    code = tmp_path / "code"
    code.mkdir()
    (code / "main.py").write_text("print('hi')\n")
    os.symlink(outside / "secret.py", code / "secret.py")
    home = str(tmp_path / "home")
    assert main(["--home", home, "table", "create", "code"]) == 0
    assert main(["--home", home, "submit", "code", str(code), "--batch", "b", "--no-progress"]) == 0
    omni = Omni(home=home)
    assert _texts(omni, "code") == ["print('hi')\n"]
    assert [(r[0], r[3]) for r in _reject_pairs(omni, "b", "code")] == [
        (str(code / "secret.py"), f"symbolic link to {outside / 'secret.py'}, outside the source tree {code}: "
                                  "refused (--follow-links reads it)")]
    assert main(["--home", home, "submit", "code", str(code), "--batch", "c", "--follow-links", "--no-progress"]) == 0
    assert _texts(omni, "code") == ["KEY = 'SHADOWKEY'\n", "print('hi')\n"]


def test_a_parquet_link_out_of_the_tree_is_neither_read_nor_schema_checked(omni, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    pq.write_table(pa.table({"raw_data": pa.array([1, 2], pa.int64())}), outside / "x.parquet")
    src = tmp_path / "tables"
    src.mkdir()
    pq.write_table(pa.table({"raw_data": ["p1"]}), src / "a.parquet")
    os.symlink(outside / "x.parquet", src / "x.parquet")
    r = omni.submit("web", [str(src)], batch="b")  # the outside file's long column would be a schema conflict
    assert (r.read, r.written, r.rejected) == (2, 1, 1)
    assert [p[0] for p in _reject_pairs(omni, "b")] == [str(src / "x.parquet")]
