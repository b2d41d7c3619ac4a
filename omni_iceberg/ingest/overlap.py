"""Run the ingest's reading and its data-file writing beside the per-record work.

A submit of short records was one serial loop: read and parse a block, hash and dedup
it, hand it to the staged write - and wait whenever the write's buffer filled and
pyiceberg split it per bucket and encoded the files. Reading (Arrow's JSON parser) and
writing (Arrow's filter, Parquet encoding) run mostly outside the GIL, so each can
overlap the other steps on another core:

* :class:`ReadAhead` iterates the source stream in a thread of its own, a bounded
  number of bytes ahead of the consumer. The items, their order and the point where a
  failure surfaces are those of the stream itself: what the reader yielded before it
  raised is consumed first, then its exception is raised in the consumer;
* :class:`BackgroundWrites` hands rows to a :class:`~catalog_ext.physical.StagedWrite`
  in one worker thread, in the order they came, with a bounded number of bytes
  waiting. :meth:`BackgroundWrites.wait` is the barrier before anything else touches
  the write (a schema change, the commit, abandoning it) and raises a failed write's
  error there - or at the next hand-over, whichever comes first.

Both bound what they hold by bytes, so memory still follows the chunk and buffer sizes,
not the input.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator

#: items of a per-record source put into the queue together (one lock round trip for many)
PARCEL_ITEMS = 64


class ReadAhead:
    """``make()``'s items, produced in a thread up to ``max_bytes`` (as ``size_of`` weighs
    them) ahead of the consumer; see the module docstring. ``make`` is called in that
    thread, which also closes the iterator. Call :meth:`close` when done (a ``with`` block
    does): it stops the thread when the consumer leaves early."""

    def __init__(self, make: Callable[[], Iterator[Any]], max_bytes: int, size_of: Callable[[Any], int],
                 whole: Callable[[Any], bool] = lambda item: False) -> None:
        self._make, self._size_of, self._whole = make, size_of, whole
        self.max_bytes = max(1, int(max_bytes))
        self._cond = threading.Condition()
        self._parcels: deque[tuple[list[Any], int]] = deque()
        self._held = 0  # bytes produced, not yet taken
        self._done = False  # the producer finished (the end or a failure)
        self._failure: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._produce, name="omni-ingest-read", daemon=True)
        self._thread.start()

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        while True:
            with self._cond:
                while not self._parcels and not self._done:
                    self._cond.wait()
                if self._parcels:
                    parcel, size = self._parcels.popleft()
                    self._held -= size
                    self._cond.notify_all()
                else:  # done, nothing left
                    if self._failure is not None:
                        failure, self._failure = self._failure, None
                        raise failure
                    return
            yield from parcel

    def close(self) -> None:
        """Stop the producer (at its next item) and wait for it; drop what it read ahead."""
        with self._cond:
            self._stop = True
            self._parcels.clear()
            self._held = 0
            self._cond.notify_all()
        self._thread.join()

    def _put(self, parcel: list[Any], size: int) -> bool:
        """Queue a parcel once there is room (one parcel is always let through); False: stop."""
        with self._cond:
            while self._held and self._held + size > self.max_bytes and not self._stop:
                self._cond.wait()
            if self._stop:
                return False
            self._parcels.append((parcel, size))
            self._held += size
            self._cond.notify_all()
            return True

    def _produce(self) -> None:
        items: Iterator[Any] | None = None
        parcel: list[Any] = []
        size = 0
        try:
            items = self._make()
            for item in items:
                parcel.append(item)
                size += self._size_of(item)
                if self._whole(item) or len(parcel) >= PARCEL_ITEMS or size >= self.max_bytes // 4:
                    if not self._put(parcel, size):
                        return
                    parcel, size = [], 0
            if parcel:
                self._put(parcel, size)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            if parcel:
                self._put(parcel, size)  # what was read before the failure comes first
            with self._cond:
                self._failure = e
        finally:
            if items is not None and hasattr(items, "close"):
                try:
                    items.close()  # the reader's files, in the thread that opened them
                except Exception:  # noqa: BLE001 - a close failing after the end changes nothing read
                    pass
            with self._cond:
                self._done = True
                self._cond.notify_all()


class BackgroundWrites:
    """``writer.write(data, nbytes)`` in one worker thread, in order, at most ``max_bytes``
    (of ``nbytes``) waiting; see the module docstring."""

    def __init__(self, writer: Any, max_bytes: int) -> None:
        self.writer = writer
        self.max_bytes = max(1, int(max_bytes))
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="omni-ingest-write")
        self._pending: deque[tuple[Future, int]] = deque()
        self._waiting = 0

    def write(self, data: Any, nbytes: int) -> None:
        """Queue rows for the write; blocks while ``max_bytes`` wait already. Raises the
        failure of an earlier write, if one failed."""
        while self._pending and (self._pending[0][0].done() or self._waiting + nbytes > self.max_bytes):
            self._take_oldest()
        self._pending.append((self._pool.submit(self.writer.write, data, nbytes=nbytes), nbytes))
        self._waiting += nbytes

    def wait(self) -> None:
        """Every queued row handed to the writer; raises the first failure."""
        while self._pending:
            self._take_oldest()

    def close(self) -> None:
        """Stop the worker. Rows still queued are not written (after :meth:`wait` there are
        none; otherwise the caller is failing and abandons the write); a write under way
        finishes first, its failure ignored."""
        self._drop_queued()
        self._pool.shutdown(wait=True)

    def _take_oldest(self) -> None:
        future, nbytes = self._pending.popleft()
        self._waiting -= nbytes
        try:
            future.result()
        except BaseException:
            self._drop_queued()
            raise

    def _drop_queued(self) -> None:
        """After a failure, rows queued behind it are not written (the submit is failing)."""
        while self._pending:
            future, nbytes = self._pending.popleft()
            future.cancel()
            self._waiting -= nbytes
            try:
                future.result()
            except BaseException:  # noqa: BLE001 - the first failure is the one raised
                pass
