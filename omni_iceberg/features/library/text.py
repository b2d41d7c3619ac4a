"""Text built-ins: HTML extraction, length, and cheap surface statistics of parsed text.

``html_parser`` turns ``RawData.raw_data`` into ``ProcessedData.parsed_text``: HTML is
parsed into its body text, any other content (code, plain text, PDF text, JSONL fields)
passes unchanged, decided by ``RawData.content_type`` (see :func:`is_html`). Every other
built-in reads that text. The surface statistics are Arrow-batch UDFs that take
``shared``: features fused into one stage count characters, split words and split lines
once per batch through :class:`SharedBatch`, not once per feature.

    >>> html_parser("<p>Hello <b>world</b></p><script>x()</script>", "text/html")
    'Hello world'
    >>> html_parser("List<E> extends Collection<E>", "text/x-java")
    'List<E> extends Collection<E>'
    >>> digit_ratio(["ab12"]).to_pylist()
    [0.5]

This module also holds the helpers the other library modules share: :func:`builtin`
(``@feature`` with a version that covers the word lists and helpers a UDF uses) and
the batch plumbing (:func:`texts_of`, :func:`shared_for`, :func:`ratio`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext.contract import HTML_CONTENT_TYPES, RAW_CONTENT_TYPE_FIELD, RAW_STAGE
from catalog_ext.errors import OmniError
from omni_iceberg.features.shared import SharedBatch
from omni_iceberg.features.udf import code_hash, feature

RAW_DATA = "RawData.raw_data"
CONTENT_TYPE = f"{RAW_STAGE}.{RAW_CONTENT_TYPE_FIELD}"
PARSED_TEXT = "ProcessedData.parsed_text"
#: Key for SharedBatch look-ups: SharedBatch matches a logical path by its last part, so
#: this finds the column whether the engine keys it "ProcessedData.parsed_text" or not.
TEXT_KEY = "parsed_text"


# --------------------------------------------------------------------------- helpers


def builtin(outputs: dict[str, str], *, depends: Sequence[Any] = (), **kwargs: Any) -> Callable[[Any], Any]:
    """``@feature`` for built-ins, versioned by the UDF's code *and* what it depends on.

    ``udf.code_hash`` sees only the decorated function's source, so a changed stop-word
    list or helper regex would keep the old version and stale values would look fresh.
    ``depends`` names those module-level things (word lists, patterns, helper functions,
    model identifiers); their canonical form goes into the version hash.
    """

    def wrap(target: Any) -> Any:
        decl = {k: kwargs.get(k) for k in ("name", "inputs", "params", "filter")}
        payload = {"code": code_hash(target), "outputs": outputs, "decl": decl,
                   "depends": [fingerprint(d) for d in depends]}
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
        return feature(outputs, version="b" + digest[:12], **kwargs)(target)

    return wrap


def fingerprint(obj: Any) -> Any:
    """A canonical, hash-seed-independent JSON form of a dependency (sets are sorted)."""
    if isinstance(obj, re.Pattern):
        return ["re", obj.pattern, int(obj.flags)]
    if callable(obj):
        return ["code", code_hash(obj)]
    if isinstance(obj, (set, frozenset)):
        return sorted(fingerprint(x) for x in obj)
    if isinstance(obj, dict):
        return [[str(k), fingerprint(v)] for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))]
    if isinstance(obj, (list, tuple)):
        return [fingerprint(x) for x in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"cannot fingerprint {type(obj).__name__} for a built-in's version")


def texts_of(values: Any) -> list[str | None]:
    """Plain Python strings from an Arrow array or any sequence (bytes decoded as UTF-8)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_pylist()
    out: list[str | None] = []
    for v in values:
        if isinstance(v, (bytes, bytearray, memoryview)):
            v = bytes(v).decode("utf-8", errors="replace")
        out.append(v)
    return out


