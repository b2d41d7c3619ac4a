"""bounded_memory: peak memory of every local operation of #37 item 2 at two table sizes.

Two inputs, each at a smaller and a larger size (10x apart by default):

- ``short``: synthetic JSONL records of ~180 bytes (``benchmarks.ingest.short_jsonl``),
  1M and 10M records;
- ``html``: distinct real HTML pages (the Python and Django documentation, every round's
  bodies made distinct: ``common.distinct_docs_warc``), 20k and 200k pages (~65 KB a
  page on average).

Per input and size one table is built and every operation then runs against it, each in
a fresh child process (peak RSS = the child's ``ru_maxrss`` from ``wait4``), in an order
where each leaves the table as the next needs it:

1. ``submit``: the ingest that builds the table (in-batch dedup and the id index on);
2. ``backfill``: the local engine computing two cheap features (two feature tables);
3. ``export``: id, both features and the raw text to Parquet;
4. ``get``: ``omni get`` of 10,000 ids through the id index;
5. ``index_rebuild``: ``omni index rebuild --fresh``;
6. ``hot_sync``: both features made hot (embedded ClickHouse) and synced;
7. ``materialize``: both features and the raw text pre-joined into one table;
8. ``regroup``: the two feature tables merged into a column group.

Each child also reports its RSS right after its imports and the table's opening
(``rss_start_mib``): the part of the peak no operation can avoid.

Headline per operation: peak RSS at the larger size / at the smaller, target <= 1.2x
(fixed before measuring: memory follows ``OMNI_MEMORY_LIMIT_MB``, not the table).
Operations other engineers are still changing are measured as they are at the commit
run (``git`` in the result).

    python -m benchmarks.bounded_memory [--quick] [--short 1000000,10000000] [--pages 20000,200000]

``--keep DIR`` builds each table once and reuses it: the homes stay under ``DIR/<label>``
and each operation's result is stored in ``DIR/<label>.json`` as it completes (with the
commit it ran on); a later run with the same ``--keep`` skips operations already measured
there (``--redo`` names those to measure again), so the sizes can be run one at a time
(``--pages ''`` skips an input) and the last run writes the headlines from all of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common as C

CHILD_FLAG = "--child"
OPERATIONS = ("submit", "backfill", "export", "get", "index_rebuild", "hot_sync", "materialize", "regroup")
FEATURES = ("bm_chars", "bm_words")
GET_IDS = 10_000
TARGET = 1.2


from omni_iceberg.features import feature  # noqa: E402 - after common, which sets OMNI_CACHE


@feature(outputs={"bm_chars": "long"}, inputs=["RawData.raw_data"], version="1")
def bm_chars(raw_data):
    return len(raw_data)


@feature(outputs={"bm_words": "long"}, inputs=["RawData.raw_data"], version="1")
def bm_words(raw_data):
    return raw_data.count(" ") + 1


def _features():
    return [bm_chars, bm_words]


# --------------------------------------------------------------------------- children


def _child(op: str, home: str, source: str) -> dict:
    """Runs in a fresh interpreter: one operation on the table under ``home``; prints one JSON line."""
    from catalog_ext.config import OmniConfig
    from omni_iceberg.api import Omni

    home_path = Path(home)
    os.environ["OMNI_HOT"] = f"chdb://{home_path / 'hot'}"
    omni = Omni(OmniConfig.resolve(catalog=f"sqlite:///{home_path / 'catalog.db'}",
                                   warehouse=str(home_path / "warehouse"), home=str(home_path)))
    out: dict = {"op": op, "rss_start_mib": round(C.peak_rss_mib(), 1)}
    started = time.perf_counter()
    if op == "submit":
        omni.create_table("web")
        report = omni.submit("web", [source], batch="b1", progress=False)
        out.update(rows=report.written, duplicates=report.duplicates)
    elif op == "backfill":
        omni.register_features("web", _features())
        omni.backfill("web", list(FEATURES), isolation="inline", progress=False)
    elif op == "export":
        r = omni.export("web", str(home_path / "export"), columns=["_ai_unique_id_", *FEATURES, "RawData.raw_data"],
                        progress=False)
        out.update(rows=r.rows, files=len(r.manifest["files"]))
    elif op == "get":
        ids = json.loads((home_path / "ids.json").read_text())
        rows = omni.get("web", ids, columns=list(FEATURES))
        out.update(rows=rows.num_rows if hasattr(rows, "num_rows") else len(rows))
    elif op == "index_rebuild":
        r = omni.rebuild_index("web", fresh=True, progress=False)
        out.update(rows=r.rows, files=r.files)
    elif op == "hot_sync":
        r = omni.set_hot_columns("web", list(FEATURES), progress=False)
        out.update(rows=r.get("rows_loaded"))
    elif op == "materialize":
        r = omni.materialize("web", [*FEATURES, "RawData.raw_data"], progress=False)
        out.update(action=str(r.get("action", "")) if isinstance(r, dict) else "")
    elif op == "regroup":
        r = omni.regroup("web", progress=False)
        out.update(groups=len(r.get("groups", [])) if isinstance(r, dict) else None)
    else:
        raise SystemExit(f"unknown operation {op}")
    out["seconds"] = round(time.perf_counter() - started, 2)
    out["peak_self_mib"] = round(C.peak_rss_mib(), 1)
    if op == "submit":  # after the peak is read: ids for the get child, from a few data files
        _write_ids(omni, home_path)
    return out


def _write_ids(omni, home: Path) -> None:
    import pyarrow.parquet as pq

    state = omni.store.load("aidata", "web")
    table = omni.catalog.load_table(state.base_table.identifier)
    ids: list[str] = []
    for task in table.scan().plan_files():
        ids += pq.read_table(task.file.file_path.removeprefix("file://"), columns=["_ai_unique_id_"]).column(0) \
            .to_pylist()[:GET_IDS // 8]
        if len(ids) >= GET_IDS:
            break
    (home / "ids.json").write_text(json.dumps(ids[:GET_IDS]))


def _anon_file_kib(pid: int) -> tuple[int, int]:
    """The child's anonymous and file-backed resident memory now (``RssAnon``, ``RssFile``),
    zeros once it is gone.

    ``ru_maxrss`` also counts file-backed pages a process touched (the id index's LMDB map
    and segments, memory-mapped Parquet, its libraries); the kernel keeps no peak of either
    part, so both are sampled while the child runs (the file part tells a map that kept the
    index resident from memory the operation holds).
    """
    anon = file = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
                elif line.startswith("RssFile:"):
                    file = int(line.split()[1])
    except OSError:
        pass
    return anon, file


def _run_child(op: str, home: Path, source: Path, timeout: float) -> dict:
    """One operation in a fresh process; its peak RSS from the kernel's accounting of that child."""
    log_path = home / f"{op}.out"
    with open(log_path, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bounded_memory", CHILD_FLAG, op, str(home),
                                 str(source)], stdout=f, stderr=subprocess.STDOUT, cwd=C.ROOT,
                                env={**os.environ, "OMNI_CACHE": os.environ.get("OMNI_CACHE", str(C.ROOT / ".cache"))})
        deadline = time.time() + timeout
        peak_anon_kib = peak_file_kib = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            anon, file = _anon_file_kib(proc.pid)
            peak_anon_kib, peak_file_kib = max(peak_anon_kib, anon), max(peak_file_kib, file)
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
    text = log_path.read_text()
    result = {"op": op, "rc": proc.returncode, "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
              "peak_anon_mib": round(peak_anon_kib / 1024, 1), "peak_file_mib": round(peak_file_kib / 1024, 1)}
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        result.update(json.loads(lines[-1]))
    else:
        result["error"] = text[-2000:]
    return result


