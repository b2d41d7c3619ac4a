"""tuning: first-submit success of 10 backfills, one of them memory-hungry, with adaptive tuning vs without.

Set-up: a fresh embedded catalog per variant; ``--records`` short records in one batch;
ten features registered. Nine are plain (lengths, counts, a hash); ``tn_hungry`` needs
memory in proportion to its batch (128 rows by its definition) and, past 32 rows, is killed with SIGKILL - what the
kernel's out-of-memory killer does to a worker that outgrows its memory. Each feature is
then backfilled by its own command (``isolation="process"``), as a newcomer submits
them one by one.

Variants:

- ``tuned``: the product as is - a worker killed for memory makes the local engine rerun
  the plan with batches and slices halved (finished units resume);
- ``untuned``: the same with that rerun switched off (``MAX_MEMORY_SHRINK = 1``): the
  failure is the user's to fix.

Headline: first-submit success rate (backfill commands that succeeded the first time),
tuned vs untuned, also as ``omni runs --stats`` computes it from ``omni_sys.runs``.
This benchmark counts outcomes; its seconds are reported, not compared.

    python -m benchmarks.tuning [--quick] [--records N]
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


def variant(name: str, records: int) -> dict[str, Any]:
    from omni_iceberg.backfill import engine

    omni = C.fresh_omni(f"tuning-{name}")
    omni.create_table("web")
    src = C.scratch_dir("tuning-input") / f"{name}.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"record {i} " + "word " * (i % 13)}) + "\n"
                           for i in range(records)))
    omni.submit("web", [str(src)], batch="b", progress=False)
    features = PLAIN[:5] + [tn_hungry] + PLAIN[5:]
    names = [f"tn_plain_{i}" for i in range(5)] + ["tn_hungry"] + [f"tn_plain_{i}" for i in range(5, 9)]
    omni.register_features("web", features)
    saved = engine.MAX_MEMORY_SHRINK
    engine.MAX_MEMORY_SHRINK = saved if name == "tuned" else 1
    outcomes: dict[str, str] = {}
    started = time.perf_counter()
    try:
        for fname in names:
            try:
                report = omni.backfill("web", [fname], isolation="process", progress=False)
                outcomes[fname] = "succeeded" + (f" after {len(report.tuning)} automatic rerun(s)"
                                                 if report.tuning else "")
            except Exception as e:  # noqa: BLE001 - a failed submit is the outcome measured
                outcomes[fname] = f"failed: {type(e).__name__}"
            C.log(f"{name}: {fname}: {outcomes[fname]}")
    finally:
        engine.MAX_MEMORY_SHRINK = saved
    stats = omni.runs("web", stats=True)
    ok = sum(v.startswith("succeeded") for v in outcomes.values())
    out = {"outcomes": outcomes, "first_submit_success": ok / len(outcomes),
           "runs_stats_first_submit_success": stats["overall"]["first_submit_success"],
           "failures": stats["overall"]["failures"], "automatic_reruns": stats["overall"]["automatic_reruns"],
           "seconds": round(time.perf_counter() - started, 1)}
    C.remove(omni.config.home)
    return out


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--records", type=int, default=None, help="records in the batch (default 2,000; quick 200)")

    args = C.parse_args("tuning", __doc__, options, argv)
    started = time.perf_counter()
    records = args.records or (200 if args.quick else 2_000)
    results = {name: variant(name, records) for name in ("tuned", "untuned")}
    tuned, untuned = results["tuned"], results["untuned"]
    payload = {
        "title": "First-submit success of 10 backfills (one memory-hungry) with adaptive tuning vs without",
        "records": records, "results": results,
        "headline": [
            C.headline("first-submit success (share of the 10 backfill commands), tuned",
                       tuned["first_submit_success"], "", "> 0.9", tuned["first_submit_success"] > 0.9,
                       f"untuned: {untuned['first_submit_success']:.0%}"),
            C.headline("the same as omni runs --stats computes it, tuned",
                       tuned["runs_stats_first_submit_success"], "", "", None,
                       f"untuned: {untuned['runs_stats_first_submit_success']:.0%}; automatic reruns "
                       f"{tuned['automatic_reruns']} vs {untuned['automatic_reruns']}"),
        ],
        "table": {"columns": ["variant", "first-submit success", "automatic reruns", "failures", "seconds"],
                  "rows": [[k, f"{v['first_submit_success']:.0%}", v["automatic_reruns"], json.dumps(v["failures"]),
                            v["seconds"]] for k, v in results.items()]},
    }
    C.write_result(args, payload, started)
    C.remove(C.scratch_dir("tuning-input"))


if __name__ == "__main__":
    main()
