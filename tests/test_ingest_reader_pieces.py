"""The JSONL fast path finds lines in pieces of the file; wherever the pieces end, it yields
the lines, line numbers and problems of the line-by-line reader.

Piece sizes from one byte up put piece ends inside lines, right after newlines, inside
a BOM, inside blank and over-long lines, and at the end of a last line that lacks its
newline. Each block's ``lines`` (a range where the lines follow each other) must be the
line numbers of the records it re-reads.
"""

from __future__ import annotations

import json

import pytest

from omni_iceberg.ingest.sources import jsonl
from omni_iceberg.ingest.sources.jsonl import JsonlReader
from omni_iceberg.ingest.sources.records import RecordProblem, SourceBlock


def _content() -> bytes:
    lines = [b"\xef\xbb\xbf" + json.dumps({"raw_data": "after a BOM"}).encode()]
    for i in range(1, 40):
        lines.append(json.dumps({"raw_data": f"line {i}", "n": i}).encode())
        if i % 7 == 0:
            lines.append(b"   \t")  # blank: skipped, still counted
        if i % 11 == 0:
            lines.append(b'{"raw_data": "' + b"x" * 120 + b'"}')  # over the limit below
        if i % 13 == 0:
            lines.append(json.dumps({"raw_data": f"crlf {i}"}).encode() + b"\r")
        if i % 17 == 0:
            lines.append(b"")  # an empty line
    return b"\n".join(lines) + b"\n" + json.dumps({"raw_data": "no newline at the end"}).encode()


def _flat(items):
    out = []
    for item in items:
        if isinstance(item, SourceBlock):
            records = list(item.records())
            assert [r.line for r in records] == list(item.lines)
            out += records
        else:
            out.append(item)
    return [(type(i).__name__, i.line, i.reason if isinstance(i, RecordProblem) else i.fields) for i in out]


@pytest.mark.parametrize("piece", [1, 2, 5, 17, 64, 333, 1 << 20])
def test_pieces_anywhere_give_the_lines_of_the_line_reader(tmp_path, monkeypatch, piece):
    monkeypatch.setenv("OMNI_MAX_RECORD_BYTES", "100")
    monkeypatch.setattr(jsonl, "READ_BYTES", piece)
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(_content())
    expected = _flat(JsonlReader().read(str(path)))
    got = _flat(JsonlReader().read_blocks(str(path), 6))
    assert got == expected
    assert expected[0] == ("SourceRecord", 1, {"raw_data": "after a BOM"})
    assert expected[-1] == ("SourceRecord", 54, {"raw_data": "no newline at the end"})
    assert sum(1 for kind, _, _ in expected if kind == "RecordProblem") == 3  # the over-long lines


def test_a_block_of_consecutive_lines_numbers_them_with_a_range(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl, "READ_BYTES", 64)  # the block spans many pieces
    path = tmp_path / "clean.jsonl"
    path.write_text("".join(json.dumps({"raw_data": f"r{i}"}) + "\n" for i in range(50)) + "\n  \n"
                    + "".join(json.dumps({"raw_data": f"s{i}"}) + "\n" for i in range(5)))
    blocks = list(JsonlReader().read_blocks(str(path), 100))
    assert len(blocks) == 1 and isinstance(blocks[0], SourceBlock)
    assert list(blocks[0].lines) == [*range(1, 51), *range(53, 58)]  # the blank lines 51 and 52 skipped
    consecutive = list(JsonlReader().read_blocks(str(path), 50))[0]
    assert consecutive.lines == range(1, 51)
