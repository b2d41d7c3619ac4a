"""The JSONL fast path (Arrow-parsed blocks) accepts, rejects and stores exactly what the
line-by-line path does.

One input mixes clean runs with every kind of line the fast path must hand back to
the line-by-line path (floats, nested values, huge integers, date-like text, bad
JSON, invalid UTF-8, lone surrogates, two objects on a line, colliding fields, type
clashes) and rows it must judge itself (missing, null, blank and Unicode-space raw
content, duplicates). The same file is submitted with blocks on (small, so clean
and dirty blocks alternate) and off; reports, stored rows and rejects must be equal.
"""

from __future__ import annotations

import json
import random

import pytest

from catalog_ext.contract import ID_COLUMN
from omni_iceberg.api import Omni
from omni_iceberg.ingest import pipeline


def _line(rnd: random.Random, i: int, earlier: list[bytes]) -> bytes:
    good = {"raw_data": f"document {i} " + " ".join(rnd.choice("abcdefg") for _ in range(5)),
            "url": f"https://example.org/{i}", "n": i}
    kind = rnd.random()
    if kind < 0.6 or not earlier:
        return json.dumps(good).encode()
    pick = rnd.randrange(17)
    return [
        lambda: rnd.choice(earlier),  # a duplicate of an earlier line
        lambda: json.dumps({**good, "raw_data": "   "}).encode(),
        lambda: json.dumps({**good, "raw_data": "\u3000\u2003"}).encode(),  # Unicode spaces only
        lambda: json.dumps({"url": good["url"]}).encode(),  # no raw content
        lambda: json.dumps({**good, "raw_data": None}).encode(),
        lambda: json.dumps({**good, "score": 1.5}).encode(),  # a double: line by line
        lambda: json.dumps({**good, "meta": {"a": [1, 2]}}).encode(),  # nested: JSON text
        lambda: b'{"raw_data": "broken',
        lambda: b'{"raw_data": "bad \xff byte"}',
        lambda: b'{"raw_data": "lone \\ud800 surrogate"}',
        lambda: json.dumps(good).encode() + json.dumps({**good, "n": -i}).encode(),  # two objects
        lambda: json.dumps({**good, "x-y": "a", "x_y": "b"}).encode(),  # both land in RawData.x_y
        lambda: json.dumps({**good, "big": 2 ** 70}).encode(),
        lambda: json.dumps({**good, "flag": bool(i % 2)}).encode(),
        lambda: json.dumps({**good, "day": "2020-01-0" + str(1 + i % 9)}).encode(),  # Arrow: a timestamp
        lambda: json.dumps({**good, "n": f"text {i}"}).encode(),  # n is a long column by now
        lambda: json.dumps(good).encode() + b"\r",  # CRLF
    ][pick]()


def _input(path, lines: int, seed: int) -> None:
    rnd = random.Random(seed)
    out: list[bytes] = [b"\xef\xbb\xbf" + json.dumps({"raw_data": "first, after a BOM", "n": 0}).encode()]
    for i in range(1, lines):
        out.append(_line(rnd, i, out))
        if rnd.random() < 0.03:
            out.append(b"   ")  # blank lines are skipped, but still count in line numbers
        if i % 60 == 0:  # long clean runs: whole blocks take the fast path
            out += [json.dumps({"raw_data": f"clean {i} {j}", "url": f"u{i}", "n": j, "flag": j % 3 == 0}).encode()
                    for j in range(40)]
    path.write_bytes(b"\n".join(out) + b"\n")


def _outcome(omni: Omni, name: str, report) -> dict:
    rows = sorted(omni.read(name, columns=[ID_COLUMN, "RawData"]).to_pylist(), key=lambda r: r[ID_COLUMN])
    rejects = omni.catalog.load_table("omni_sys.rejects").scan().to_arrow().to_pylist()
    mine = sorted((r["line"], r["field"] or "", r["reason"]) for r in rejects if r["logical_table"].endswith(name))
    return {"read": report.read, "written": report.written, "duplicates": report.duplicates,
            "rejected": report.rejected, "new_fields": sorted(report.new_fields), "rows": rows, "rejects": mine,
            "warnings": report.warnings}


