"""The one retry loop for optimistic commits (view CAS, physical-table commits, system tables).

A lost race is normal when several writers share a catalog: the loser waits a jittered,
exponentially growing pause and tries again on fresh state. Which errors count as a
lost race is the caller's choice (``on``); anything else propagates at once.

Example::

    >>> calls = []
    >>> def flaky():
    ...     calls.append(1)
    ...     if len(calls) < 3:
    ...         raise TimeoutError("lost")
    ...     return "ok"
    >>> retry(flaky, on=TimeoutError, attempts=5, backoff=0.0)
    'ok'
"""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

T = TypeVar("T")
RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]


def delay(attempt: int, backoff: float, cap: float) -> float:
    """Pause before retry ``attempt`` (0-based): ``backoff * 2**attempt``, capped, with 50-150% jitter.

    Jitter keeps two writers that lost to each other from retrying in lock-step.
    """
    return min(cap, backoff * 2**attempt) * (0.5 + random.random())


def _matches(error: BaseException, on: RetryOn) -> bool:
    if isinstance(on, type) or isinstance(on, tuple):
        return isinstance(error, on)
    return bool(on(error))


def retry(
    fn: Callable[[], T],
    *,
    on: RetryOn,
    attempts: int,
    backoff: float = 0.05,
    cap: float = 2.0,
    exhausted: Callable[[BaseException], BaseException] | None = None,
) -> T:
    """Call ``fn()`` until it returns, retrying up to ``attempts`` times on errors matching ``on``.

    ``on`` is an exception type, a tuple of them, or a predicate. When every attempt
    lost, ``exhausted(last_error)`` (if given) is raised from the last error, else the
    last error itself.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    for attempt in range(attempts):
        try:
            return fn()
        except BaseException as e:  # noqa: BLE001 - filtered by ``on`` right below
            if not _matches(e, on):
                raise
            if attempt == attempts - 1:
                if exhausted is not None:
                    raise exhausted(e) from e
                raise
            time.sleep(delay(attempt, backoff, cap))
    raise AssertionError("unreachable")


__all__ = ["retry", "delay"]
