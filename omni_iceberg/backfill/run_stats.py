"""``omni runs``: a table's backfill runs from ``omni_sys.runs``, and what they say about tuning.

Every attempt of a run writes one row (a run's id is a hash of its plan, so rerunning a
command after a failure is another attempt of the same run). Attempts are numbered per
run from 1 (:func:`next_attempt`); the number is kept in the row's ``plan`` JSON under
:data:`ATTEMPT_KEY` (the table has no column for it, and existing catalogs keep their
schema), with the attempt that computed each unit whose work stands (:data:`UNITS_KEY`),
and in every ``omni_sys.errors`` row the attempt wrote, so ``omni errors`` can show each
unit's current records instead of every attempt's (:func:`shown_error_attempts`). A row's ``rows`` and
``errors`` count what that attempt computed itself: units resumed from an earlier
attempt's checkpoints are not counted again, and a failed attempt counts the unit it
failed in. ``--stats`` answers, per feature set and overall:

- **first-submit success**: the share of runs whose first attempt succeeded - the figure
  the paper tracks for newcomers (~60% -> >90% with adaptive tuning). An attempt the
  engine reran by itself (a worker killed for memory, rerun with smaller batches) is
  part of the same submit: the user asked once;
- attempts, failures by cause (memory, timeout, error budget, definition, null inputs, other), automatic
  reruns, and the median throughput (rows per second) of succeeded attempts.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

#: the message of a failed run the engine reran by itself starts with this (``omni runs --stats``
#: counts those attempts apart); written by :class:`omni_iceberg.backfill.run.BackfillRun`
RERUN_MARK = "[rerun with smaller batches] "


#: key of the attempt number in the ``plan`` JSON of an ``omni_sys.runs`` row
ATTEMPT_KEY = "run_attempt"
#: key of ``{"feature/batch": attempt that computed it}`` in that JSON: the units whose work
#: stands after the attempt (none for an attempt that failed and dropped its work)
UNITS_KEY = "units"


def recorded_attempt(row: dict[str, Any]) -> int | None:
    """The attempt number a runs row recorded, or None for a row written before attempts were numbered."""
    import json

    try:
        plan = json.loads(row["plan"] or "{}")
    except ValueError:
        return None
    value = plan.get(ATTEMPT_KEY) if isinstance(plan, dict) else None
    return value if isinstance(value, int) else None


def runs_of(ctx: OmniContext, logical_table: str) -> list[dict[str, Any]]:
    """Every attempt of every backfill run of ``logical_table``, oldest first, each with its ``attempt``.

    Rows from before attempts were recorded are numbered by their place among their run's rows.
    """
    from catalog_ext import system_tables

    rows = system_tables.read_rows(ctx.catalog, system_tables.RUNS,
                                   f"logical_table == '{logical_table}'").to_pylist()
    rows.sort(key=lambda r: (r["started_at"], r["finished_at"]))
    seen: dict[str, int] = defaultdict(int)
    for r in rows:
        seen[r["run_id"]] += 1
        r["attempt"] = recorded_attempt(r) or seen[r["run_id"]]
    return rows


def next_attempt(catalog: Any, logical_table: str, run_id: str) -> int:
    """The number of the attempt of ``run_id`` about to start: one past every attempt seen so far.

    An attempt killed before it wrote its runs row may still have written error rows,
    so those count too: its number is never given to the next attempt.
    """
    from catalog_ext import system_tables

    where = f"logical_table == '{logical_table}' and run_id == '{run_id}'"
    runs = system_tables.read_rows(catalog, system_tables.RUNS, where).select(["plan"]).to_pylist()
    errors = system_tables.read_rows(catalog, system_tables.ERRORS, where).column("attempt").to_pylist()
    seen = [recorded_attempt(r) or 0 for r in runs] + [len(runs)] + errors
    return max(seen, default=0) + 1


def shown_error_attempts(runs: list[dict[str, Any]], errors: list[tuple[str, str, int]]
                         ) -> dict[tuple[str, str], int]:
    """(run id, ``feature/batch``) -> the attempt whose error rows stand for that unit.

    ``errors``: (run id, unit, attempt) of error rows. A unit's current attempt is, in order:
    an attempt newer than every attempt with a runs row (it is running, or was killed before
    it wrote one) that recorded errors for it; else the attempt that computed it as the
    latest runs row mapping it says (:data:`UNITS_KEY`; a unit a rerun resumed keeps the
    attempt that computed it); else the latest attempt that recorded errors for it (every
    attempt that ran it failed). Runs rows from before attempts were recorded are left out:
    their errors were all written as attempt 1, and they stay shown.
    """
    import json

    latest: dict[str, int] = {}
    mapped: dict[tuple[str, str], tuple[int, int]] = {}  # unit -> (attempt of the runs row, attempt computing it)
    for r in runs:
        n = recorded_attempt(r)
        if n is None:
            continue
        latest[r["run_id"]] = max(latest.get(r["run_id"], 0), n)
        for unit, computed in (json.loads(r["plan"]).get(UNITS_KEY) or {}).items():
            key = (r["run_id"], unit)
            if computed and (key not in mapped or mapped[key][0] < n):
                mapped[key] = (n, computed)
    by_unit: dict[tuple[str, str], list[int]] = defaultdict(list)
    for run_id, unit, n in errors:
        by_unit[(run_id, unit)].append(n)
    shown = {}
    for key, attempts in by_unit.items():
        newer = [n for n in attempts if n > latest.get(key[0], 0)]
        shown[key] = max(newer) if newer else mapped[key][1] if key in mapped else max(attempts)
    return shown


def failure_cause(row: dict[str, Any]) -> str:
    """succeeded, memory, timeout, error budget, definition, null inputs or other (from the attempt's message)."""
    message = row["message"] or ""
    if row["status"] == "succeeded":
        return "succeeded"
    if "signal 9" in message or "MemoryError" in message:
        return "memory"
    if "timed out" in message or "TimeoutError" in message or "Timeout" in message:
        return "timeout"
    if "ErrorBudgetExceededError" in message:
        return "error budget"
    if "FeatureDefinitionError" in message or "MissingProducerError" in message:
        return "definition"
    if "NullInputsError" in message:
        return "null inputs"
    return "other"


def run_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of the module docstring, per feature set (``features``) and overall."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["features"]].append(r)

    def figures(attempts: list[dict[str, Any]]) -> dict[str, Any]:
        by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for a in attempts:
            by_run[a["run_id"]].append(a)
        first_ok = 0
        for tries in by_run.values():
            # the user's first submit: attempts up to the first one the engine did not rerun itself
            first = next((i for i, a in enumerate(tries) if not (a["message"] or "").startswith(RERUN_MARK)),
                         len(tries) - 1)
            first_ok += tries[first]["status"] == "succeeded"
        causes: dict[str, int] = defaultdict(int)
        for a in attempts:
            if a["status"] != "succeeded":
                causes[failure_cause(a)] += 1
        rates = [a["rows"] / s for a in attempts if a["status"] == "succeeded"
                 and (s := (a["finished_at"] - a["started_at"]).total_seconds()) > 0 and a["rows"]]
        return {"runs": len(by_run), "attempts": len(attempts),
                "first_submit_success": round(first_ok / len(by_run), 4) if by_run else None,
                "automatic_reruns": sum((a["message"] or "").startswith(RERUN_MARK) for a in attempts),
                "failures": dict(causes),
                "median_rows_per_s": round(statistics.median(rates), 1) if rates else None}

    return {"overall": figures(rows), "by_features": {k: figures(v) for k, v in sorted(groups.items())}}


def describe_stats(logical_table: str, stats: dict[str, Any]) -> str:
    def line(label: str, f: dict[str, Any]) -> str:
        rate = "-" if f["first_submit_success"] is None else f"{f['first_submit_success']:.0%}"
        fails = ", ".join(f"{k} {v}" for k, v in f["failures"].items()) or "none"
        speed = "-" if f["median_rows_per_s"] is None else f"{f['median_rows_per_s']:,.0f} rows/s"
        return (f"{label}: {f['runs']} run(s), {f['attempts']} attempt(s), first-submit success {rate}, "
                f"automatic reruns {f['automatic_reruns']}, failures: {fails}, median {speed}")

    lines = [line(f"{logical_table} (all backfills)", stats["overall"])]
    lines += ["  " + line(features, f) for features, f in stats["by_features"].items()]
    return "\n".join(lines)
