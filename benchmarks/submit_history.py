"""submit_history: does a submit cost what it is asked to do, or what the table has accumulated?

Two logical tables in one fresh embedded catalog receive the same ``--batches`` small
batches (``--rows`` records each, default 300 x 10; two records of every batch repeat
the previous batch, so dedup has work). One table is written with the id index
(``OMNI_INDEX=lmdb``, the default), the other with ``OMNI_INDEX=off`` (dedup reads
every id already in the table: the behaviour before the index). Batches are
interleaved (on, off / off, on, alternating), so both variants see the same machine
load. Each submit is one ``Omni.submit`` call, timed whole (read, dedup, write,
index, logical commit). Every ``--maintain-every`` batches (default 25; 0 = never) both
tables get ``omni maintain`` (compaction of small files, retention keeping the last 20
versions), untimed and reported apart: what a platform team's periodic job does.

Headline: median submit time of the last 10 batches / of batches 2-11 (the first
batch of an empty table does no dedup), per variant. Target with the index: <= 1.3x.
Peak RSS of the process is reported too.

    python -m benchmarks.submit_history [--quick] [--batches N] [--rows N] [--maintain-every N]
"""

from __future__ import annotations

import json
import os
import statistics
import time

from benchmarks import common as C

VARIANTS = ("index", "no_index")
WINDOW = 10


def batch_file(path, batch: int, rows: int) -> None:
    with open(path, "w") as f:
        for i in range(rows):
            # the first two records repeat the previous batch's last two: duplicates to find
            b, j = (batch - 1, rows - 2 + i) if batch and i < 2 else (batch, i)
            f.write(json.dumps({"raw_data": f"<p>batch {b} record {j}: some short text {b * 1000 + j}</p>",
                                "url": f"https://example.org/{b}/{j}"}) + "\n")


def main(argv: list[str] | None = None) -> None:
    def options(p):
        p.add_argument("--batches", type=int, default=None, help="batches per table (default 300; quick 40)")
        p.add_argument("--rows", type=int, default=10, help="records per batch (default 10)")
        p.add_argument("--maintain-every", type=int, default=25,
                       help="run omni maintain (compaction + retention, keep 20) every N batches; 0 = never")

    args = C.parse_args("submit_history", __doc__, options, argv)
    started = time.perf_counter()
    batches = args.batches or (40 if args.quick else 300)
    omni = C.fresh_omni("submit_history")
    scratch = C.scratch_dir("submit-history-input")
    saved = os.environ.get("OMNI_INDEX")
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    duplicates: dict[str, int] = {v: 0 for v in VARIANTS}
    maintain_s: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for v in VARIANTS:
            omni.create_table(v)
        for n in range(batches):
            path = scratch / f"b{n}.jsonl"
            batch_file(path, n, args.rows)
            for v in (VARIANTS if n % 2 == 0 else VARIANTS[::-1]):
                os.environ["OMNI_INDEX"] = "lmdb" if v == "index" else "off"
                t = time.perf_counter()
                report = omni.submit(v, [str(path)], batch=f"b{n}", progress=False)
                times[v].append(time.perf_counter() - t)
                duplicates[v] += report.duplicates
                if n and v == "index":
                    assert report.dedup == "index", report
            path.unlink()
            if args.maintain_every and (n + 1) % args.maintain_every == 0:
                for v in VARIANTS:
                    os.environ["OMNI_INDEX"] = "lmdb" if v == "index" else "off"
                    t = time.perf_counter()
                    omni.maintain(v, keep_last=20, min_age_s=0, progress=False)
                    maintain_s[v].append(round(time.perf_counter() - t, 2))
            if n % 50 == 0 or n == batches - 1:
                C.log(f"batch {n}: " + ", ".join(f"{v} {times[v][-1] * 1e3:.0f} ms" for v in VARIANTS))
        assert duplicates["index"] == duplicates["no_index"] == 2 * (batches - 1), duplicates
        summary = {}
        for v in VARIANTS:
            first = statistics.median(times[v][1:1 + WINDOW])
            last = statistics.median(times[v][-WINDOW:])
            summary[v] = {"first_median_ms": round(first * 1e3, 1), "last_median_ms": round(last * 1e3, 1),
                          "last_over_first": round(last / first, 2),
                          "trials_ms": [round(x * 1e3, 1) for x in times[v]]}
        payload = {
            "batches": batches, "rows_per_batch": args.rows, "results": summary,
            "maintain_every": args.maintain_every, "maintain_seconds": maintain_s,
            "peak_rss_mib": round(C.peak_rss_mib(), 1), "load_average": C.load_average(),
            "title": f"Submit time vs history: {batches} batches of {args.rows} records, id index on vs off",
            "headline": [
                C.headline("with index: last 10 / batches 2-11 (median submit)", summary["index"]["last_over_first"],
                           "x", "<= 1.3", summary["index"]["last_over_first"] <= 1.3),
                C.headline("without index (dedup scans all ids): last 10 / batches 2-11",
                           summary["no_index"]["last_over_first"], "x"),
                C.headline("last 10 batches: no index / index (median submit)",
                           summary["no_index"]["last_median_ms"] / summary["index"]["last_median_ms"], "x"),
            ],
            "table": {"columns": ["variant", "batches 2-11 ms", "last 10 ms", "last / first"],
                      "rows": [[v, summary[v]["first_median_ms"], summary[v]["last_median_ms"],
                                summary[v]["last_over_first"]] for v in VARIANTS]},
        }
        C.write_result(args, payload, started)
        plt, fig, (ax,) = C.figure(1, width=8)
        for v in VARIANTS:
            ax.plot(range(1, batches + 1), [x * 1e3 for x in times[v]], ".", markersize=3, label=v)
        ax.set_xlabel("batch number")
        ax.set_ylabel("submit time (ms)")
        ax.legend()
        ax.grid(alpha=0.3)
        C.save_plot(plt, fig, args, payload["title"])
        for v in VARIANTS:
            s = summary[v]
            print(f"{v}: batches 2-11 {s['first_median_ms']} ms, last 10 {s['last_median_ms']} ms, "
                  f"last/first {s['last_over_first']}x")
    finally:
        if saved is None:
            os.environ.pop("OMNI_INDEX", None)
        else:
            os.environ["OMNI_INDEX"] = saved
        C.remove(C.OUT / "homes" / "submit_history")
        C.remove(scratch)


if __name__ == "__main__":
    main()