def shared_for(shared: SharedBatch | None, texts: list[str | None], key: str = PARSED_TEXT) -> SharedBatch:
    """The engine's SharedBatch, or a private one when a UDF is called directly."""
    if shared is None:
        return SharedBatch({key: texts})
    n = len(shared.column(key.rsplit(".", 1)[-1]))
    if n != len(texts):
        raise OmniError(f"SharedBatch holds {n} rows of {key!r} but the UDF got {len(texts)}: "
                        "the engine must pass the SharedBatch of the same batch")
    return shared


def ratio(num: float, den: float) -> float | None:
    """``num / den``, or None (no value) when there is nothing to divide by."""
    return None if den <= 0 else num / den


def doubles(values: list[float | None]) -> pa.Array:
    return pa.array(values, type=pa.float64())


# --------------------------------------------------------------------------- html_parser

#: Elements whose whole subtree is never body text.
_DROP_TAGS = ["head", "script", "style", "noscript", "template", "nav", "header", "footer",
              "svg", "iframe", "object", "embed", "canvas"]
#: The same boilerplate marked up without the HTML5 tags: ARIA landmarks (Sphinx, for
#: one, puts ``role="navigation"`` on its sidebar and link-bar divs), the common
#: ``footer`` class/id convention, and content hidden from readers.
_DROP_SELECTOR = ("[role=navigation],[role=banner],[role=contentinfo],[role=search],[aria-hidden=true],"
                  ".footer,#footer")
#: Elements that start a new line of text.
_BLOCK_SELECTOR = ("p,div,section,article,main,aside,h1,h2,h3,h4,h5,h6,li,ul,ol,dl,dt,dd,table,tr,"
                   "blockquote,figure,figcaption,form,fieldset,address,details,summary,hr,br,caption,title")
#: Placeholders that survive whitespace collapsing: a block break, and a space or tab
#: inside <pre> (code keeps its indentation). Private-use code points, not in real text.
_BREAK, _PRE_SPACE = "\ue000", "\ue001"
_COLLAPSE = re.compile(r"[^\S\ue000]+")
#: HTML for a row without a content type: a document's frame, or a closing tag of a common
#: element. A bare ``<name>`` is no sign: ``List<E>``, ``Map<K, V>`` and ``x<y>z`` are not HTML.
_HTML_SNIFF = re.compile(
    r"<!doctype\s+html|<(?:html|head|body)[\s>]"
    r"|</(?:p|div|span|a|b|i|u|em|strong|br|li|ul|ol|dl|dt|dd|table|tr|td|th|thead|tbody|h[1-6]|pre|code|"
    r"section|article|main|aside|nav|header|footer|title|script|style|blockquote|form|label|button|html|"
    r"body|head)\s*>",
    re.IGNORECASE)


def is_html(raw: str, content_type: str | None) -> bool:
    """Whether ``raw`` is HTML: by its content type (``text/html; charset=...`` included), and
    only for a row without one (stored before readers set it) by :data:`_HTML_SNIFF`.

    >>> is_html("<p>x</p>", "text/plain"), is_html("<p>x</p>", None), is_html("Map<K, V> m;", None)
    (False, True, False)
    """
    if content_type is not None:
        return content_type.split(";", 1)[0].strip().lower() in HTML_CONTENT_TYPES
    return _HTML_SNIFF.search(raw) is not None


def extract_text(html: str) -> str:
    """Body text of an HTML document: one line per block, whitespace collapsed, code kept."""
    from selectolax.lexbor import LexborHTMLParser  # the HTML engine is an adapter detail

    tree = LexborHTMLParser(html)
    tree.strip_tags(_DROP_TAGS, recursive=True)
    for node in tree.css(_DROP_SELECTOR):
        node.decompose()
    for node in tree.css("pre"):
        code = node.text().expandtabs(4).replace(" ", _PRE_SPACE)
        node.replace_with(_BREAK + code.replace("\n", _BREAK) + _BREAK)
    for node in tree.css(_BLOCK_SELECTOR):
        node.insert_before(_BREAK)
        node.insert_after(_BREAK)
    for node in tree.css("td,th"):
        node.insert_after(" ")
    root = tree.body or tree.root
    text = root.text(separator="") if root is not None else ""
    lines = (_COLLAPSE.sub(" ", line).strip().replace(_PRE_SPACE, " ").rstrip() for line in text.split(_BREAK))
    return "\n".join(line for line in lines if line)


