"""One governance operation's Execute-Commit attempt, and what undoing it means.

Compaction, regroup, split, drop-batch and materialize all write new files on staging
branches and publish them with one logical commit. Until that commit the files are
named by no version: when anything fails (a lost race, a crash, Ctrl-C) they are
deleted, tables the attempt created are dropped, and the progress bar is closed - the
same undo for every operation, kept here once.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator

from catalog_ext.physical import abandon_all


@contextlib.contextmanager
def staged_attempt(bar: Any, writers: Callable[[], Iterable[Any]], *, catalog: Any = None,
                   created: Callable[[], Iterable[str]] = lambda: ()) -> Iterator[None]:
    """Run the body; on failure abandon ``writers()`` (their files were never pinned) and
    drop the tables named by ``created()`` (no version names them), then re-raise.

    Both are callables: the body fills the collections they read as it goes.
    """
    try:
        yield
    except BaseException:
        abandon_all(writers())
        for identifier in created():
            with contextlib.suppress(Exception):  # best effort: an orphan table only costs storage
                catalog.drop_table(identifier)
        raise
    finally:
        if bar is not None:
            bar.close()
