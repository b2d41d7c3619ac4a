"""rest_commit: logical commit latency on a REST catalog vs the PostgreSQL SQL catalog.

Two real catalogs, started by the benchmark on this machine, local ``file:`` warehouses:

- ``rest``: Apache Iceberg's reference REST server (``RESTCatalogServer``, Maven Central
  jars, JDBC catalog on SQLite behind it); omni's REST protocol (a pointer table's
  ``main`` ref is the compare-and-swap, the view is replaced afterwards as derived state,
  see :mod:`catalog_ext.rest_commit`);
- ``postgres``: pyiceberg's SQL catalog on a throwaway PostgreSQL 15 (``tests/services/
  postgres.py``); the view swap is the compare-and-swap.

Each trial creates a fresh logical table and runs ``--submits`` small submits (5 JSON
records each) in one process (``single``), then the same number split over 3 processes
started together (``concurrent``: every commit races the two other writers). The timed
unit is :meth:`catalog_ext.store.FamilyStore.commit` - the logical commit, lost races and
their re-application included; the whole submit (reading, writing data files, staging)
is recorded too. Backends alternate (A B, B A, ...) and every trial starts a fresh table.

Headline: REST / PostgreSQL ratios of the P50 and P95 commit latency, single and
concurrent.

    python -m benchmarks.rest_commit [--quick] [--repeats N] [--submits N]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common as C

WRITERS = 3
WORKER = r"""
import json, sys, time
from catalog_ext.store import FamilyStore
from omni_iceberg.api import Omni

table, src_dir, who, n, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
commits = []
original = FamilyStore.commit

def timed(self, *a, **k):
    t = time.perf_counter()
    try:
        return original(self, *a, **k)
    finally:
        commits.append(time.perf_counter() - t)

FamilyStore.commit = timed
omni = Omni()
barrier = src_dir + "/go"
import os
while not os.path.exists(barrier):
    time.sleep(0.005)
submits = []
for i in range(n):
    t = time.perf_counter()
    omni.submit(table, [f"{src_dir}/doc-{i % 20}.jsonl"], batch=f"{who}-{i}", progress=False)
    submits.append(time.perf_counter() - t)
