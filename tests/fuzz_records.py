"""A bounded fuzzer of bad records for every ingest reader, and the check of its outcome.

:func:`make_fuzz_input` writes ``n`` records for one reader kind (``jsonl``, ``csv``,
``parquet``, ``html_dir``, ``warc``) into a folder, each with a random corruption or
none, and returns what each record should become: ``land`` (with the exact text that
must be stored), ``reject``, ``either`` (landing exactly or a reject are both
correct), or ``duplicate`` (the same content as an earlier landing record).
:func:`check_outcome` compares that with what a submit reported, stored and
rejected, and returns every mismatch (an empty list means all is well).

Every record's content carries a token ``fz-00042`` so a landed row names its record;
a rejected record is found by the place its reject names (file, line, offset).

Deterministic per ``seed``. The reliability benchmark reuses both functions with
``n=10_000``::

    fuzz = make_fuzz_input("jsonl", tmp / "in", n=10_000, seed=7)
    report = omni.submit("t", fuzz.paths, batch="fuzz")
    rows = omni.read("t", columns=["RawData"]).column("RawData").to_pylist()
    assert check_outcome(fuzz, report, rows, omni.rejects("t", "fuzz").to_pylist()) == []
"""

from __future__ import annotations

import io
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("jsonl", "csv", "parquet", "html_dir", "warc")
TOKEN = re.compile(r"fz-(\d{5})")


@dataclass
class FuzzCase:
    """One generated record and what ingesting it must give."""

    index: int
    corruption: str
    expect: str  # "land" | "reject" | "either" | "duplicate"
    source_file: str = ""
    line: int | None = None
    offset: int | None = None
    raw: str | None = None  # the exact stored raw_data when it lands


@dataclass
class FuzzInput:
    kind: str
    paths: list[str]
    cases: list[FuzzCase] = field(default_factory=list)

    def expected_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.cases:
            out[c.expect] = out.get(c.expect, 0) + 1
        return out


def make_fuzz_input(kind: str, out_dir: str | Path, n: int = 300, seed: int = 0, bad_ratio: float = 0.5) -> FuzzInput:
    """Write ``n`` fuzzed records of ``kind`` under ``out_dir``; see the module docstring."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{kind}:{seed}")
    plan = _plan(rng, n, bad_ratio, _CORRUPTIONS[kind])
    return _WRITERS[kind](out, plan, rng)


def check_outcome(fuzz: FuzzInput, report: Any, rows: list[dict[str, Any]], rejects: list[dict[str, Any]]) -> list[str]:
    """Every way the submit's outcome differs from what the fuzz input says it must be."""
    problems: list[str] = []
    n = len(fuzz.cases)
    if report.read != n:
        problems.append(f"read {report.read} records, {n} were written")
    if report.written + report.rejected + report.duplicates != report.read:
        problems.append(f"counts do not add up: {report.written} written + {report.rejected} rejected + "
                        f"{report.duplicates} duplicates != {report.read} read")
    if len(rows) != report.written:
        problems.append(f"{len(rows)} rows stored, report says {report.written}")
    if len(rejects) != report.rejected:
        problems.append(f"{len(rejects)} rejects stored, report says {report.rejected}")
    landed: dict[int, list[str]] = {}
    for row in rows:
        raw = row["raw_data"]
        m = TOKEN.search(raw or "")
        if m is None:
            problems.append(f"stored a row that is no fuzz record: {raw[:60]!r}")
            continue
        landed.setdefault(int(m.group(1)), []).append(raw)
    by_place = {(c.source_file, c.line, c.offset): c for c in fuzz.cases}
    rejected: dict[int, dict[str, Any]] = {}
    for r in rejects:
        case = by_place.get((r["source_file"], r["line"], r["offset"]))
        if case is None:
            problems.append(f"reject names no fuzz record: {r['source_file']}:{r['line']}@{r['offset']}: {r['reason']}")
            continue
        if not (r["reason"] or "").strip():
            problems.append(f"record {case.index} ({case.corruption}) rejected without a reason")
        rejected[case.index] = r
    duplicates = 0
    for c in fuzz.cases:
        got = landed.get(c.index, [])
        if c.expect == "duplicate":
            duplicates += 1
            if c.index in rejected:
                problems.append(f"record {c.index} (duplicate) was rejected: {rejected[c.index]['reason']}")
            continue
        if len(got) > 1:
            problems.append(f"record {c.index} ({c.corruption}) stored {len(got)} times")
        if got and c.index in rejected:
            problems.append(f"record {c.index} ({c.corruption}) both stored and rejected")
        if c.expect == "land" and not got:
            why = rejected.get(c.index, {}).get("reason", "neither stored nor rejected")
            problems.append(f"good record {c.index} ({c.corruption}) did not land: {why}")
        elif c.expect == "reject" and c.index not in rejected:
            problems.append(f"bad record {c.index} ({c.corruption}) was not rejected"
                            + (f" but stored as {got[0][:60]!r}" if got else ""))
        elif c.expect == "either" and not got and c.index not in rejected:
            problems.append(f"record {c.index} ({c.corruption}) neither stored nor rejected")
        if got and c.raw is not None and got[0] != c.raw:
            problems.append(f"record {c.index} ({c.corruption}) stored as {got[0][:60]!r}, expected {c.raw[:60]!r}")
    if report.duplicates != duplicates:
        problems.append(f"report counts {report.duplicates} duplicates, the input has {duplicates}")
    return problems


