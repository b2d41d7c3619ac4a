"""One governance operation's Execute-Commit attempt, and what undoing it means.

Compaction, regroup, split, drop-batch and materialize all write new files on staging
branches and publish them with one logical commit. Until that commit the files are
named by no version: when anything fails (a lost race, a crash, Ctrl-C) they are
deleted and the progress bar is closed - the same undo for every operation, kept here
once. Tables an attempt created stay: their names follow the plan, so a concurrent
attempt of the same plan adopts the table and may have pinned it by then (regroup and
split reuse such a table; dropping it left the winner's version pinning a dropped table).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator

from catalog_ext.physical import abandon_all


@contextlib.contextmanager
def staged_attempt(bar: Any, writers: Callable[[], Iterable[Any]]) -> Iterator[None]:
    """Run the body; on failure abandon ``writers()`` (their files were never pinned), then re-raise.

    ``writers`` is a callable: the body fills the collection it reads as it goes.
    """
    try:
        yield
    except BaseException:
        abandon_all(writers())
        raise
    finally:
        if bar is not None:
            bar.close()