@builtin({"ProcessedData.parsed_text": "string"}, name="html_parser", inputs=[RAW_DATA, CONTENT_TYPE],
         engine="cpu", batch_size=256,
         depends=[extract_text, is_html, HTML_CONTENT_TYPES, _HTML_SNIFF, _DROP_TAGS, _DROP_SELECTOR,
                  _BLOCK_SELECTOR, _COLLAPSE, _BREAK, _PRE_SPACE])
def html_parser(raw_data, content_type):
    """Body text of an HTML page (scripts, styles, navigation dropped); other content unchanged."""
    if raw_data is None:
        return None
    if isinstance(raw_data, (bytes, bytearray, memoryview)):
        raw_data = bytes(raw_data).decode("utf-8", errors="replace")
    text = extract_text(raw_data) if is_html(raw_data, content_type) else raw_data
    return text if text.strip() else None


# --------------------------------------------------------------------------- length


@builtin({"text_length": "long"}, name="text_length", inputs=[PARSED_TEXT], engine="cpu", batch_size=4096)
def text_length(parsed_text):
    """Length of the parsed text in characters (Unicode code points)."""
    return None if parsed_text is None else len(parsed_text)


# --------------------------------------------------------------------------- character classes

#: RE2 classes (Arrow's regex engine), counted over the whole batch in C++. Letters are
#: not counted directly (a match per letter is slow): letters = length - space - other -
#: number, where "letters" include combining marks.
_CHAR_CLASSES = {
    "space": r"[\s\p{Z}]",
    "upper": r"\p{Lu}",
    "digit": r"\p{Nd}",
    "number": r"\p{N}",
    "other": r"[^\s\p{Z}\p{L}\p{M}\p{N}]",  # punctuation and symbols
}


def char_classes(values: list[str | None]) -> dict[str, list[int | None]]:
    """Per-text counts of :data:`_CHAR_CLASSES`, plus ``length`` and ``letter``; None for null text."""
    arr = pa.array(values, type=pa.large_string())
    out = {name: pc.count_substring_regex(arr, pattern).to_pylist() for name, pattern in _CHAR_CLASSES.items()}
    out["length"] = pc.utf8_length(arr).to_pylist()
    out["letter"] = [None if n is None else n - s - o - d
                     for n, s, o, d in zip(out["length"], out["space"], out["other"], out["number"])]
    return out


def _char_stats(shared: SharedBatch) -> dict[str, list[int | None]]:
    return shared.cached("char_classes", TEXT_KEY, char_classes)


@builtin({"punctuation_ratio": "double"}, name="punctuation_ratio", inputs=[PARSED_TEXT], form="batch", batch_size=1024,
         depends=[_CHAR_CLASSES, char_classes, _char_stats, shared_for, ratio])
def punctuation_ratio(parsed_text, shared=None):
    """Share of non-space characters that are punctuation or symbols, in [0, 1]."""
    texts = texts_of(parsed_text)
    stats = _char_stats(shared_for(shared, texts))
    return doubles([None if n is None else ratio(o, n - s)
                    for o, n, s in zip(stats["other"], stats["length"], stats["space"])])


@builtin({"digit_ratio": "double"}, name="digit_ratio", inputs=[PARSED_TEXT], form="batch", batch_size=1024,
         depends=[_CHAR_CLASSES, char_classes, _char_stats, shared_for, ratio])
def digit_ratio(parsed_text, shared=None):
    """Share of non-space characters that are decimal digits, in [0, 1]."""
    texts = texts_of(parsed_text)
    stats = _char_stats(shared_for(shared, texts))
    return doubles([None if n is None else ratio(d, n - s)
                    for d, n, s in zip(stats["digit"], stats["length"], stats["space"])])