# ---- planning ---------------------------------------------------------------------------------

def _plan(rng: random.Random, n: int, bad_ratio: float, corruptions: tuple[str, ...]) -> list[str]:
    """One corruption name per record; record 0 is always good (it fixes the column types)."""
    plan = ["good"]
    for i in range(1, n):
        if rng.random() >= bad_ratio:
            plan.append("good")
        elif i > 1 and rng.random() < 0.15:
            plan.append("duplicate")
        else:
            plan.append(rng.choice(corruptions))
    return plan


def _text(i: int, rng: random.Random) -> str:
    words = ["alpha", "béta", "γάμμα", "дельта", "中文", "emoji 🎉", "tab\there", "quote \"q\"", "comma, semi;"]
    return f"fz-{i:05d} " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))


def _duplicate_of(cases: list[FuzzCase], rng: random.Random) -> FuzzCase | None:
    good = [c for c in cases if c.expect == "land"]
    return rng.choice(good) if good else None


_CORRUPTIONS: dict[str, tuple[str, ...]] = {
    "jsonl": ("surrogate_raw", "surrogate_field", "surrogate_key", "huge_int", "negative_huge_int", "nan_inf",
              "wrong_type", "wrong_type_raw", "bool_for_long", "colliding_keys", "colliding_raw", "nested_junk",
              "deep_nesting",
              "invalid_utf8", "empty_content", "blank_content", "nul_escaped", "nul_raw_byte", "broken_json",
              "not_object", "missing_raw", "nested_raw"),
    "csv": ("invalid_utf8", "surrogate_bytes", "empty_content", "blank_content", "nul_byte", "wrong_columns",
            "multiline", "huge_int_text", "quoted_commas"),
    "parquet": ("invalid_utf8", "surrogate_bytes", "empty_content", "blank_content", "nul_byte", "uint64_huge",
                "nan_inf", "nested_junk", "null_raw", "wrong_type_file"),
    "html_dir": ("invalid_utf8", "surrogate_bytes", "empty_content", "blank_content", "nul_byte", "bom",
                 "latin1_bytes"),
    "warc": ("invalid_utf8", "surrogate_bytes", "empty_content", "blank_content", "nul_byte", "latin1_declared",
             "unknown_charset", "non_html_between"),
}


# ---- JSONL ------------------------------------------------------------------------------------

