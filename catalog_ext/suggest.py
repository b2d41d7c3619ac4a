"""One "did you mean" for every error that names something unknown.

    >>> did_you_mean("math_recal", ["math_recall", "token_count"])
    "; did you mean 'math_recall'?"
    >>> did_you_mean("zzz", ["math_recall"])
    ''
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known name nearest to ``name``, or None when nothing is close."""
    near = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return near[0] if near else None


def did_you_mean(name: str, known: Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean 'x'?"`` to append to an error message, or ``""``."""
    near = closest(name, known, cutoff)
    return f"; did you mean {near!r}?" if near else ""


__all__ = ["closest", "did_you_mean"]
