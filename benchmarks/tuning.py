"""tuning: first-submit success of 10 backfills, one of them memory-hungry, with adaptive tuning vs without.

Set-up: a fresh embedded catalog per variant; ``--records`` short records in one batch;
ten features registered. Nine are plain (lengths, counts, a hash); ``tn_hungry`` needs
memory in proportion to its batch (128 rows by its definition) and, past 32 rows, is killed with SIGKILL - what the
kernel's out-of-memory killer does to a worker that outgrows its memory. Each feature is
then backfilled by its own command (``isolation="process"``), as a newcomer submits
them one by one.

Then ``--later`` more batches arrive (a daily pipeline) and the ten features are
backfilled again for each, command by command.

Variants:

- ``tuned``: the product as is - a worker killed for memory makes the local engine rerun
  the plan with batches and slices halved (finished units resume), and later runs start
  from what ``omni_sys.runs`` says the feature needed (``backfill/tuning.py``);
- ``rerun-only``: the automatic rerun, no history (``OMNI_TUNING=off``): every later batch
  of the hungry feature is killed again before it fits;
- ``untuned``: neither (``MAX_MEMORY_SHRINK = 1``, ``OMNI_TUNING=off``): the failure is
  the user's to fix.

Headlines: first-submit success rate of the first round (backfill commands that
succeeded the first time), tuned vs untuned, also as ``omni runs --stats`` computes it;
and the workers killed for memory on the later batches, tuned vs rerun-only (each kill
is a lost attempt). This benchmark counts outcomes; its seconds are reported, not compared.

    python -m benchmarks.tuning [--quick] [--records N] [--later K]
"""

from __future__ import annotations

import json
import time
from typing import Any

from benchmarks import common as C
from omni_iceberg.features import feature


@feature(outputs={"tn_hungry": "long"}, inputs=["RawData.raw_data"], form="batch", batch_size=128)
def tn_hungry(raw_data):
    import os
    import signal

    if len(raw_data) > 32:  # its memory grows with the batch: past 32 rows the OOM killer ends it
        os.kill(os.getpid(), signal.SIGKILL)
    return [len(v) for v in raw_data.to_pylist()]


def _plain(i: int):
    def fn(raw_data):
        return len(raw_data) * (i + 1) + raw_data.count(" ")

    fn.__name__ = f"tn_plain_{i}"
    return feature(outputs={f"tn_plain_{i}": "long"}, inputs=["RawData.raw_data"], name=f"tn_plain_{i}")(fn)


PLAIN = [_plain(i) for i in range(9)]


def _submit(omni: Any, name: str, batch: str, records: int) -> None:
    src = C.scratch_dir("tuning-input") / f"{name}-{batch}.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"{batch} record {i} " + "word " * (i % 13)}) + "\n"
                           for i in range(records)))
    omni.submit("web", [str(src)], batch=batch, progress=False)


def _round(omni: Any, name: str, names: list[str]) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    for fname in names:
        try:
            report = omni.backfill("web", [fname], isolation="process", progress=False)
            reruns = sum("rerun with batch sizes" in t for t in report.tuning)
            outcomes[fname] = "succeeded" + (f" after {reruns} automatic rerun(s)" if reruns else "")
        except Exception as e:  # noqa: BLE001 - a failed submit is the outcome measured
            outcomes[fname] = f"failed: {type(e).__name__}"
        C.log(f"{name}: {fname}: {outcomes[fname]}")
    return outcomes