def _write_jsonl(out: Path, plan: list[str], rng: random.Random) -> FuzzInput:
    files = [out / f"part-{k}.jsonl" for k in range(3)]
    lines: dict[Path, list[bytes]] = {f: [] for f in files}
    fuzz = FuzzInput("jsonl", [str(f) for f in files])
    for i, what in enumerate(plan):
        f = files[i * len(files) // len(plan)]
        case = FuzzCase(i, what, "reject", str(f), line=len(lines[f]) + 1)
        text = _text(i, rng)
        rec: dict[str, Any] = {"raw_data": text, "n": rng.randint(-1000, 1000), "score": rng.random()}
        line: bytes | None = None
        if what == "good":
            case.expect, case.raw = "land", text
        elif what == "duplicate":
            orig = _duplicate_of(fuzz.cases, rng)
            rec = {"raw_data": orig.raw} if orig else rec
            case.expect, case.raw = ("duplicate", orig.raw) if orig else ("land", text)
        elif what == "surrogate_raw":
            line = b'{"raw_data": "' + text.encode() + b' \\ud800 lone"}'
        elif what == "surrogate_field":
            line = b'{"raw_data": "' + text.encode() + b'", "note": "x \\udfff"}'
        elif what == "surrogate_key":  # the reject's own field name is then no valid text either
            line = b'{"raw_data": "' + text.encode() + b'", "k\\ud800": "v \\udfff"}'
        elif what == "huge_int":
            rec["n"] = 2**64 + rng.randint(0, 10**6)
        elif what == "negative_huge_int":
            rec["n"] = -(2**63) - 1 - rng.randint(0, 10**6)
        elif what == "nan_inf":
            rec["score"] = rng.choice([math.nan, math.inf, -math.inf])  # json writes NaN/Infinity, Python reads them
            case.expect, case.raw = "land", text
        elif what == "wrong_type":
            rec["n"] = rng.choice(["seven", 1.5, [1, 2]])
        elif what == "wrong_type_raw":
            rec["raw_data"] = rng.choice([123, 4.5, True])
        elif what == "bool_for_long":
            rec["n"] = True
        elif what == "colliding_keys":
            rec["x-y"], rec["x_y"] = 1, 2
        elif what == "colliding_raw":
            rec["raw-data"] = "other " + text
        elif what == "nested_junk":
            rec["meta"] = {"z": [1, {"k": None}, "\u0000"], "a": {"deep": [[[]]]}, "ü": "x"}
            case.expect, case.raw = "land", text
        elif what == "deep_nesting":
            line = b'{"raw_data": "' + text.encode() + b'", "meta": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        elif what == "invalid_utf8":
            line = b'{"raw_data": "' + text.encode() + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]) + b'"}'
        elif what == "empty_content":
            rec["raw_data"] = ""
        elif what == "blank_content":
            rec["raw_data"] = " \t\n "
        elif what == "nul_escaped":
            rec["raw_data"] = text + "\u0000 after nul"
            case.expect, case.raw = "land", text + "\u0000 after nul"
        elif what == "nul_raw_byte":  # a raw control byte inside a JSON string: strict JSON says no
            line = b'{"raw_data": "' + text.encode() + b'\x00"}'
            case.expect, case.raw = "either", text + "\x00"
        elif what == "broken_json":
            line = json.dumps(rec).encode()[: rng.randint(1, 15)]
        elif what == "not_object":
            line = json.dumps([text]).encode()
        elif what == "missing_raw":
            rec = {"body": text}
        elif what == "nested_raw":
            rec["raw_data"] = [text, {"k": 1}]
            case.expect = "land"
            case.raw = json.dumps(rec["raw_data"], ensure_ascii=False, sort_keys=True)
        if line is None:
            line = json.dumps(rec, ensure_ascii=False).encode()
        lines[f].append(line)
        fuzz.cases.append(case)
    for f, content in lines.items():
        f.write_bytes(b"\n".join(content) + b"\n")
    return fuzz


# ---- CSV --------------------------------------------------------------------------------------

