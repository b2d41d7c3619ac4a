"""Credentials out of recorded command lines (minimal version; the explore branch has the full one).

    >>> redact_command(["--catalog", "postgresql://u:SECRET@h/db", "log", "web"])
    ['--catalog', 'postgresql://u:***@h/db', 'log', 'web']
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):(?P<secret>[^@/\s]+)@")
# only in query strings (after ? & ;): "--map token=raw_data" is a field mapping, not a secret
_KEY_VALUE = re.compile(r"(?i)(?<=[?&;])(?P<key>[A-Za-z0-9_.\-]*(?:password|passwd|secret|token|credential)[A-Za-z0-9_.\-]*=)"
                        r"(?P<value>[^&\s;]+)")


def redact(text: str) -> str:
    """``text`` with URI passwords and ``password=``/``secret=``/``token=`` values replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}:***@", text)
    return _KEY_VALUE.sub(lambda m: f"{m['key']}***", text)


def redact_command(argv: list[str]) -> list[str]:
    """Each argument redacted; the value after a ``--password``-like option too."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        out.append("***" if hide_next else redact(arg))
        hide_next = arg.startswith("--") and "=" not in arg and bool(
            re.search(r"(?i)password|secret|token|credential", arg))
    return out


__all__ = ["redact", "redact_command"]
