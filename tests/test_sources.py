"""Source readers: what each yields on good input, and how every bad input is reported.

Good-input files are written here with the real writers (json, csv, pyarrow, warcio)
or hand-built where no writer exists (a two-page PDF); the code tree is the running
interpreter's own stdlib. Readers over the fetched real corpora (Python docs, pywb
crawls, HumanEval, Octave manuals) are exercised in ``test_corpora.py``.
"""

from __future__ import annotations

import gzip
import io
import json
import sysconfig
import tracemalloc
from pathlib import Path

import pytest

from catalog_ext.errors import SourceError
from omni_iceberg.ingest.sources import (
    FOLDER_PRIORITY,
    READERS,
    iter_sources,
    known_kinds,
    reader_for,
)
from omni_iceberg.ingest.sources.code_tree import MAX_CODE_BYTES, CodeTreeReader
from omni_iceberg.ingest.sources.html_dir import HtmlDirReader
from omni_iceberg.ingest.sources.jsonl import JsonlReader
from omni_iceberg.ingest.sources.pdf import PAGE_SEPARATOR, PdfReader
from omni_iceberg.ingest.sources.records import RecordProblem, SourceRecord
from omni_iceberg.ingest.sources.tabular import CsvReader, ParquetReader
from omni_iceberg.ingest.sources.warc import WarcReader, parse_content_type


def split(items):
    """(records, problems) of a reader's output, in order."""
    items = list(items)
    records = [i for i in items if isinstance(i, SourceRecord)]
    problems = [i for i in items if isinstance(i, RecordProblem)]
    assert len(records) + len(problems) == len(items)
    return records, problems


# -- JSON Lines -----------------------------------------------------------------


def test_jsonl_reads_objects_with_line_numbers_and_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"id": 1, "text": "caf\xc3\xa9", "tags": ["a"]}\n'
        b"\n"
        b'  \r\n'
        b'{"id": 2, "meta": {"k": null}}\r\n'
    )
    records, problems = split(JsonlReader().read(str(path)))
    assert problems == []
    assert [r.line for r in records] == [1, 4]
    assert records[0].fields == {"id": 1, "text": "café", "tags": ["a"]}
    assert records[1].fields == {"id": 2, "meta": {"k": None}}
    assert records[1].location == f"{path}:4"


def test_jsonl_bad_lines_are_problems_and_the_rest_is_read(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        b'{"id": 1}\n'
        b'{"a": 1,, "b": 2}\n'  # malformed at column 9
        b'[1, 2]\n'  # not an object
        b'{"text": "ab\xff\xfe"}\n'  # invalid UTF-8 at byte 12
        b'"just a string"\n'
        b'{"id": 6}\n'
    )
    records, problems = split(JsonlReader().read(str(path)))
    assert [r.fields["id"] for r in records] == [1, 6]
    assert [p.line for p in problems] == [2, 3, 4, 5]
    malformed, array, bad_utf8, string = (p.message() for p in problems)
    assert malformed.startswith(f"{path}:2: malformed JSON at column 9")
    assert "expected a JSON object, got an array" in array
    assert "invalid UTF-8 at byte 12 of the line" in bad_utf8 and "ff fe" in bad_utf8
    assert "got a string" in string


def test_jsonl_gz_and_truncated_gzip(tmp_path: Path) -> None:
    lines = b"".join(json.dumps({"n": i, "pad": "x" * 50}).encode() + b"\n" for i in range(2000))
    good = tmp_path / "good.jsonl.gz"
    good.write_bytes(gzip.compress(lines))
    records, problems = split(JsonlReader().read(str(good)))
    assert (len(records), problems) == (2000, [])

    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    records, problems = split(JsonlReader().read(str(cut)))
    assert 0 < len(records) < 2000
    assert [r.fields["n"] for r in records] == list(range(len(records)))  # a prefix, in order
    (problem,) = problems
    assert problem.line is not None and problem.line > len(records)
    assert "corrupt or truncated file" in problem.reason


def test_jsonl_not_gzip_behind_gz_name_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl.gz"
    path.write_text('{"a": 1}\n')
    records, problems = split(JsonlReader().read(str(path)))
    assert records == [] and len(problems) == 1
    assert problems[0].line == 1 and "BadGzipFile" in problems[0].reason