def _csv_field(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _write_csv(out: Path, plan: list[str], rng: random.Random) -> FuzzInput:
    f = out / "data.csv"
    buf = io.BytesIO()
    buf.write(b"raw_data,n,note\n")
    line = 2
    fuzz = FuzzInput("csv", [str(f)])
    for i, what in enumerate(plan):
        case = FuzzCase(i, what, "reject", str(f), line=line)
        text = _text(i, rng)
        raw = text
        row: bytes | None = None
        n, note = str(rng.randint(0, 99)), "note"
        if what == "good":
            case.expect = "land"
        elif what == "duplicate":
            orig = _duplicate_of(fuzz.cases, rng)
            raw = orig.raw if orig else text
            case.expect = "duplicate" if orig else "land"
        elif what in ("invalid_utf8", "surrogate_bytes"):
            bad = b"\xed\xa0\x80" if what == "surrogate_bytes" else rng.choice([b"\xff", b"\xc3(", b"\x80"])
            row = _csv_field(text).encode()[:-1] + bad + b'",' + n.encode() + b"," + note.encode()
        elif what == "empty_content":
            raw = ""
        elif what == "blank_content":
            raw = "   "
        elif what == "nul_byte":
            raw = text + "\x00nul"
            case.expect = "land"
        elif what == "wrong_columns":
            row = _csv_field(text).encode() + b"," + n.encode()
        elif what == "multiline":
            raw = text + "\nsecond line\r\nthird"
            case.expect = "land"
        elif what == "huge_int_text":
            n = str(2**70)  # CSV values stay text: nothing overflows
            case.expect = "land"
        elif what == "quoted_commas":
            raw = text + ', "quoted", more'
            case.expect = "land"
        if row is None:
            row = ",".join([_csv_field(raw), n, note]).encode()
        if case.expect in ("land", "duplicate"):
            case.raw = raw
        buf.write(row + b"\n")
        line += row.count(b"\n") + 1  # a quoted value may span lines; the next record starts after them
        fuzz.cases.append(case)
    f.write_bytes(buf.getvalue())
    return fuzz


# ---- Parquet ----------------------------------------------------------------------------------

def _write_parquet(out: Path, plan: list[str], rng: random.Random) -> FuzzInput:
    import pyarrow as pa
    import pyarrow.parquet as pq

    fuzz = FuzzInput("parquet", [])
    chunks = [plan[k : k + 64] for k in range(0, len(plan), 64)]
    i = 0
    for k, chunk in enumerate(chunks):
        f = out / f"part-{k:03d}.parquet"
        # one file at most (the last) declares n as text: every row of such a file is a reject
        wrong_type_file = 0 < k == len(chunks) - 1 and "wrong_type_file" in chunk
        raws: list[bytes | None] = []
        ns: list[Any] = []
        scores: list[float] = []
        metas: list[Any] = []
        for row, what in enumerate(chunk):
            case = FuzzCase(i, what, "reject", str(f), offset=row)
            text = _text(i, rng)
            raw: bytes | None = text.encode()
            n: Any = rng.randint(0, 1000)
            score = rng.random()
            meta: Any = None
            if what == "good":
                case.expect = "land"
            elif what == "duplicate":
                orig = _duplicate_of(fuzz.cases, rng)
                raw = orig.raw.encode() if orig else raw
                case.expect = "duplicate" if orig else "land"
            elif what == "invalid_utf8":
                raw += rng.choice([b"\xff", b"\xc3", b"\x80abc"])
            elif what == "surrogate_bytes":
                raw += b"\xed\xa0\x80"
            elif what == "empty_content":
                raw = b""
            elif what == "blank_content":
                raw = b"  \n "
            elif what == "nul_byte":
                raw += b"\x00 after"
                case.expect = "land"
            elif what == "uint64_huge":
                n = 2**63 + rng.randint(0, 10**6)
            elif what == "nan_inf":
                score = rng.choice([math.nan, math.inf, -math.inf])
                case.expect = "land"
            elif what == "nested_junk":
                meta = [{"k": "a\x00b", "v": [1, 2]}]
                case.expect = "land"
            elif what == "null_raw":
                raw = None
            elif what == "wrong_type_file":
                case.expect = "land"  # a good row, unless its file is the one with the wrong type (below)
            if wrong_type_file and case.expect in ("land", "duplicate"):
                # this whole file says n is text, against the long the first file fixed:
                # the type check comes before dedup, so even a duplicate is a reject here
                case.expect = "reject"
            if case.expect in ("land", "duplicate"):
                case.raw = raw.decode()
            raws.append(raw)
            ns.append(n)
            scores.append(score)
            metas.append(meta)
            fuzz.cases.append(case)
            i += 1
        meta_type = pa.list_(pa.struct([("k", pa.string()), ("v", pa.list_(pa.int64()))]))
        n_array = (pa.array([str(x) for x in ns], pa.string()) if wrong_type_file
                   else pa.array(ns, pa.uint64()))
        pq.write_table(pa.table({
            "raw_data": pa.array(raws, pa.binary()),
            "n": n_array,
            "score": pa.array(scores, pa.float64()),
            "meta": pa.array(metas, meta_type),
        }), f, row_group_size=rng.choice([7, 32, 64]))
        fuzz.paths.append(str(f))
    return fuzz


# ---- HTML folder ------------------------------------------------------------------------------

def _html_body(i: int, what: str, rng: random.Random, orig: FuzzCase | None) -> tuple[bytes, str, str | None]:
    """(file bytes, expect, stored text)."""
    text = f"<html><body><p>{_text(i, rng)}</p></body></html>"
    body = text.encode()
    if what == "good":
        return body, "land", text
    if what == "duplicate":
        return (orig.raw.encode(), "duplicate", orig.raw) if orig else (body, "land", text)
    if what == "invalid_utf8":
        return body[:-7] + rng.choice([b"\xff", b"\xc3", b"\x80"]) + body[-7:], "reject", None
    if what == "surrogate_bytes":
        return body + b"\xed\xa0\x80", "reject", None
    if what == "empty_content":
        return b"", "reject", None
    if what == "blank_content":
        return b" \n\t ", "reject", None
    if what == "nul_byte":
        return body + b"\x00", "land", text + "\x00"
    if what == "bom":
        return b"\xef\xbb\xbf" + body, "land", text
    if what == "latin1_bytes":  # no charset to go by: not UTF-8 is not UTF-8
        return text.replace("</p>", "caf\xe9</p>").encode("latin-1", errors="replace"), "either", None
    raise AssertionError(what)


def _write_html(out: Path, plan: list[str], rng: random.Random) -> FuzzInput:
    folder = out / "pages"
    folder.mkdir(parents=True, exist_ok=True)
    fuzz = FuzzInput("html_dir", [str(folder)])
    for i, what in enumerate(plan):
        f = folder / f"case-{i:05d}.html"
        orig = _duplicate_of(fuzz.cases, rng) if what == "duplicate" else None
        body, expect, raw = _html_body(i, what, rng, orig)
        if expect == "either" and TOKEN.search(body.decode("latin-1")):
            try:
                raw = body.decode("utf-8")
                expect = "land"
            except UnicodeDecodeError:
                expect = "reject"
        f.write_bytes(body)
        fuzz.cases.append(FuzzCase(i, what, expect, str(f), raw=raw))
    return fuzz


# ---- WARC -------------------------------------------------------------------------------------

def _write_warc(out: Path, plan: list[str], rng: random.Random) -> FuzzInput:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    path = out / "crawl.warc.gz"
    fuzz = FuzzInput("warc", [str(path)])
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)

        def record(url: str, body: bytes, content_type: str, rec_type: str = "response") -> None:
            headers = StatusAndHeaders("200 OK", [("Content-Type", content_type),
                                                  ("Content-Length", str(len(body)))], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(url, rec_type, payload=io.BytesIO(body),
                                                          http_headers=headers))

        for i, what in enumerate(plan):
            text = f"<html><body>{_text(i, rng)}</body></html>"
            body, ctype, expect, raw = text.encode(), "text/html; charset=utf-8", "reject", None
            if what in ("good", "non_html_between"):
                expect, raw = "land", text
                if what == "non_html_between":  # not a document: passed over, not counted
                    record(f"https://fuzz.example/{i}.png", b"\x89PNG\x00\xff", "image/png")
            elif what == "duplicate":
                orig = _duplicate_of(fuzz.cases, rng)
                body, expect, raw = (orig.raw.encode(), "duplicate", orig.raw) if orig else (body, "land", text)
            elif what == "invalid_utf8":
                body += rng.choice([b"\xff", b"\xc3", b"\x80"])
            elif what == "surrogate_bytes":
                body += b"\xed\xa0\x80"
            elif what == "empty_content":
                body = b""
            elif what == "blank_content":
                body = b"   "
            elif what == "nul_byte":
                body += b"\x00"
                expect, raw = "land", text + "\x00"
            elif what == "latin1_declared":
                text = f"<html><body>fz-{i:05d} caf\xe9 na\xefve</body></html>"
                body, ctype, expect, raw = text.encode("latin-1"), "text/html; charset=ISO-8859-1", "land", text
            elif what == "unknown_charset":
                ctype, expect, raw = "text/html; charset=x-no-such-charset", "land", text
            offset = f.tell()
            record(f"https://fuzz.example/{i}", body, ctype)
            fuzz.cases.append(FuzzCase(i, what, expect, str(path), offset=offset, raw=raw))
    return fuzz


_WRITERS = {"jsonl": _write_jsonl, "csv": _write_csv, "parquet": _write_parquet, "html_dir": _write_html,
            "warc": _write_warc}