json.dump({"commit_s": commits, "submit_s": submits}, open(out, "w"))
"""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _sources(folder: Path) -> None:
    for i in range(20):  # distinct small files; batches differ, so every submit commits
        rows = [json.dumps({"raw_data": f"<p>doc {i}-{j}: commit latency probe</p>"}) for j in range(5)]
        (folder / f"doc-{i}.jsonl").write_text("\n".join(rows) + "\n")


def _run(env: dict[str, str], table: str, folder: Path, writers: int, submits: int) -> dict[str, list[float]]:
    """``submits`` submits split over ``writers`` processes started together; their latencies."""
    from tests.faults import REPO_ROOT

    (folder / "go").unlink(missing_ok=True)
    procs, outs = [], []
    share = [submits // writers + (1 if w < submits % writers else 0) for w in range(writers)]
    for w in range(writers):
        out = folder / f"w{w}.json"
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, table, str(folder), f"w{w}", str(share[w]),
                                       str(out)], cwd=REPO_ROOT, env=env, stderr=subprocess.PIPE, text=True))
    time.sleep(3.0)  # let the writers import (a few seconds on 2 cores); the barrier starts them together
    (folder / "go").write_text("")
    for p in procs:
        _, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"writer failed: {err[-3000:]}")
    merged: dict[str, list[float]] = {"commit_s": [], "submit_s": []}
    for out in outs:
        doc = json.loads(out.read_text())
        for key in merged:
            merged[key] += doc[key]
    return merged


def main(argv: list[str] | None = None) -> None:
    args = C.parse_args("rest_commit", __doc__, lambda p: p.add_argument(
        "--submits", type=int, default=None, help="small submits per trial (default 100; --quick 20)"), argv)
    started = time.perf_counter()
    submits = args.submits or (20 if args.quick else 100)
    repeats = args.repeats or (1 if args.quick else 2)
    from tests.services.postgres import PostgresServer
    from tests.services.rest_catalog import RestCatalogServer

    scratch = C.scratch_dir("rest_commit")
    trials: list[dict] = []
    samples: dict[tuple[str, str], dict[str, list[float]]] = {}
    with RestCatalogServer() as rest, PostgresServer() as pg:
        catalogs = {"rest": (rest.uri, rest.warehouse),
                    "postgres": (pg.sqlalchemy_uri, (scratch / "pg-warehouse").as_uri())}
        from omni_iceberg.api import Omni

        for r in range(repeats):
            order = ["rest", "postgres"] if r % 2 == 0 else ["postgres", "rest"]
            for backend in order:
                uri, warehouse = catalogs[backend]
                for mode, writers in (("single", 1), ("concurrent", WRITERS)):
                    table = f"t{r}_{mode}"
                    home = scratch / f"home-{backend}"
                    folder = scratch / f"{backend}-{r}-{mode}"
                    folder.mkdir(parents=True)
                    _sources(folder)
                    omni = Omni(catalog=uri, warehouse=warehouse, home=home)
                    omni.create_table(table)
                    env = dict(os.environ, OMNI_CATALOG=uri, OMNI_WAREHOUSE=warehouse, OMNI_HOME=str(home),
                               PYTHONPATH=str(C.ROOT))
                    C.log(f"repeat {r + 1}/{repeats}: {backend} {mode} ({submits} submits, {writers} writer(s))")
                    got = _run(env, table, folder, writers, submits)
                    versions = [v.version for v in Omni(catalog=uri, warehouse=warehouse, home=home).log(table)]
                    if versions != list(range(1, submits + 2)):
                        raise RuntimeError(f"{backend} {mode}: versions {versions[:5]}... != 1..{submits + 1}")
                    stats = {"backend": backend, "mode": mode, "repeat": r, "commits": len(got["commit_s"]),
                             "commit_p50_ms": 1000 * _percentile(got["commit_s"], 0.5),
                             "commit_p95_ms": 1000 * _percentile(got["commit_s"], 0.95),
                             "submit_p50_ms": 1000 * _percentile(got["submit_s"], 0.5),
                             "submit_p95_ms": 1000 * _percentile(got["submit_s"], 0.95),
                             "commit_ms": [round(1000 * x, 2) for x in got["commit_s"]]}
                    trials.append(stats)
                    pooled = samples.setdefault((backend, mode), {"commit_s": [], "submit_s": []})
                    for key in pooled:
                        pooled[key] += got[key]
                    C.log(f"  commit P50 {stats['commit_p50_ms']:.0f} ms, P95 {stats['commit_p95_ms']:.0f} ms; "
                          f"submit P50 {stats['submit_p50_ms']:.0f} ms")
    C.remove(scratch)

    def pct(backend: str, mode: str, key: str, q: float) -> float:
        return 1000 * _percentile(samples[(backend, mode)][key], q)

    heads, rows = [], []
    for mode in ("single", "concurrent"):
        for q, label in ((0.5, "P50"), (0.95, "P95")):
            ratio = pct("rest", mode, "commit_s", q) / pct("postgres", mode, "commit_s", q)
            heads.append(C.headline(f"REST / PostgreSQL commit latency {label}, {mode}", ratio, "x",
                                    note=f"{pct('rest', mode, 'commit_s', q):.0f} ms vs "
                                         f"{pct('postgres', mode, 'commit_s', q):.0f} ms"))
        for backend in ("rest", "postgres"):
            rows.append([backend, mode, len(samples[(backend, mode)]["commit_s"]),
                         f"{pct(backend, mode, 'commit_s', 0.5):.0f}", f"{pct(backend, mode, 'commit_s', 0.95):.0f}",
                         f"{pct(backend, mode, 'submit_s', 0.5):.0f}", f"{pct(backend, mode, 'submit_s', 0.95):.0f}"])
    notes = [
        (f"{submits} small submits (5 records each) per trial and mode; {repeats} repeat(s), backends alternating; "
         f"'concurrent' splits them over {WRITERS} processes released together, so commits race."),
        ("Commit latency = FamilyStore.commit, lost races and their re-application included: on REST a load of the "
         "pointer table, the family document write, one table commit guarded by assert-ref-snapshot-id, then the "
         "derived view replace (GET + POST); on PostgreSQL a view-metadata write and one UPDATE ... WHERE "
         "metadata_location = old."),
        ("Both servers run on this machine (2 shared cores), so the figures are protocol costs, not network "
         "latency; the REST server keeps its own catalog in SQLite through Iceberg's JdbcCatalog."),
        "Percentiles pool every commit of every repeat; per-trial values are in 'trials'.",
    ]
    payload = {
        "title": "Logical commit latency: REST catalog vs PostgreSQL SQL catalog",
        "params": {"submits": submits, "repeats": repeats, "writers": WRITERS},
        "headline": heads,
        "table": {"columns": ["catalog", "mode", "commits", "commit P50 ms", "commit P95 ms", "submit P50 ms",
                              "submit P95 ms"], "rows": rows},
        "notes": notes,
        "trials": trials,
    }
    C.write_result(args, payload, started)

    plt, fig, (a1, a2) = C.figure(2, width=11)
    for ax, mode in ((a1, "single"), (a2, "concurrent")):
        ax.boxplot([[1000 * x for x in samples[(b, mode)]["commit_s"]] for b in ("rest", "postgres")],
                   tick_labels=["REST", "PostgreSQL"], showfliers=True)
        ax.set_ylabel("logical commit, ms")
        ax.set_title(f"{mode} ({1 if mode == 'single' else WRITERS} writer(s))", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    C.save_plot(plt, fig, args, f"rest_commit: {submits} submits per trial")


if __name__ == "__main__":
    main()
