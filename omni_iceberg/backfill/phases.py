"""Where the wall time of one backfill goes: named phases, summed over the run.

A backfill's time is its compute plus a fixed cost per run (plan, worker start,
commits, system-table appends) and per feature table (checkpoints, pins). The split
tells fusion's gain apart from that overhead, so :class:`PhaseClock` times each phase
and the report carries the result (``BackfillReport.phases``, ``omni backfill --json``).

Phases do not nest: a phase is timed where the run does that work and nowhere else,
so the phases plus ``other_s`` add up to the run's seconds.

>>> clock = PhaseClock()
>>> with clock.span("read_s"):
...     pass
>>> sorted(clock.as_dict(0.5))[:2]
['other_s', 'read_s']
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

#: the phases in the order a run goes through them (a report lists only those that occurred)
PHASES = (
    "plan_s",                 # load the family state, plan the stages
    "setup_s",                # sweep stale branches, attach staged writers (resume), build the reuse index
    "worker_start_s",         # waiting for the worker process to be ready (spawn + imports + UDF unpickling)
    "read_s",                 # read the inputs of each unit from the pinned snapshots
    "compute_s",              # the UDFs (in the worker), including class UDF setup on first use
    "write_s",                # write output data files
    "checkpoint_s",           # commit each unit's files on the staging branches
    "errors_append_s",        # omni_sys.errors appends (only units with failed records)
    "worker_stop_s",          # ending the worker process
    "commit_s",               # the ONE logical commit, publishing main and the reuse index
    "lineage_append_s",       # omni_sys.lineage append
    "runs_append_s",          # omni_sys.runs append
    "system_compaction_s",    # rewrite of a system table past its snapshot limit (rare)
)


class PhaseClock:
    """Wall seconds per phase of one run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    @contextmanager
    def span(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - t0)

    def timed_iter(self, phase: str, items: Iterator) -> Iterator:
        """Yield from ``items``, counting the time spent producing each item (not consuming it)."""
        it = iter(items)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                self.add(phase, time.perf_counter() - t0)
                return
            self.add(phase, time.perf_counter() - t0)
            yield item

    def as_dict(self, total_seconds: float) -> dict[str, float]:
        """Phases in run order (milliseconds precision) and ``other_s``: the run's time outside every phase."""
        known = [p for p in PHASES if p in self.seconds] + sorted(p for p in self.seconds if p not in PHASES)
        out = {p: round(self.seconds[p], 3) for p in known}
        out["other_s"] = round(max(0.0, total_seconds - sum(self.seconds.values())), 3)
        return out
