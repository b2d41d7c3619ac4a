"""Adaptive tuning: a backfill picks its batch sizes from its own history and the hints.

Before a run starts, :func:`choose_tuning` reads the table's past attempts in
``omni_sys.runs`` (each records the tuning it ran with) and the definitions' hints,
and decides two numbers for the run:

- ``shrink``: batch sizes and slices are divided by it. A feature version whose last
  attempt died for memory or a timeout starts where the engine's automatic rerun
  ended up (or at twice the failed attempt's shrink), instead of failing the same way
  first; a ``memory_mb`` hint larger than the memory this machine has free starts
  smaller in proportion. The local engine still halves it again if a worker is killed.
- ``slice_rows``: rows read and handed to the UDFs at a time. From the median past
  throughput of each feature version (its UDF time where the engine recorded it, and
  only from runs of at least ``MIN_RATE_ROWS`` rows: start-up swamps smaller ones), a
  slice takes about ``OMNI_TARGET_SLICE_S`` seconds (30): a feature that computes 20 rows a second gets slices of 512 rows, so a
  progress bar moves and a crash loses a slice, not an hour; fast features keep the
  full ``OMNI_SLICE_ROWS``. Never below the largest declared ``batch_size``: a model
  wants full batches.

``parallelism`` (the hint) is the minimum number of Spark tasks per unit; the local
engine runs one worker per stage and says so once in the reasons.

Every decision comes with a reason (``BackfillReport.tuning``, ``omni runs``), and
``OMNI_TUNING=off`` turns history and hints off (the engine's own memory rerun stays).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog_ext import settings

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

#: a slice should take about this long to compute (seconds)
TARGET_SLICE_S = float(settings.value("OMNI_TARGET_SLICE_S"))
MIN_SLICE_ROWS = 64
#: a run with fewer rows per feature says little about the per-row rate (start-up dominates)
MIN_RATE_ROWS = 256
#: how many of the table's latest attempts are consulted
HISTORY_ATTEMPTS = 500


@dataclass
class Tuning:
    shrink: int
    slice_rows: int
    parallelism: int = 1
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"shrink": self.shrink, "slice_rows": self.slice_rows, "parallelism": self.parallelism,
                "reasons": self.reasons}


def choose_tuning(defs: dict[str, Any], features: dict[str, Any], history: list[dict[str, Any]], *,
                  slice_rows: int, max_shrink: int, available_mb: float | None) -> Tuning:
    """The tuning for computing ``features`` (name -> planned feature with ``version``).

    ``history``: the table's attempts from ``omni_sys.runs``, oldest first.

    >>> from types import SimpleNamespace as NS
    >>> d = {"f": NS(version="v1", batch_size=16, memory_mb=None, parallelism=1)}
    >>> row = lambda status, msg, secs, shrink: {"status": status, "message": msg, "rows": 2000,
    ...     "seconds": secs, "features": "f", "versions": {"f": "v1"}, "tuning": {"shrink": shrink}}
    >>> t = choose_tuning(d, {"f": NS(version="v1")}, [row("failed", "signal 9", 1, 1), row("succeeded", "", 100, 4)],
    ...                   slice_rows=8192, max_shrink=8, available_mb=None)
    >>> t.shrink, t.slice_rows
    (4, 512)
    """
    if settings.value("OMNI_TUNING") == "off":
        return Tuning(1, slice_rows, reasons=["tuning off (OMNI_TUNING=off)"])
    shrink, reasons = 1, []
    rates: dict[str, float] = {}
    for name, planned in sorted(features.items()):
        mine = [r for r in history if r["versions"].get(name) == planned.version]
        want = _shrink_from_history(mine)
        if want > shrink:
            shrink = want
            reasons.append(f"{name}@{planned.version}: its last attempts needed batches / {want} "
                           f"(memory or timeout), so this run starts there")
        ok = [per_feature / seconds for r in mine if r["status"] == "succeeded"
              and (per_feature := r["rows"] / max(1, len(r["versions"]))) >= MIN_RATE_ROWS
              and (seconds := _compute_seconds(r)) > 0]
        if ok:
            rates[name] = statistics.median(ok)
        hint = getattr(defs.get(name), "memory_mb", None)
        if hint and available_mb:
            need = _pow2_ceil(hint / (0.8 * available_mb))
            if need > shrink:
                shrink = need
                reasons.append(f"{name}: memory_mb={hint} > 80% of the {available_mb:.0f} MB free here: "
                               f"batches / {need}")
    shrink = min(shrink, max_shrink)
    widest = max((getattr(defs.get(n), "batch_size", 1) for n in features), default=1)
    chosen = slice_rows
    if rates:
        # the stage's features run one after another on a slice: their times add up
        per_row_s = sum(1.0 / r for r in rates.values() if r > 0)
        fit = _pow2_floor(TARGET_SLICE_S / per_row_s) if per_row_s > 0 else slice_rows
        chosen = max(MIN_SLICE_ROWS, min(slice_rows, fit), min(widest, slice_rows))
        if chosen < slice_rows:
            slow = min(rates, key=rates.get)
            reasons.append(f"slices of {chosen} rows (~{TARGET_SLICE_S:.0f} s each at the past "
                           f"{rates[slow]:.1f} rows/s of {slow})")
    parallelism = max((getattr(defs.get(n), "parallelism", 1) or 1 for n in features), default=1)
    return Tuning(shrink, chosen, parallelism, reasons)


def _compute_seconds(attempt: dict[str, Any]) -> float:
    """The UDFs' own time when the attempt recorded it (the local engine), else its wall time."""
    compute = (attempt.get("tuning") or {}).get("compute_s")
    return float(compute) if compute else float(attempt["seconds"])