# --------------------------------------------------------------------------- parent


def _sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv=None) -> None:
    def add(p):
        p.add_argument("--short", default=None, help="short-record counts, smaller,larger (1000000,10000000)")
        p.add_argument("--pages", default=None, help="HTML page counts, smaller,larger (20000,200000)")
        p.add_argument("--ops", default=",".join(OPERATIONS), help="operations to run")
        p.add_argument("--timeout", type=float, default=3600, help="seconds one operation may take")
        p.add_argument("--keep", default=None, help="folder keeping the tables and per-operation results")
        p.add_argument("--redo", default="", help="with --keep: operations to measure again")
        p.add_argument("--assemble", action="store_true",
                       help="with --keep: run nothing, write the headlines from the stored results")

    args = C.parse_args("bounded_memory", __doc__, add, argv)
    started = time.perf_counter()
    from benchmarks.ingest import short_jsonl

    short = _sizes(args.short if args.short is not None else ("100000,1000000" if args.quick else "1000000,10000000"))
    pages = _sizes(args.pages if args.pages is not None else ("2000,20000" if args.quick else "20000,200000"))
    ops = [o for o in args.ops.split(",") if o]
    page_kib = C.docs_one_round_mib() * 1024 / len(C.doc_pages())
    inputs: dict[str, dict] = {}
    for n in short:
        inputs[f"short-{n}"] = {"kind": "short", "size": n, "path": short_jsonl(n)}
    for n in pages:
        inputs[f"html-{n}"] = {"kind": "html", "size": n,
                               "path": C.distinct_docs_warc(n * page_kib / 1024)}
    results: dict[str, dict[str, dict]] = {}
    redo = {o for o in args.redo.split(",") if o}
    for label, spec in inputs.items():
        if args.keep:  # one table per label, kept: an operation measured before is not run again
            home = Path(args.keep).resolve() / label  # absolute: the hot store's chdb:// URL needs it
            home.mkdir(parents=True, exist_ok=True)
            stored = home.parent / f"{label}.json"
            results[label] = json.loads(stored.read_text()) if stored.exists() else {}
        else:
            home = C.scratch_dir(f"bounded_memory/{label}")
            results[label] = {}
        for op in ops:
            if args.keep and results[label].get(op, {}).get("rc") == 0 and op not in redo:
                C.log(f"{label}: {op} kept from {results[label][op].get('git')}")
                continue
            if args.assemble:
                continue
            C.log(f"{label}: {op}")
            r = _run_child(op, home, spec["path"], args.timeout)
            r["git"] = C.git_facts().get("commit")
            results[label][op] = r
            C.log(f"  peak {r['peak_rss_mib']} MiB, {r.get('seconds')} s" + ("" if r["rc"] == 0 else
                                                                          f", FAILED rc={r['rc']}"))
            if args.keep:
                stored.write_text(json.dumps(results[label], indent=1))
        if not args.keep:
            C.remove(home)
    headlines = []
    for kind, sizes in (("short", short), ("html", pages)):
        if len(sizes) < 2:
            continue
        small, large = f"{kind}-{sizes[0]}", f"{kind}-{sizes[-1]}"
        for op in ops:
            a, b = results[small].get(op, {}), results[large].get(op, {})
            if not a or not b:
                headlines.append(C.headline(f"{op}, {kind}: peak RSS {sizes[-1]:,} / {sizes[0]:,}", 0.0, "x",
                                            f"<= {TARGET}", False, note="not measured at both sizes (time box)"))
                continue
            if a.get("rc") != 0 or b.get("rc") != 0:
                headlines.append(C.headline(f"{op}, {kind}: peak RSS {sizes[-1]:,} / {sizes[0]:,}", 0.0, "x",
                                            f"<= {TARGET}", False, note="a run failed: see results"))
                continue
            ratio = b["peak_rss_mib"] / a["peak_rss_mib"]
            headlines.append(C.headline(
                f"{op}, {kind}: peak RSS {sizes[-1]:,} / {sizes[0]:,} "
                f"({a['peak_rss_mib']:.0f} -> {b['peak_rss_mib']:.0f} MiB)", ratio, "x", f"<= {TARGET}",
                ratio <= TARGET))
            if a.get("peak_anon_mib") and b.get("peak_anon_mib"):
                headlines.append(C.headline(
                    f"{op}, {kind}: peak anonymous memory (sampled every 50 ms; file-backed pages such as the "
                    f"index's LMDB map left out) {sizes[-1]:,} / {sizes[0]:,} "
                    f"({a['peak_anon_mib']:.0f} -> {b['peak_anon_mib']:.0f} MiB)",
                    b["peak_anon_mib"] / a["peak_anon_mib"], "x", "", None))
            if a.get("peak_file_mib") and b.get("peak_file_mib"):
                headlines.append(C.headline(
                    f"{op}, {kind}: peak file-backed resident memory (sampled every 50 ms: the index's maps, "
                    f"libraries, mapped Parquet) {sizes[-1]:,} / {sizes[0]:,} "
                    f"({a['peak_file_mib']:.0f} -> {b['peak_file_mib']:.0f} MiB)",
                    b["peak_file_mib"] / a["peak_file_mib"], "x", "", None))
    payload = {"headline": headlines, "inputs": {k: {**v, "path": str(v["path"])} for k, v in inputs.items()},
               "memory_limit_mb": float(os.environ.get("OMNI_MEMORY_LIMIT_MB", 1024)), "results": results}
    C.write_result(args, payload, started)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == CHILD_FLAG:
        print(json.dumps(_child(sys.argv[2], sys.argv[3], sys.argv[4])), flush=True)
    else:
        main()
