"""Adaptive tuning from the run history and the definitions' hints (omni_iceberg/backfill/tuning.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

from omni_iceberg.api import Omni
from omni_iceberg.backfill.tuning import choose_tuning
from tests import feature_udfs as U


def _def(batch_size=64, memory_mb=None, parallelism=1, version="v1"):
    return NS(version=version, batch_size=batch_size, memory_mb=memory_mb, parallelism=parallelism)


def _attempt(status, *, versions, rows=0, seconds=1.0, shrink=1, message=""):
    return {"status": status, "message": message, "rows": rows, "seconds": seconds, "versions": versions,
            "tuning": {"shrink": shrink}}


def _choose(defs, history, available_mb=None):
    return choose_tuning(defs, {n: NS(version=d.version) for n, d in defs.items()}, history,
                         slice_rows=8192, max_shrink=8, available_mb=available_mb)


def test_no_history_and_no_hints_change_nothing():
    t = _choose({"f": _def()}, [])
    assert (t.shrink, t.slice_rows, t.parallelism, t.reasons) == (1, 8192, 1, [])


def test_a_memory_or_timeout_failure_starts_the_next_run_smaller():
    for message in ("worker died with signal 9 while computing", "TimeoutError: the UDF timed out"):
        t = _choose({"f": _def()}, [_attempt("failed", versions={"f": "v1"}, shrink=2, message=message)])
        assert t.shrink == 4 and "f@v1" in t.reasons[0]
    # where an automatic rerun succeeded, the next run starts at its shrink; another version starts fresh
    history = [_attempt("failed", versions={"f": "v1"}, message="signal 9"),
               _attempt("succeeded", versions={"f": "v1"}, rows=100, seconds=0.5, shrink=4)]
    assert _choose({"f": _def()}, history).shrink == 4
    assert _choose({"f": _def(version="v2")}, history).shrink == 1
    # an error budget failure is not about size
    assert _choose({"f": _def()}, [_attempt("failed", versions={"f": "v1"},
                                            message="ErrorBudgetExceededError: 30%")]).shrink == 1


def test_past_throughput_sizes_slices_but_never_below_a_batch():
    slow = [_attempt("succeeded", versions={"f": "v1", "g": "v1"}, rows=2000, seconds=100.0)]  # 10 rows/s each
    t = _choose({"f": _def(batch_size=16), "g": _def(batch_size=16)}, slow)
    # two features of 10 rows/s on one slice: 0.2 s a row, ~30 s -> 150 -> 128 rows
    assert t.slice_rows == 128 and "slices of 128 rows" in t.reasons[-1]
    assert _choose({"f": _def(batch_size=512), "g": _def(batch_size=16)}, slow).slice_rows == 512
    fast = [_attempt("succeeded", versions={"f": "v1"}, rows=10**6, seconds=1.0)]
    assert _choose({"f": _def()}, fast).slice_rows == 8192
    # a tiny run (start-up dominated) says nothing about the rate; the UDF time, where recorded, wins
    tiny = _attempt("succeeded", versions={"f": "v1"}, rows=40, seconds=2.0)
    assert _choose({"f": _def()}, [tiny]).slice_rows == 8192
    timed = _attempt("succeeded", versions={"f": "v1"}, rows=1000, seconds=1000.0)
    timed["tuning"]["compute_s"] = 1.0
    assert _choose({"f": _def()}, [timed]).slice_rows == 8192


def test_memory_and_parallelism_hints():
    t = _choose({"f": _def(memory_mb=4000, parallelism=6)}, [], available_mb=1000)
    assert t.shrink == 8 and "memory_mb=4000" in t.reasons[0] and t.parallelism == 6
    assert _choose({"f": _def(memory_mb=500)}, [], available_mb=1000).shrink == 1


def test_tuning_off(monkeypatch):
    monkeypatch.setenv("OMNI_TUNING", "off")
    t = _choose({"f": _def()}, [_attempt("failed", versions={"f": "v1"}, message="signal 9")])
    assert t.shrink == 1 and "off" in t.reasons[0]


def test_the_next_run_of_a_memory_hungry_feature_does_not_fail_first(tmp_path):
    o = Omni(home=tmp_path / "h")
    o.create_table("web")
    for batch in ("a", "b"):
        src = tmp_path / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"{batch} record {i}"}) + "\n" for i in range(40)))
        o.submit("web", [str(src)], batch=batch)
        if batch == "a":
            o.register_features("web", [U.t_hungry])
            first = o.backfill("web", ["t_hungry"], isolation="process")
            assert first.status == "succeeded" and "divided by 4" in first.tuning[-1]  # killed twice, then fit
    second = o.backfill("web", ["t_hungry"], isolation="process")  # the new batch
    assert second.status == "succeeded" and second.rows == 40
    assert len(second.tuning) == 1 and "batches / 4" in second.tuning[0]  # started there: no kill, no rerun
    attempts = o.runs("web")
    assert [a["status"] for a in attempts] == ["failed", "failed", "succeeded", "succeeded"]
    assert json.loads(attempts[-1]["plan"])["tuning"]["shrink"] == 4
    assert o.runs("web", stats=True)["overall"]["first_submit_success"] == 1.0


def test_the_module_example_runs():
    import doctest

    from omni_iceberg.backfill import tuning

    result = doctest.testmod(tuning)
    assert result.attempted > 0 and result.failed == 0
