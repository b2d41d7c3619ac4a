"""Remove credentials from text before it is shown, logged or stored.

A catalog URI such as ``postgresql+psycopg://u:SECRET@db/omni`` reaches error messages,
and a command line with ``--catalog URI`` is recorded in ``omni log``, view metadata,
lineage and the query log. Everything that records or prints such text passes it
through :func:`redact` (or :func:`redact_argv` for a command's arguments) first.

What is removed (replaced by ``***``):

- the password of a URI's user info: ``scheme://user:PASSWORD@host``;
- the value of any ``key=value`` or ``key: value`` whose key names a secret
  (``password``, ``secret``, ``token``, ``credential``, ``api_key``, ``private_key``,
  ``access_key``, with any prefix: ``s3.secret-access-key``, ``aws_secret_access_key``);
- a bearer token (``Authorization: Bearer TOKEN``);
- in an argument list, the argument after a flag that names a secret (``--password X``).

Redaction is idempotent and keeps everything else, so messages stay useful.

It runs on every command line and every logged query, so its time must stay linear in
the text's length whatever the text holds: a pattern that tries every start position
and scans to the end of a run from each one is quadratic, and one long SQL literal
(a run of letters, of ``a=``, of ``x://a:``) then stalls the command. Keys therefore
only start where a run of key characters starts and are matched atomically, and URI
passwords are found by one left-to-right scan.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

MASK = "***"

_SECRET_WORD = r"(?:password|passwd|pwd|secret|token|credentials?|api[_-]?key|private[_-]?key|access[_-]?key)(?![a-z])"
_SECRET_WORD_RE = re.compile(_SECRET_WORD, re.IGNORECASE)
_KEY_CHARS = re.compile(r"[\w.\-]*")
# A key is a whole run of key characters holding a secret word: it starts only where such
# a run starts (the lookbehind), and once the word is found the group never backtracks
# into the run again; either way the key spans the run, as a leftmost match would.
_KEY_VALUE = re.compile(
    rf"(?<![\w.\-])(?P<key>(?>[\w.\-]*?{_SECRET_WORD}[\w.\-]*+))(?P<q1>[\"']?)(?P<sep>\s*+[=:]\s*+)(?P<q2>[\"']?)"
    rf"(?P<val>[^\s&;,\"'}}\]]+)",
    re.IGNORECASE)
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<val>[A-Za-z0-9\-._~+/]+=*)", re.IGNORECASE)
# scheme://user:password@host (see _mask_uri_passwords)
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_WORD_CHAR = re.compile(r"\w")
_URI_USER = re.compile(r"[^\s/:@'\"]*")
_PASSWORD_END = re.compile(r"[\s@'\"]")


def redact(text: Any) -> Any:
    """``text`` with credentials replaced by ``***`` (non-strings are returned unchanged).

    >>> redact("cannot open catalog 'postgresql+psycopg://u:SECRETPW@db:5432/omni'")
    "cannot open catalog 'postgresql+psycopg://u:***@db:5432/omni'"
    >>> redact("s3.secret-access-key=abc123&region=eu password: hunter2 tokenizer=gpt2")
    's3.secret-access-key=***&region=eu password: *** tokenizer=gpt2'
    """
    if not isinstance(text, str):
        return text
    text = _mask_uri_passwords(text)
    text = _KEY_VALUE.sub(lambda m: f"{m['key']}{m['q1']}{m['sep']}{m['q2']}{MASK}", text)
    return _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)


def _mask_uri_passwords(text: str) -> str:
    """``scheme://user:PASSWORD@host`` -> ``scheme://user:***@host``, in one pass.

    A match is what ``\\b[A-Za-z][A-Za-z0-9+.-]*://[^\\s/:@'"]*:[^\\s@'"]+@`` finds: a
    scheme (a letter at a word start, then scheme characters), the user up to the first
    ``:``, then a password ending at an ``@`` before any blank or quote. Each ``://`` is
    looked at once, the scheme before it is scanned back once, and where a password ends
    is searched for only past the last place found, so ``'x://a:' * n`` costs O(n).
    """
    i = text.find("://")
    if i < 0:
        return text
    out: list[str] = []
    done = 0  # text[:done] is written to out
    free = 0  # the first position a new match may start at (just past the last one)
    end = -1  # the first password-ending character at or after the last password start
    while i >= 0:
        if _has_scheme(text, free, i):
            colon = _URI_USER.match(text, i + 3).end()
            if colon < len(text) and text[colon] == ":":
                start = colon + 1
                if end < start:
                    found = _PASSWORD_END.search(text, start)
                    end = found.start() if found else len(text)
                if start < end < len(text) and text[end] == "@":
                    out += (text[done:start], MASK)
                    done, free = end, end + 1
                    i = text.find("://", free)
                    continue
        i = text.find("://", i + 1)
    out.append(text[done:])
    return "".join(out)


def _has_scheme(text: str, free: int, i: int) -> bool:
    """Whether a URI scheme ends at ``i`` and starts at or after ``free``: a letter that starts
    a word, followed by scheme characters up to ``i``."""
    k = i
    while k > free and text[k - 1] in _SCHEME_CHARS:
        k -= 1
    return any(text[p].isascii() and text[p].isalpha() and (p == 0 or not _WORD_CHAR.match(text[p - 1]))
               for p in range(k, i))


def is_secret_name(name: str) -> bool:
    """Whether a flag, property or variable name names a secret (``--s3-secret-key``, ``token``).

    >>> is_secret_name("--catalog-password"), is_secret_name("--tokenizer")
    (True, False)
    """
    bare = name.lstrip("-")
    return _KEY_CHARS.fullmatch(bare) is not None and _SECRET_WORD_RE.search(bare) is not None


def redact_argv(argv: list[str]) -> list[str]:
    """A command's arguments with credentials removed; ``--password X`` hides ``X`` too.

    >>> redact_argv(["--catalog", "postgresql://u:pw@h/db", "--token", "abc", "sql", "SELECT 1"])
    ['--catalog', 'postgresql://u:***@h/db', '--token', '***', 'sql', 'SELECT 1']
    """
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if arg.startswith("-") and "=" not in arg and is_secret_name(arg):
            hide_next = True
        out.append(redact(arg))
    return out


def redact_command(argv: list[str], program: str = "omni") -> str:
    """The command line as recorded in ``omni log`` and lineage: quoted, credentials removed.

    >>> redact_command(["--catalog", "postgresql://u:pw@h/db", "table", "create", "web"])
    "omni --catalog 'postgresql://u:***@h/db' table create web"
    """
    return " ".join([program] + [shlex.quote(a) for a in redact_argv(list(argv))])


def redact_mapping(values: Any) -> Any:
    """A JSON-like value (dicts, lists, strings) with secret-named keys masked and strings redacted.

    For properties and events (OpenLineage facets, catalog properties) before they are stored.

    >>> redact_mapping({"uri": "rest://u:p@h", "s3.secret-access-key": "k", "n": 3})
    {'uri': 'rest://u:***@h', 's3.secret-access-key': '***', 'n': 3}
    """
    if isinstance(values, dict):
        return {k: MASK if isinstance(k, str) and is_secret_name(k) and v not in (None, "") else redact_mapping(v)
                for k, v in values.items()}
    if isinstance(values, (list, tuple)):
        return type(values)(redact_mapping(v) for v in values)
    return redact(values)