@builtin({"uppercase_ratio": "double"}, name="uppercase_ratio", inputs=[PARSED_TEXT], form="batch", batch_size=1024,
         depends=[_CHAR_CLASSES, char_classes, _char_stats, shared_for, ratio])
def uppercase_ratio(parsed_text, shared=None):
    """Share of letters that are upper case, in [0, 1]; None when the text has no letters."""
    texts = texts_of(parsed_text)
    stats = _char_stats(shared_for(shared, texts))
    return doubles([None if n is None else ratio(u, n)
                    for u, n in zip(stats["upper"], stats["letter"])])


# --------------------------------------------------------------------------- words and lines


@builtin({"avg_word_length": "double"}, name="avg_word_length", inputs=[PARSED_TEXT], form="batch", batch_size=1024,
         depends=[shared_for, ratio])
def avg_word_length(parsed_text, shared=None):
    """Mean length in characters of the text's words (``\\w+`` runs); None without words."""
    texts = texts_of(parsed_text)
    words = shared_for(shared, texts).words(TEXT_KEY)
    return doubles([None if t is None else ratio(sum(map(len, ws)), len(ws)) for t, ws in zip(texts, words)])


#: A line looks like code when it matches any of these (after stripping). Chosen so that
#: ordinary prose lines - sentences ending in a full stop - match none of them.
_CODE_LINE = re.compile(
    r"""^(?:>>>|\.\.\.\s|\$\s|In\s\[\d*\]:|\#include\b|\#define\b|\#!|//|/\*|\*/|\#\s)  # prompts, comments
      | ^(?:def|class|import|return|elif|raise|yield|async|await|lambda|del|assert|pass|break|continue
           |public|private|protected|static|function|var|let|const|fn|func|package|struct|enum|impl
           |SELECT|INSERT|UPDATE|CREATE)\b                                # statement keywords
      | ^from\s+[\w.]+\s+import\b
      | ^(?:else|try|finally)\s*:
      | ^(?:if|for|while|with|except)\b.*:$                             # compound statement heads
      | [;{}]$ | ^[}\])]                                                  # C-like line ends/starts
      | ^[\w.\[\]'"]+\s*(?:=|\+=|-=|\*=|/=|:=|==)\s*\S                 # assignment / comparison
      | ^[\w.]+\(.*\)$                                                   # a bare call
      | ^Traceback\s\(most\srecent\scall\slast\) | ^File\s".*",\sline\s\d+  # a Python traceback
    """,
    re.VERBOSE,
)


def looks_like_code(line: str) -> bool:
    """Whether one stripped line of text looks like source code or an interpreter session."""
    return bool(_CODE_LINE.search(line))


@builtin({"code_ratio": "double"}, name="code_ratio", inputs=[PARSED_TEXT], form="batch", batch_size=1024,
         depends=[_CODE_LINE, looks_like_code, shared_for, ratio])
def code_ratio(parsed_text, shared=None):
    """Share of non-empty lines that look like code (see ``_CODE_LINE``), in [0, 1]."""
    texts = texts_of(parsed_text)
    lines = shared_for(shared, texts).lines(TEXT_KEY)
    out: list[float | None] = []
    for t, ls in zip(texts, lines):
        stripped = [s for s in (line.strip() for line in ls) if s]
        out.append(None if t is None else ratio(sum(map(looks_like_code, stripped)), len(stripped)))
    return doubles(out)


def word_counts(shared: SharedBatch) -> list[dict[str, int]]:
    """Per-text ``{word: count}`` of the lower-cased words, built once per batch.

    The vocabulary features (stop words, domains, math, safety) look words up in sets;
    counting first means each distinct word is looked up once per text.
    """
    from collections import Counter

    return shared.cached("word_counts", TEXT_KEY, lambda _: [Counter(ws) for ws in shared.words(TEXT_KEY)])