def _shrink_from_history(attempts: list[dict[str, Any]]) -> int:
    """The shrink the latest attempts of one feature version call for (1: none)."""
    from omni_iceberg.backfill.run_stats import failure_cause  # run_stats imports the engine, which imports us

    if not attempts:
        return 1
    last = attempts[-1]
    if last["status"] == "succeeded":
        return int((last.get("tuning") or {}).get("shrink", 1))
    if failure_cause(last) in ("memory", "timeout"):
        return 2 * int((last.get("tuning") or {}).get("shrink", 1))
    return 1


def history_of(ctx: OmniContext, logical_table: str) -> list[dict[str, Any]]:
    """The table's latest attempts, each with its feature versions, tuning and duration."""
    from omni_iceberg.backfill.run_stats import runs_of

    out = []
    for r in runs_of(ctx, logical_table)[-HISTORY_ATTEMPTS:]:
        try:
            plan = json.loads(r["plan"] or "{}")
        except ValueError:
            plan = {}
        out.append({**r, "versions": {k: v.get("version") for k, v in (plan.get("features") or {}).items()
                                      if v.get("batches")},
                    "tuning": plan.get("tuning") or {},
                    "seconds": (r["finished_at"] - r["started_at"]).total_seconds()})
    return out


def available_memory_mb() -> float | None:
    """MemAvailable of this machine (Linux), None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def tune_run(ctx: OmniContext, state: Any, plan: Any, defs: dict[str, Any], *, slice_rows: int,
             max_shrink: int) -> Tuning:
    """:func:`choose_tuning` for a planned run, from the table's history (never fails the run)."""
    try:
        history = history_of(ctx, state.table.identifier)
    except Exception as e:  # noqa: BLE001 - a missing or unreadable runs table means no history
        history = []
        reason = f"no run history read ({type(e).__name__})"
    else:
        reason = ""
    computed = {n: f for n, f in plan.features.items() if f.batches}
    tuning = choose_tuning(defs, computed, history, slice_rows=slice_rows, max_shrink=max_shrink,
                           available_mb=available_memory_mb())
    if reason:
        tuning.reasons.append(reason)
    return tuning


def _pow2_floor(x: float) -> int:
    n = 1
    while n * 2 <= x:
        n *= 2
    return n


def _pow2_ceil(x: float) -> int:
    n = 1
    while n < x:
        n *= 2
    return n
