"""The paper's example with the real built-ins: math_recall on batch cc pulls in html_parser
(selectolax) and detected_lang (fastText lid.176) - only what is missing - on real pages."""

import pytest

from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from omni_iceberg.features.library import BUILTINS, math_recall

CHEAP = ["punctuation_ratio", "digit_ratio", "uppercase_ratio", "avg_word_length", "code_ratio",
         "repetition_ratio", "stopword_ratio", "safety_keyword_hits", "domain_tag"]


@pytest.fixture
def omni(tmp_path):
    pages = sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:30]
    o = Omni(home=tmp_path / "home")
    o.create_table("web")
    o.submit("web", [str(p) for p in pages[:20]], batch="cc")
    o.submit("web", [str(p) for p in pages[20:]], batch="other")
    cheap = [b for b in BUILTINS if b.definition.name in {"html_parser", "detected_lang", "math_recall", *CHEAP}]
    o.register_features("web", cheap)
    return o


def test_math_recall_on_cc_runs_only_the_missing_ancestors(omni):
    plan = omni.plan("web", ["math_recall"], ["cc"], has_gpu=False)
    assert [s.features for s in plan.stages] == [["html_parser"], ["detected_lang"], ["math_recall"]]
    report = omni.backfill("web", ["math_recall"], ["cc"])
    assert report.errors == 0
    data = omni.read("web", columns=["_ai_append_name_", "ProcessedData", "detected_lang", "math_recall"],
                     batches=["cc"]).to_pylist()
    assert {r["detected_lang"] for r in data} == {"en"}
    assert all(r["ProcessedData"]["parsed_text"] and "<div" not in r["ProcessedData"]["parsed_text"] for r in data)
    # the stored values are what the built-in computes when called directly on the stored inputs
    texts = [r["ProcessedData"]["parsed_text"] for r in data]
    direct = math_recall(texts, [r["detected_lang"] for r in data]).to_pylist()
    assert [r["math_recall"] for r in data] == direct and None not in direct
    assert any(v > 0 for v in direct)  # some of these pages do talk about math
    # the other batch was not touched
    assert omni.read("web", columns=["detected_lang"], batches=["other"]).column(0).null_count == 10
    plan = omni.plan("web", ["math_recall"], has_gpu=False)
    assert plan.features["html_parser"].batches == ["other"] and plan.features["html_parser"].present == ["cc"]


def test_cheap_features_fuse_into_one_stage_over_parsed_text(omni):
    plan = omni.plan("web", CHEAP, has_gpu=False)
    assert [len(s.features) for s in plan.stages] == [1, len(CHEAP)]
    assert plan.stages[1].inputs == ["ProcessedData.parsed_text"]
    report = omni.backfill("web", CHEAP)
    assert report.errors == 0 and report.rows == 30 * (1 + len(CHEAP))
    rows = omni.read("web", columns=["ProcessedData.parsed_text", *CHEAP]).to_pylist()
    texts = [r["ProcessedData.parsed_text"] for r in rows]
    for name in CHEAP:  # each fused feature equals the built-in called directly on the same texts
        fn = next(b for b in BUILTINS if b.definition.name == name)
        assert [r[name] for r in rows] == fn(texts).to_pylist(), name


JAVA = """package demo;

public interface List<E> extends SequencedCollection<E> {
    <T> T[] toArray(T[] a);

\tboolean add(E e);  // a tab, kept
}
"""


def test_parsed_text_follows_each_records_content_type(tmp_path):
    """Issue #36: html_parser parsed everything as HTML - Java lost its newlines and generics,
    JSONL text changed. Only HTML is parsed now; other text reaches parsed_text unchanged, and
    rows without a content type (stored before readers set one) are sniffed."""
    import json

    o = Omni(home=tmp_path / "home")
    o.create_table("mixed")
    o.register_builtins("mixed", ["html_parser"])  # before any batch: it declares RawData.content_type
    code = tmp_path / "code"
    code.mkdir()
    (code / "List.java").write_text(JAVA)
    docs = tmp_path / "docs.jsonl"
    forum = "a <b>bold</b> claim: x<y and y>z\n  indented\n"
    docs.write_text(json.dumps({"text": forum}) + "\n")
    legacy = tmp_path / "legacy.jsonl"
    old_page = "<html><body><p>Old <b>page</b></p><script>x()</script></body></html>"
    old_code = "Map<K, V> m = new HashMap<>();\nList<E> l;"
    legacy.write_text("".join(json.dumps({"raw_data": t, "content_type": None}) + "\n" for t in (old_page, old_code)))
    (tmp_path / "page.html").write_text("<html><body><p>Hello <b>web</b></p><nav>menu</nav></body></html>")
    o.submit("mixed", [str(code)], batch="code")
    o.submit("mixed", [str(docs)], batch="docs", field_map={"text": "raw_data"})
    o.submit("mixed", [str(legacy)], batch="legacy")
    o.submit("mixed", [str(tmp_path / "page.html")], batch="html")
    report = o.backfill("mixed", ["html_parser"], progress=False)
    assert report.status == "succeeded" and report.rows == 5
    rows = o.read("mixed", columns=["_ai_append_name_", "RawData.raw_data", "RawData.content_type",
                                    "ProcessedData.parsed_text"]).to_pylist()
    got = {(r["_ai_append_name_"], r["RawData.raw_data"]): (r["RawData.content_type"], r["ProcessedData.parsed_text"])
           for r in rows}
    assert got == {
        ("code", JAVA): ("text/x-java", JAVA),  # the exact file, generics, tab and blank line included
        ("docs", forum): ("text/plain", forum),
        ("legacy", old_page): (None, "Old page"),  # no content type: it looks like HTML
        ("legacy", old_code): (None, old_code),  # generics are not HTML tags
        ("html", "<html><body><p>Hello <b>web</b></p><nav>menu</nav></body></html>"): ("text/html", "Hello web"),
    }
