"""Bad input never sinks a batch; colliding names never lose a value; empty input uses no name.

Each test feeds the real pipeline (embedded SQLite catalog, real Iceberg tables) one
kind of fault from the issue list and checks what landed, what was rejected and why.
"""

import json
import os

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
