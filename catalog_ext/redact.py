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
"""

from __future__ import annotations

import re
import shlex
from typing import Any

MASK = "***"

_SECRET_WORD = r"(?:password|passwd|pwd|secret|token|credentials?|api[_-]?key|private[_-]?key|access[_-]?key)(?![a-z])"
_SECRET_KEY = re.compile(rf"[\w.\-]*{_SECRET_WORD}[\w.\-]*", re.IGNORECASE)
# scheme://user:password@host - user info ends at the last '@' before the host
_URI_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'\"]*):(?P<pw>[^\s@'\"]+)@")
_KEY_VALUE = re.compile(
    rf"(?P<key>[\w.\-]*{_SECRET_WORD}[\w.\-]*)(?P<q1>[\"']?)(?P<sep>\s*[=:]\s*)(?P<q2>[\"']?)(?P<val>[^\s&;,\"'}}\]]+)",
    re.IGNORECASE)
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<val>[A-Za-z0-9\-._~+/]+=*)", re.IGNORECASE)


def redact(text: Any) -> Any:
    """``text`` with credentials replaced by ``***`` (non-strings are returned unchanged).

    >>> redact("cannot open catalog 'postgresql+psycopg://u:SECRETPW@db:5432/omni'")
    "cannot open catalog 'postgresql+psycopg://u:***@db:5432/omni'"
    >>> redact("s3.secret-access-key=abc123&region=eu password: hunter2 tokenizer=gpt2")
    's3.secret-access-key=***&region=eu password: *** tokenizer=gpt2'
    """
    if not isinstance(text, str):
        return text
    text = _URI_PASSWORD.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _KEY_VALUE.sub(lambda m: f"{m['key']}{m['q1']}{m['sep']}{m['q2']}{MASK}", text)
    return _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)


def is_secret_name(name: str) -> bool:
    """Whether a flag, property or variable name names a secret (``--s3-secret-key``, ``token``).

    >>> is_secret_name("--catalog-password"), is_secret_name("--tokenizer")
    (True, False)
    """
    return _SECRET_KEY.fullmatch(name.lstrip("-")) is not None


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
