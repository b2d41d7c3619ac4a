"""Language built-ins: language id, and vocabulary features that depend on the language.

``detected_lang`` runs fastText's lid.176 model. ``math_recall`` reads it: the paper's
example chain ``html_parser -> detected_lang -> math_recall`` (math vocabulary is
English here, so other languages get no value rather than a misleading 0).
``stopword_ratio`` and ``domain_tag`` are cheap word-list features that share the
batch's word counts with the other vocabulary features.

    >>> lang = DetectedLang(); lang.setup()                      # doctest: +SKIP
    >>> lang(["Der Hund schläft im Garten."])["detected_lang"]   # doctest: +SKIP
    ['de']
"""

from __future__ import annotations

import re

import pyarrow as pa

from omni_iceberg.features.library import models
from omni_iceberg.features.library.text import (
    PARSED_TEXT,
    builtin,
    doubles,
    ratio,
    shared_for,
    texts_of,
    word_counts,
)

# --------------------------------------------------------------------------- detected_lang

_LABEL_PREFIX = "__label__"
_NEWLINES = re.compile(r"[\r\n\u2028\u2029\x0b\x0c]+")
#: fastText's cost grows with length and its answer settles long before this; the cap
#: only bounds the time a pathological multi-megabyte "page" can take.
MAX_CHARS = 100_000


@builtin({"detected_lang": "string", "lang_confidence": "double"}, name="detected_lang", inputs=[PARSED_TEXT],
         engine="cpu", batch_size=2048, model_size_mb=1,
         depends=[models.LID_MODEL, _LABEL_PREFIX, _NEWLINES, MAX_CHARS])
class DetectedLang:
    """ISO 639 code of the text's language (fastText lid.176) and the model's probability."""

    def __init__(self) -> None:
        self.model = None

    def setup(self) -> None:
        self.model = models.fasttext_lid()

    def __call__(self, parsed_text):
        if self.model is None:  # called directly, without the engine's setup()
            self.setup()
        langs: list[str | None] = []
        confidences: list[float | None] = []
        for text in texts_of(parsed_text):
            line = _NEWLINES.sub(" ", text[:MAX_CHARS]).strip() if text else ""
            if not line:
                langs.append(None)
                confidences.append(None)
                continue
            labels, probs = self.model.predict(line, k=1)  # fastText reads one line per call
            langs.append(labels[0][len(_LABEL_PREFIX):])
            confidences.append(min(1.0, float(probs[0])))  # softmax can overshoot 1 by an ulp
        return {"detected_lang": pa.array(langs, type=pa.string()), "lang_confidence": doubles(confidences)}


# --------------------------------------------------------------------------- stopword_ratio

