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