@pytest.mark.parametrize("seed", [1, 2])
def test_blocks_and_line_by_line_ingest_the_same(omni_home, tmp_path, monkeypatch, seed):
    src = tmp_path / "mixed.jsonl"
    _input(src, 600, seed)
    omni = Omni(config=omni_home)
    taken = {"blocks": 0, "rejected": 0, "duplicates": 0}
    real = pipeline._take_block

    def counting(block, mapped, field_map, dedup, staged, chunk, report, *rest):
        before = report.rejected, report.duplicates
        taken["blocks"] += 1
        real(block, mapped, field_map, dedup, staged, chunk, report, *rest)
        taken["rejected"] += report.rejected - before[0]
        taken["duplicates"] += report.duplicates - before[1]

    monkeypatch.setattr(pipeline, "_take_block", counting)
    outcomes = {}
    for name, block_rows in (("fast", 16), ("slow", 0)):
        monkeypatch.setattr(pipeline, "BLOCK_ROWS", block_rows)
        omni.create_table(name)
        report = omni.submit(name, [str(src)], batch="a", progress=False)
        outcomes[name] = _outcome(omni, name, report)
    # the fast path really ran, and judged raw content and duplicates itself
    assert taken["blocks"] > 5 and taken["rejected"] > 0 and taken["duplicates"] > 0
    fast, slow = outcomes["fast"], outcomes["slow"]
    assert fast["rejects"] == slow["rejects"] and slow["rejected"] > 20
    assert {k: v for k, v in fast.items() if k != "rows"} == {k: v for k, v in slow.items() if k != "rows"}
    assert fast["rows"] == slow["rows"] and slow["duplicates"] > 0


def test_a_new_column_of_a_block_joins_the_table_with_its_type(omni_home, tmp_path):
    src = tmp_path / "typed.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"doc {i}", "n": i, "ok": i % 2 == 0}) + "\n" for i in range(50)))
    omni = Omni(config=omni_home)
    omni.create_table("web")
    report = omni.submit("web", [str(src)], batch="a", progress=False)
    assert sorted(report.new_fields) == ["content_type", "n", "ok"]  # content_type: the reader's text/plain
    types = {c.path: c.type for c in omni.state("web").columns}
    assert types["RawData.n"] == "long" and types["RawData.ok"] == "boolean"
    got = omni.read("web", columns=["RawData.n", "RawData.ok"]).to_pylist()
    assert sorted(r["RawData.n"] for r in got) == list(range(50))


def test_ids_computed_while_reading_are_the_ids_of_the_kept_rows(omni_home, tmp_path, monkeypatch):
    """A mapped raw field read as blocks: its ids are computed in the reading thread for every
    row (null and blank ones too), and the rows kept get the md5 of their own text."""
    import hashlib

    src = tmp_path / "mapped.jsonl"
    lines = []
    for i in range(120):
        text = None if i % 9 == 0 else "  " if i % 10 == 0 else f"text {i % 50}"  # nulls, blanks, repeats
        lines.append(json.dumps({"body": text, "n": i}))
    src.write_text("\n".join(lines) + "\n")
    ahead = []
    real = pipeline._ids_ahead

    def spy(block, field_map):
        out = real(block, field_map)
        ahead.append(None if out is None else len(out))
        return out

    monkeypatch.setattr(pipeline, "_ids_ahead", spy)
    monkeypatch.setattr(pipeline, "BLOCK_ROWS", 16)
    omni = Omni(config=omni_home)
    omni.create_table("m")
    r = omni.submit("m", [str(src)], batch="a", field_map={"body": "raw_data"}, progress=False)
    assert ahead and all(n is not None for n in ahead) and sum(ahead) == 120
    nulls, blanks = [i for i in range(120) if i % 9 == 0], [i for i in range(120) if i % 10 == 0 and i % 9]
    texts = {f"text {i % 50}" for i in range(120) if i % 9 and i % 10}
    assert (r.read, r.rejected, r.written) == (120, len(nulls) + len(blanks), len(texts))
    rows = omni.read("m", columns=[ID_COLUMN, "RawData"]).to_pylist()
    assert sorted((row[ID_COLUMN], row["RawData"]["raw_data"]) for row in rows) == sorted(
        (hashlib.md5(t.encode()).hexdigest(), t) for t in texts)
    rejects = omni.rejects("m", "a").sort_by("line").to_pylist()
    assert [x["line"] for x in rejects] == sorted(i + 1 for i in nulls + blanks)