#: English function words (the classic list NLTK and scikit-learn share, trimmed to
#: words, no contractions). Lower case; matched against lower-cased ``\w+`` tokens.
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she should
so some such than that the their theirs them themselves then there these they this those through to
too under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves
""".split())


@builtin({"stopword_ratio": "double"}, name="stopword_ratio", inputs=[PARSED_TEXT], form="batch", batch_size=1024,
         depends=[STOPWORDS, word_counts, shared_for, ratio])
def stopword_ratio(parsed_text, shared=None):
    """Share of words that are English stop words, in [0, 1]; natural English prose is ~0.4-0.5."""
    texts = texts_of(parsed_text)
    counts = word_counts(shared_for(shared, texts))
    out: list[float | None] = []
    for text, c in zip(texts, counts):
        hits = sum(n for w, n in c.items() if w in STOPWORDS)
        out.append(None if text is None else ratio(hits, sum(c.values())))
    return doubles(out)


# --------------------------------------------------------------------------- math_recall

#: Words that are mathematical in nearly every use (not "function", "set", "group",
#: "field": those are everyday words in programming and prose).
MATH_WORDS = frozenset("""
theorem theorems lemma lemmas proof proofs corollary proposition axiom axioms conjecture qed
equation equations inequality inequalities integral integrals integrate integration derivative
derivatives differentiate differential differentiable gradient divergence jacobian hessian
matrix matrices determinant eigenvalue eigenvalues eigenvector eigenvectors vector vectors scalar
orthogonal orthonormal polynomial polynomials quadratic cubic coefficient coefficients
algebra algebraic geometry geometric topology topological calculus arithmetic combinatorics
probability probabilities variance expectation stochastic convergence converges convergent
divergent asymptotic logarithm logarithmic exponential exponent sine cosine tangent trigonometric
prime primes integer integers rational irrational modulo modular divisible divisor denominator
numerator fraction fractions quotient factorial permutation permutations binomial subset subsets
manifold homomorphism isomorphism isomorphic bijection injective surjective infinitesimal
parabola hyperbola hypotenuse perpendicular radius diameter circumference triangle polygon
iff lim infty
""".split())

#: Mathematical symbols (operators, relations, sets, Greek letters commonly used as variables).
MATH_SYMBOLS = re.compile(r"[∑∏∫∮∂∇√∞≈≡≠≤≥≪≫±∓×÷·∘∈∉∋⊂⊃⊆⊇∪∩∅∀∃∄¬∧∨→←↔⇒⇐⇔↦ℕℤℚℝℂαβγδεζηθικλμνξπρστυφχψωΓΔΘΛΞΠΣΦΨΩ]")
#: LaTeX: common math commands and math-mode delimiters.
LATEX = re.compile(
    r"\\(?:frac|dfrac|sum|prod|int|oint|sqrt|partial|nabla|infty|cdot|times|leq?|geq?|neq|approx|equiv"
    r"|alpha|beta|gamma|delta|epsilon|varepsilon|theta|lambda|mu|pi|sigma|phi|omega|mathbb|mathbf|mathcal"
    r"|mathrm|lim|log|ln|sin|cos|tan|exp|binom|matrix|pmatrix|begin\{(?:equation|align|gather)\*?\})(?![a-zA-Z])"
    r"|\$\$|\\\(|\\\[")


@builtin({"math_recall": "double"}, name="math_recall", inputs=[PARSED_TEXT, "detected_lang"], form="batch",
         batch_size=1024,
         depends=[MATH_WORDS, MATH_SYMBOLS, LATEX, word_counts, shared_for, ratio])
def math_recall(parsed_text, detected_lang, shared=None):
    """Math density of English text: (math words + symbols + LaTeX commands) per word, in [0, 1]."""
    texts = texts_of(parsed_text)
    langs = texts_of(detected_lang)
    batch = shared_for(shared, texts)
    counts = word_counts(batch)
    out: list[float | None] = []
    for text, lang, c in zip(texts, langs, counts):
        if text is None or lang != "en":
            out.append(None)
            continue
        words = sum(c.values())
        hits = sum(n for w, n in c.items() if w in MATH_WORDS)
        hits += len(MATH_SYMBOLS.findall(text)) + len(LATEX.findall(text))
        value = ratio(hits, words)
        out.append(None if value is None else min(1.0, value))
    return doubles(out)


# --------------------------------------------------------------------------- domain_tag

#: Keyword families; a text's tag is the family with the most word hits when that family
#: has at least ``MIN_HITS`` hits and makes up at least ``MIN_SHARE`` of all words,
#: else "other". Ties go to the family listed first. Families are disjoint.
DOMAINS: dict[str, frozenset[str]] = {
    "programming": frozenset("""
        python java javascript typescript rust golang compiler interpreter runtime debugger debug
        syntax variable variables api apis module modules import imports library libraries package
        packages function functions method methods class classes object objects instance attribute
        attributes argument arguments parameter parameters return returns exception exceptions thread
        threads socket sockets json http https url database sql query queries string strings array
        arrays list lists dict dictionary tuple iterator generator bytes buffer callback async await
        source code coding programmer programming script scripts git github repository stdin stdout
        subprocess unicode utf encoding decorator lambda boolean bool int str none null pointer
        """.split()),
    "math": frozenset("""
        theorem lemma proof corollary axiom equation equations integral derivative matrix matrices
        eigenvalue vector vectors polynomial algebra geometry topology calculus probability variance
        convergence logarithm exponential sine cosine prime primes integers rational irrational modulo
        denominator numerator fraction quotient factorial permutation binomial subset manifold
        homomorphism isomorphism bijection parabola hypotenuse perpendicular radius triangle
        """.split()),
    "legal": frozenset("""
        court courts plaintiff plaintiffs defendant defendants statute statutes statutory contract
        contracts liability liable jurisdiction attorney attorneys counsel clause clauses pursuant hereby
        herein thereof whereas tort appeal appellate judge judges judgment verdict
        litigation lawsuit legal lawful unlawful law laws regulation regulations compliance
        indemnify indemnification warranty warranties damages breach arbitration licensee licensor
        """.split()),
    "medical": frozenset("""
        patient patients clinical clinic diagnosis diagnosed symptom symptoms treatment treatments
        disease diseases dose doses dosage therapy therapeutic physician physicians hospital surgery
        surgical infection infections chronic acute medication medications drug drugs vaccine
        vaccines cancer tumor diabetes cardiovascular blood pharmaceutical prescription
        """.split()),
    "finance": frozenset("""
        revenue revenues profit profits stock stocks shares shareholder shareholders investor investors
        investment investments dividend dividends equity bank banks banking loan loans mortgage credit
        debt interest inflation portfolio fund funds asset assets liabilities earnings fiscal
        quarterly market markets trading trader bond bonds currency
        """.split()),
}
MIN_HITS = 3
MIN_SHARE = 0.01
_WORD_DOMAIN = {w: d for d, ws in DOMAINS.items() for w in ws}
assert len(_WORD_DOMAIN) == sum(map(len, DOMAINS.values())), "DOMAINS families must be disjoint"


@builtin({"domain_tag": "string"}, name="domain_tag", inputs=[PARSED_TEXT], form="batch", batch_size=1024,
         depends=[DOMAINS, MIN_HITS, MIN_SHARE, word_counts, shared_for])
def domain_tag(parsed_text, shared=None):
    """Topic label from keyword families: programming, math, legal, medical, finance or other."""
    texts = texts_of(parsed_text)
    counts = word_counts(shared_for(shared, texts))
    out: list[str | None] = []
    for text, c in zip(texts, counts):
        if text is None:
            out.append(None)
            continue
        hits = dict.fromkeys(DOMAINS, 0)
        for w, n in c.items():
            d = _WORD_DOMAIN.get(w)
            if d is not None:
                hits[d] += n
        best = max(DOMAINS, key=lambda d: hits[d])  # max keeps the first of equals
        words = sum(c.values())
        out.append(best if hits[best] >= MIN_HITS and hits[best] >= MIN_SHARE * words else "other")
    return pa.array(out, type=pa.string())