def test_jsonl_streams_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with open(path, "w") as f:
        for i in range(20_000):
            f.write(json.dumps({"i": i, "text": "lorem ipsum " * 8}) + "\n")
    assert path.stat().st_size > 2_000_000
    tracemalloc.start()
    try:
        count = sum(1 for _ in JsonlReader().read(str(path)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20_000
    assert peak < 512 * 1024, f"peak {peak} bytes: the reader holds more than a few lines"


@pytest.mark.parametrize("compressed", [True, False])
def test_jsonl_overlong_line_is_skipped_without_holding_it(tmp_path: Path, monkeypatch, compressed: bool) -> None:
    """A small .gz can hold gigabytes on one line: the line is rejected, the memory stays bounded."""
    limit = 1 << 20
    monkeypatch.setenv("OMNI_MAX_RECORD_BYTES", str(limit))
    path = tmp_path / ("bomb.jsonl.gz" if compressed else "bomb.jsonl")
    with (gzip.open(path, "wb", compresslevel=1) if compressed else open(path, "wb")) as f:
        f.write(b'{"a": 1}\n')
        for _ in range(64):
            f.write(b"0" * (1 << 20))
        f.write(b'\n{"a": 2}\n' + b"x" * limit + b"\n")  # a line of exactly the limit is kept to the parser
    for read in (lambda: JsonlReader().read(str(path)), lambda: JsonlReader().read_blocks(str(path), 100)):
        tracemalloc.start()
        try:
            items = list(read())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        records, problems = split(i for item in items for i in (item.records() if hasattr(item, "records") else [item]))
        assert [r.fields for r in records] == [{"a": 1}, {"a": 2}]
        assert [(p.source_file, p.line, p.reason) for p in problems] == [
            (str(path), 2, f"line longer than the limit ({64 << 20} bytes > {limit}); "
                           "OMNI_MAX_RECORD_BYTES raises the limit"),
            (str(path), 4, "malformed JSON at column 1: Expecting value")]
        # a few times the limit (the longest line kept, its copies), far below the 64 MiB line
        assert peak < 16 * limit, f"peak {peak} bytes: the reader held the over-long line"


def test_csv_overlong_line_stops_the_file_without_holding_it(tmp_path: Path, monkeypatch) -> None:
    limit = 1 << 20
    monkeypatch.setenv("OMNI_MAX_RECORD_BYTES", str(limit))
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b"text,n\nfirst,1\n")
        for _ in range(64):
            f.write(b"0" * (1 << 20))
        f.write(b",2\nlast,3\n")
    tracemalloc.start()
    try:
        records, problems = split(CsvReader().read(str(path)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.fields for r in records] == [{"text": "first", "n": "1"}]
    assert [(p.line, p.reason.split(";")[0]) for p in problems] == [
        (3, f"line longer than the limit (more than {limit} bytes)")]
    assert peak < 16 * limit, f"peak {peak} bytes: the reader held the over-long line"


# -- CSV and Parquet ------------------------------------------------------------


def test_csv_records_problems_and_physical_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(
        b"id,text\n"
        b"1,hello\n"
        b'2,"two\nlines"\n'  # one record on lines 3-4
        b"\n"
        b"3,a,extra\n"  # line 6: wrong column count
        b"4,bad \xff byte\n"  # line 7: invalid UTF-8 at byte 4 of 'text'
        b"5,last\n"
    )
    records, problems = split(CsvReader().read(str(path)))
    assert [(r.line, r.fields) for r in records] == [
        (2, {"id": "1", "text": "hello"}),
        (3, {"id": "2", "text": "two\nlines"}),
        (8, {"id": "5", "text": "last"}),
    ]
    wrong, bad = problems
    assert wrong.line == 6 and "expected 2 columns (as in the header), got 3" in wrong.reason
    assert (bad.line, bad.field) == (7, "text")
    assert bad.message() == f"{path}:7: field 'text': invalid UTF-8 at byte 4 of the value"


def test_csv_gz_and_header_problems(tmp_path: Path) -> None:
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(gzip.compress(b"a,b\n1,2\n"))
    records, problems = split(CsvReader().read(str(gz)))
    assert [r.fields for r in records] == [{"a": "1", "b": "2"}] and problems == []

    dup = tmp_path / "dup.csv"
    dup.write_text("a,a\n1,2\n")
    records, problems = split(CsvReader().read(str(dup)))
    assert records == [] and "duplicate column name 'a'" in problems[0].reason


def test_parquet_rows_with_row_offsets(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    table = pa.table({"id": list(range(2500)), "text": [f"doc {i}" for i in range(2500)],
                      "score": [None if i % 7 == 0 else i / 2 for i in range(2500)]})
    pq.write_table(table, path, row_group_size=1000)
    records, problems = split(ParquetReader().read(str(path)))
    assert problems == []
    assert [r.offset for r in records] == list(range(2500))
    assert records[1234].fields == {"id": 1234, "text": "doc 1234", "score": 617.0}
    assert records[7].fields["score"] is None


def test_parquet_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "junk.parquet"
    path.write_bytes(b"PAR1 this is not parquet at all")
    records, problems = split(ParquetReader().read(str(path)))
    assert records == [] and len(problems) == 1
    assert "not a readable Parquet file" in problems[0].reason


# -- WARC -----------------------------------------------------------------------


def _write_warc(path: Path) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    def response(url: str, ctype: str, body: bytes):
        headers = StatusAndHeaders("200 OK", [("Content-Type", ctype)], protocol="HTTP/1.1")
        return writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=headers)

    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=path.name.endswith(".gz"))
        writer.write_record(writer.create_warcinfo_record("t.warc", {"software": "test"}))
        req = StatusAndHeaders("GET / HTTP/1.1", [("Host", "a.example")], is_http_request=True)
        writer.write_record(writer.create_warc_record("https://a.example/", "request", http_headers=req))
        writer.write_record(response("https://a.example/", "text/html; charset=utf-8",
                                     "<html><body>café</body></html>".encode()))
        writer.write_record(response("https://a.example/logo.png", "image/png", b"\x89PNG\r\n"))
        writer.write_record(response("https://b.example/", 'text/html; charset="ISO-8859-1"',
                                     "<p>naïve</p>".encode("latin-1")))
        writer.write_record(response("https://c.example/", "text/html", b"<p>bad \xff\xfe</p>"))
        writer.write_record(response("https://d.example/x", "application/xhtml+xml", b"<html/>"))


@pytest.mark.parametrize("name", ["t.warc.gz", "t.warc"])
def test_warc_html_responses_with_offsets(tmp_path: Path, name: str) -> None:
    from warcio.archiveiterator import ArchiveIterator

    path = tmp_path / name
    _write_warc(path)
    records, problems = split(WarcReader().read(str(path)))
    assert [r.fields["url"] for r in records] == [
        "https://a.example/", "https://b.example/", "https://d.example/x"]
    first = records[0].fields
    assert first["raw_data"] == "<html><body>café</body></html>"
    assert first["content_type"] == "text/html; charset=utf-8"
    assert first["warc_record_id"].startswith("<urn:uuid:") and first["warc_date"]
    assert records[1].fields["raw_data"] == "<p>naïve</p>"  # declared charset honoured
    (bad,) = problems
    assert bad.field == "raw_data" and "at byte 7" in bad.reason
    # every offset is where that record starts: seeking there reads it back
    with open(path, "rb") as f:
        for item, url in [(records[1], "https://b.example/"), (bad, "https://c.example/")]:
            f.seek(item.offset)
            rec = next(iter(ArchiveIterator(f)))
            assert rec.rec_headers.get_header("WARC-Target-URI") == url


@pytest.mark.parametrize("name", ["t.warc.gz", "t.warc"])
@pytest.mark.parametrize("keep", [10, 60, 200, -5])
def test_warc_truncated_tail_is_one_problem_then_stop(tmp_path: Path, name: str, keep: int) -> None:
    path = tmp_path / name
    _write_warc(path)
    data = path.read_bytes()
    whole, _ = split(WarcReader().read(str(path)))
    last = whole[-1].offset
    cut = tmp_path / f"cut-{name}"
    # cut inside the last record: in its headers (10, 60), its body (200), its end (-5)
    cut.write_bytes(data[: last + keep] if keep > 0 else data[:keep])
    records, problems = split(WarcReader().read(str(cut)))
    assert [r.fields["url"] for r in records] == [r.fields["url"] for r in whole[:-1]]
    assert len(problems) == 2  # the undecodable page, then the truncation
    assert problems[-1].offset == last
    assert problems[-1].reason.startswith("corrupt or truncated WARC")
    assert problems[-1].reason.endswith("stopped reading here")


def test_warc_garbage_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    path = tmp_path / "junk.warc"
    path.write_bytes(b"this is not a WARC file\r\n\r\nat all\r\n")
    records, problems = split(WarcReader().read(str(path)))
    assert records == [] and len(problems) == 1
    assert problems[0].offset == 0 and problems[0].reason.startswith("corrupt or truncated WARC")


def test_parse_content_type() -> None:
    assert parse_content_type("Text/HTML; Charset=UTF-8") == ("text/html", "utf-8")
    assert parse_content_type(None) == ("", None)


# -- HTML folder, code tree, PDF ------------------------------------------------


def test_html_dir_sorted_relative_paths_and_bad_utf8(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "b" / "z.htm").write_text("<p>z</p>")
    (tmp_path / "a.html").write_text("<p>a</p>")
    (tmp_path / "c.html").write_bytes(b"<p>\xc3</p>")
    (tmp_path / ".hidden" / "skip.html").write_text("<p>tool state</p>")
    (tmp_path / "style.css").write_text("p {}")
    records, problems = split(HtmlDirReader().read(str(tmp_path)))
    assert [r.fields["path"] for r in records] == ["a.html", "b/z.htm"]
    assert records[0].fields == {"raw_data": "<p>a</p>", "path": "a.html", "url": None}
    assert records[0].line is None and records[0].offset is None
    (bad,) = problems
    assert bad.source_file == str(tmp_path / "c.html")
    assert bad.field == "raw_data" and "invalid UTF-8 at byte 3" in bad.reason


def test_code_tree_on_real_stdlib_package() -> None:
    json_pkg = Path(sysconfig.get_paths()["stdlib"]) / "json"
    records, problems = split(CodeTreeReader().read(str(json_pkg)))
    assert problems == []
    paths = [r.fields["path"] for r in records]
    assert "__init__.py" in paths and "decoder.py" in paths and paths == sorted(paths)
    init = next(r for r in records if r.fields["path"] == "__init__.py")
    assert init.fields["language"] == "python"
    assert init.fields["raw_data"] == (json_pkg / "__init__.py").read_text()


def test_code_tree_too_large_binary_and_languages(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.rs").write_text("fn main() {}\n")
    (tmp_path / "big.c").write_text("x" * (MAX_CODE_BYTES + 1))
    (tmp_path / "blob.js").write_bytes(b"\x00\x01\x02")
    (tmp_path / "latin.py").write_bytes(b"# \xe9\n")
    (tmp_path / "README.md").write_text("not code")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.py").write_text("cached")
    records, problems = split(CodeTreeReader().read(str(tmp_path)))
    assert [(r.fields["path"], r.fields["language"]) for r in records] == [("src/main.rs", "rust")]
    reasons = {Path(p.source_file).name: p.reason for p in problems}
    assert set(reasons) == {"big.c", "blob.js", "latin.py"}
    assert reasons["big.c"] == f"file larger than the limit ({MAX_CODE_BYTES + 1} bytes > {MAX_CODE_BYTES})"
    assert reasons["blob.js"].startswith("binary file")
    assert "invalid UTF-8 at byte 2" in reasons["latin.py"]


def _tiny_pdf(pages: list[str]) -> bytes:
    """A valid PDF with one Helvetica text line per page (no PDF writer draws text)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        page, content = 3 + 2 * i, 4 + 2 * i
        kids.append(f"{page} 0 R")
        stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content} 0 R "
                       f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(pages)} >>".encode()
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_pdf_folder_text_pages_and_unreadable_pdf(tmp_path: Path) -> None:
    (tmp_path / "a.pdf").write_bytes(_tiny_pdf(["Hello page one", "Second page"]))
    (tmp_path / "b.pdf").write_bytes(b"%PDF-1.4\nthis file was cut off")
    (tmp_path / "c.PDF").write_bytes(_tiny_pdf([""]))
    records, problems = split(PdfReader().read(str(tmp_path)))
    assert [r.fields["path"] for r in records] == ["a.pdf", "c.PDF"]
    a, c = records
    assert a.fields["pages"] == 2
    assert a.fields["raw_data"].split(PAGE_SEPARATOR) == ["Hello page one", "Second page"]
    assert (c.fields["pages"], c.fields["raw_data"]) == (1, "")  # empty text still yielded
    (bad,) = problems
    assert bad.source_file == str(tmp_path / "b.pdf") and "not a readable PDF" in bad.reason


def test_single_pdf_file(tmp_path: Path) -> None:
    path = tmp_path / "one.pdf"
    path.write_bytes(_tiny_pdf(["Only"]))
    records, problems = split(reader_for(path).read(str(path)))
    assert problems == [] and records[0].fields == {"raw_data": "Only", "path": "one.pdf", "pages": 1}


# -- registry -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, kind",
    [("a.jsonl", "jsonl"), ("a.JSONL.GZ", "jsonl"), ("a.json.gz", "jsonl"), ("a.ndjson", "jsonl"),
     ("a.parquet", "parquet"), ("a.csv", "csv"), ("a.csv.gz", "csv"), ("a.warc", "warc"),
     ("a.warc.gz", "warc"), ("a.pdf", "pdf"), ("a.html", "html_dir"), ("a.go", "code_tree")],
)
def test_reader_for_files_by_suffix(tmp_path: Path, name: str, kind: str) -> None:
    (tmp_path / name).write_bytes(b"")
    assert reader_for(tmp_path / name).kind == kind


def test_reader_for_folders_follows_the_priority_rule(tmp_path: Path) -> None:
    def folder(name: str, *files: str) -> Path:
        d = tmp_path / name
        for f in files:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_bytes(b"")
        return d

    assert reader_for(folder("docs", "_static/x.js", "sub/index.html", "m.pdf")).kind == "html_dir"
    assert reader_for(folder("pdfs", "x/manual.pdf", "build.sh")).kind == "pdf"
    assert reader_for(folder("crawl", "a.warc.gz", "b.warc")).kind == "warc"
    assert reader_for(folder("data", "part-1.jsonl.gz")).kind == "jsonl"
    assert reader_for(folder("code", "pkg/a.py", "README.md")).kind == "code_tree"
    assert FOLDER_PRIORITY[0] == "html_dir" and FOLDER_PRIORITY[-1] == "code_tree"
    with pytest.raises(SourceError, match="no readable files in folder .*known kinds are"):
        reader_for(folder("empty", "notes.txt"))


def test_reader_for_errors_name_the_path_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(SourceError, match=f"^source not found: {missing} "):
        reader_for(missing)
    unknown = tmp_path / "data.xyz"
    unknown.write_text("?")
    with pytest.raises(SourceError) as err:
        reader_for(unknown)
    message = str(err.value)
    assert str(unknown) in message and "pass the kind explicitly" in message
    assert all(k in message for k in known_kinds())
    with pytest.raises(SourceError, match="unknown source kind 'xml'"):
        reader_for(unknown, kind="xml")
    assert reader_for(unknown, kind="jsonl").kind == "jsonl"  # an explicit kind wins over the name
    with pytest.raises(SourceError, match="source not found"):
        list(JsonlReader().read(str(missing)))  # readers check too, not just the registry


def test_explicit_kind_reads_an_unusual_name(tmp_path: Path) -> None:
    path = tmp_path / "export.txt"
    path.write_text('{"a": 1}\n')
    records, problems = split(iter_sources(path, kind="jsonl"))
    assert [r.fields for r in records] == [{"a": 1}] and problems == []


def test_iter_sources_chains_paths_and_fails_before_reading(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text('{"n": 1}\n{"n": 2}\n')
    b = tmp_path / "b.csv"
    b.write_text("n\n3\n")
    records, _ = split(iter_sources([a, str(b)]))
    assert [r.fields["n"] for r in records] == [1, 2, "3"]
    assert [Path(r.source_file).name for r in records] == ["a.jsonl", "a.jsonl", "b.csv"]
    stream = iter_sources([a, tmp_path / "missing.csv"])
    with pytest.raises(SourceError, match="missing.csv"):
        next(stream)  # raised before a single record of a.jsonl came out


def test_every_reader_has_a_distinct_kind_and_docstrings() -> None:
    kinds = [r.kind for r in READERS]
    assert len(set(kinds)) == len(kinds) == 7
    assert all(type(r).__doc__ and type(r).read.__doc__ for r in READERS)