def variant(name: str, records: int, later: int) -> dict[str, Any]:
    import os

    from omni_iceberg.backfill import run

    omni = C.fresh_omni(f"tuning-{name}")
    omni.create_table("web")
    _submit(omni, name, "b", records)
    features = PLAIN[:5] + [tn_hungry] + PLAIN[5:]
    names = [f"tn_plain_{i}" for i in range(5)] + ["tn_hungry"] + [f"tn_plain_{i}" for i in range(5, 9)]
    omni.register_features("web", features)
    saved, saved_env = run.MAX_MEMORY_SHRINK, os.environ.get("OMNI_TUNING")
    run.MAX_MEMORY_SHRINK = 1 if name == "untuned" else saved
    if name != "tuned":
        os.environ["OMNI_TUNING"] = "off"
    started = time.perf_counter()
    try:
        outcomes = _round(omni, name, names)
        first_stats = omni.runs("web", stats=True)["overall"]
        later_started = time.perf_counter()
        later_outcomes = []
        for k in range(later):
            _submit(omni, name, f"day{k + 1}", records)
            later_outcomes.append(_round(omni, name, names))
        later_s = time.perf_counter() - later_started
    finally:
        run.MAX_MEMORY_SHRINK = saved
        if saved_env is None:
            os.environ.pop("OMNI_TUNING", None)
        else:
            os.environ["OMNI_TUNING"] = saved_env
    stats = omni.runs("web", stats=True)["overall"]
    ok = sum(v.startswith("succeeded") for v in outcomes.values())
    later_ok = sum(v.startswith("succeeded") for o in later_outcomes for v in o.values())
    out = {"outcomes": outcomes, "first_submit_success": ok / len(outcomes),
           "runs_stats_first_submit_success": first_stats["first_submit_success"],
           "failures": first_stats["failures"], "automatic_reruns": first_stats["automatic_reruns"],
           "later_batches": later, "later_success": later_ok / max(1, later * len(names)),
           "later_memory_kills": stats["failures"].get("memory", 0) - first_stats["failures"].get("memory", 0),
           "later_seconds": round(later_s, 1), "seconds": round(time.perf_counter() - started, 1)}
    C.remove(omni.config.home)
    return out


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--records", type=int, default=None, help="records in the batch (default 2,000; quick 200)")
        p.add_argument("--later", type=int, default=None, help="later batches, each backfilled again (default 3; "
                       "quick 1)")

    args = C.parse_args("tuning", __doc__, options, argv)
    started = time.perf_counter()
    records = args.records or (200 if args.quick else 2_000)
    later = args.later if args.later is not None else (1 if args.quick else 3)
    results = {name: variant(name, records, later) for name in ("tuned", "rerun-only", "untuned")}
    tuned, untuned, rerun_only = results["tuned"], results["untuned"], results["rerun-only"]
    payload = {
        "title": "First-submit success of 10 backfills (one memory-hungry) with adaptive tuning vs without, then later batches",
        "records": records, "results": results,
        "headline": [
            C.headline("first-submit success (share of the 10 backfill commands), tuned",
                       tuned["first_submit_success"], "", "> 0.9", tuned["first_submit_success"] > 0.9,
                       f"untuned: {untuned['first_submit_success']:.0%}"),
            C.headline("the same as omni runs --stats computes it, tuned",
                       tuned["runs_stats_first_submit_success"], "", "", None,
                       f"untuned: {untuned['runs_stats_first_submit_success']:.0%}; automatic reruns "
                       f"{tuned['automatic_reruns']} vs {untuned['automatic_reruns']}"),
            C.headline(f"workers killed for memory on {later} later batch(es), tuned (history)",
                       tuned["later_memory_kills"], "", "0", tuned["later_memory_kills"] == 0,
                       f"rerun-only: {rerun_only['later_memory_kills']} (each a lost attempt); later batches took "
                       f"{tuned['later_seconds']} s vs {rerun_only['later_seconds']} s"),
        ],
        "table": {"columns": ["variant", "first-submit success", "automatic reruns", "failures",
                              "later batches: success", "later: memory kills", "seconds"],
                  "rows": [[k, f"{v['first_submit_success']:.0%}", v["automatic_reruns"], json.dumps(v["failures"]),
                            f"{v['later_success']:.0%}", v["later_memory_kills"], v["seconds"]]
                           for k, v in results.items()]},
    }
    C.write_result(args, payload, started)
    C.remove(C.scratch_dir("tuning-input"))


if __name__ == "__main__":
    main()
