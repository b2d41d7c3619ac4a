"""ingest: ``omni submit`` of real HTML vs the floor, a plain pyarrow Parquet write.

Input: a WARC of the Python 3.11 and Django 3.2 documentation built with
``corpora.build_warc`` to 200 MiB of HTML (``--quick``: 20 MiB). The pages repeat
round after round with distinct URLs (the corpora hold ~80 MiB), so omni's md5 dedup
drops the repeats; the floor writes every record.

Variants, each in a fresh subprocess (peak RSS = the child's ``VmHWM``):

- ``read``: iterate the same reader stream (``iter_sources``) and do nothing else;
- ``floor``: the same reader, Arrow tables in omni's chunk sizes (20,000 rows or
  32 MiB of raw text, whichever first), one ``pq.ParquetWriter`` (zstd, omni's
  codec); no id, no dedup, no partitioning, no commit;
- ``omni``: ``Omni.submit`` into a fresh embedded catalog (id, dedup, bucketed
  Iceberg data files, id index entries, staged branch, one logical commit), on the
  defaults a user gets: no ``OMNI_*`` setting reaches the child but ``OMNI_CACHE``;
- ``omni_noindex``: the same with ``OMNI_INDEX=off`` (what the id index costs an ingest).

A second input holds the same pages with every body made distinct (a round-number
comment appended), so that omni writes as many rows as the floor. A third, ``short``,
is synthetic on purpose: ``--short-records`` JSONL records of ~175 bytes (default
1,000,000), where per-record costs (id, dedup, index entries) dominate. Its floor is
what a user would write for the same file in one process, ``floor_arrow``:
``pyarrow.json.read_json`` of the file, an md5 id column computed in a Python loop
(``hashlib.md5(text.encode()).hexdigest()`` per record) and ``pq.write_table``, all
on pyarrow's defaults. The ``floor`` variant on that input (the line-by-line reader:
``json.loads`` per line, no ids) is kept as a second, weaker reference without a target.

Headline: omni throughput / floor throughput over the same input (target >= 0.5),
for each input (the short records against ``floor_arrow``); omni with / without the
id index (target >= 0.9); and omni's peak RSS at ~50, ~200 and ~400 MiB of input
(bounded memory).

``--parts short`` runs only the short-record variants and keeps the HTML trials (and the
run they came from) of the results file; ``--parts html`` the other way round. Every
headline is computed from the trials, so a merged file says where each part comes from
(``part_runs``).

    python -m benchmarks.ingest [--quick] [--repeats N] [--mib 200] [--small-mib 50] [--short-records N]
                                [--parts html,short]
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common as C

CHILD_FLAG = "--child"
#: the inputs each part of the benchmark reads
PARTS = {"html": ("spec", "distinct", "small", "large"), "short": ("short",)}


# --------------------------------------------------------------------------- children


def _child(kind: str, source: str, out: str) -> dict:
    """Runs in a fresh interpreter: one variant, timed; prints one JSON line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from omni_iceberg.ingest.pipeline import CHUNK_BYTES, CHUNK_ROWS
    from omni_iceberg.ingest.sources import iter_sources
    from omni_iceberg.ingest.sources.records import SourceRecord

    result: dict = {"kind": kind}
    if kind.startswith("omni"):
        from omni_iceberg.api import Omni
        from catalog_ext.config import OmniConfig

        home = Path(out)
        omni = Omni(OmniConfig.resolve(catalog=f"sqlite:///{home / 'catalog.db'}",
                                       warehouse=str(home / "warehouse"), home=str(home)))
        omni.create_table("web")
        result["rss_before_mib"] = C.peak_rss_mib()
        report, wall, cpu = C.measure(lambda: omni.submit("web", [source], batch="b1", progress=False))
        result.update(read=report.read, written=report.written, duplicates=report.duplicates,
                      rejected=report.rejected, out_bytes=C.dir_bytes(home / "warehouse" / "aidata"))
    elif kind == "floor_arrow":
        import pyarrow.json as pj

        result["rss_before_mib"] = C.peak_rss_mib()

        def honest() -> dict:
            # what a user would write for the same file: every call on pyarrow's defaults
            table = pj.read_json(source)
            ids = [hashlib.md5(text.encode()).hexdigest() for text in table.column("raw_data").to_pylist()]
            table = table.append_column("_ai_unique_id_", pa.array(ids, pa.string()))
            pq.write_table(table, out)
            return {"read": table.num_rows, "written": table.num_rows}

        counts, wall, cpu = C.measure(honest)
        result.update(counts, out_bytes=Path(out).stat().st_size)
    else:
        result["rss_before_mib"] = C.peak_rss_mib()
        fields = ["raw_data", "url", "warc_date", "content_type", "warc_record_id"]
        schema = pa.schema([pa.field(f, pa.string()) for f in fields])

        def run() -> dict:
            read = written = 0
            writer = pq.ParquetWriter(out, schema, compression="zstd") if kind == "floor" else None
            cols: dict[str, list] = {f: [] for f in fields}
            size = 0
            for item in iter_sources([source]):
                read += 1
                if writer is None or not isinstance(item, SourceRecord):
                    continue
                for f in fields:
                    cols[f].append(item.fields.get(f))
                size += len(item.fields["raw_data"])
                if len(cols["raw_data"]) >= CHUNK_ROWS or size >= CHUNK_BYTES:
                    writer.write_table(pa.Table.from_pydict(cols, schema=schema))
                    written += len(cols["raw_data"])
                    cols, size = {f: [] for f in fields}, 0
            if writer is not None:
                if cols["raw_data"]:
                    writer.write_table(pa.Table.from_pydict(cols, schema=schema))
                    written += len(cols["raw_data"])
                writer.close()
            return {"read": read, "written": written}

        counts, wall, cpu = C.measure(run)
        result.update(counts, out_bytes=Path(out).stat().st_size if kind == "floor" else 0)
    result.update(wall_s=wall, cpu_s=cpu, peak_rss_mib=C.peak_rss_mib())
    return result


def run_child(kind: str, source: Path) -> dict:
    """Start one variant in a new interpreter and return what it measured."""
    out = C.scratch_dir(f"ingest/{kind}")
    target = out if kind.startswith("omni") else out / "floor.parquet"
    # the defaults a user gets: no omni setting from this shell reaches the child (OMNI_CACHE
    # only says where the corpora are); only the variant without the index sets one
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_") or k == "OMNI_CACHE"}
    if kind == "omni_noindex":
        env["OMNI_INDEX"] = "off"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.ingest", CHILD_FLAG, kind, str(source), str(target)],
                          cwd=C.ROOT, capture_output=True, text=True, check=False, env=env)
    C.remove(out)
    if proc.returncode != 0:
        raise SystemExit(f"ingest child {kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def short_jsonl(records: int) -> Path:
    """``records`` synthetic JSONL records of ~175 bytes each (cached: deterministic)."""
    path = C.OUT / f"short-{records}.jsonl"
    if not path.exists():
        C.OUT.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            for i in range(records):
                f.write(json.dumps({"raw_data": f"<p>short record {i}: a line of forum text, id {i * 7919 % 1000003}"
                                                f" and some words to reach a realistic size</p>",
                                    "url": f"https://forum.example.org/t/{i}"}) + "\n")
        tmp.rename(path)
    return path


# --------------------------------------------------------------------------- parent


def _previous(carried: list[str]) -> dict:
    """The results file whose trials the parts not run now are taken from."""
    if not carried:
        return {}
    path = C.RESULTS / "ingest.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    have = {t["input"] for t in old.get("trials", [])}
    missing = [p for p in carried if not set(PARTS[p]) <= have]
    if missing:
        raise SystemExit(f"--parts leaves out {', '.join(missing)}, but {path.name} holds no trials of it: run it too")
    return old


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == CHILD_FLAG:
        print(json.dumps(_child(argv[1], argv[2], argv[3])))
        return

    def options(p):
        p.add_argument("--mib", type=float, default=None, help="MiB of HTML for the main comparison (200)")
        p.add_argument("--small-mib", type=float, default=None, help="MiB of HTML for the RSS check (50)")
        p.add_argument("--large-mib", type=float, default=None,
                       help="a third, larger size for the RSS check (default: twice --mib)")
        p.add_argument("--short-records", type=int, default=None,
                       help="synthetic ~175-byte JSONL records for the short-record comparison (1,000,000)")
        p.add_argument("--parts", default=",".join(PARTS),
                       help="parts to run (html, short); the others' trials are kept from the results file")

    args = C.parse_args("ingest", __doc__, options, argv)
    started = time.perf_counter()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or set(parts) - set(PARTS):
        raise SystemExit(f"--parts: one or more of {', '.join(PARTS)}, got {args.parts!r}")
    carried = [p for p in PARTS if p not in parts]
    old = _previous(carried)
    big = args.mib or (20.0 if args.quick else 200.0)
    small = args.small_mib or (5.0 if args.quick else 50.0)
    large = args.large_mib or 2 * big
    if "html" in carried:  # the labels follow the sizes the kept trials ran at
        big, small, large = (old["params"][k] for k in ("input_mib", "small_input_mib", "large_input_mib"))
    repeats = args.repeats or (1 if args.quick else 3)

    # "spec": build_warc as is (pages repeat -> omni dedups); "distinct": every body distinct
    builders = {"spec": lambda: C.docs_warc(big), "distinct": lambda: C.distinct_docs_warc(big),
                "small": lambda: C.distinct_docs_warc(small), "large": lambda: C.distinct_docs_warc(large),
                "short": lambda: short_jsonl(args.short_records or (100_000 if args.quick else 1_000_000))}
    paths = {key: builders[key]() for part in parts for key in PARTS[part]}
    inputs = {key: {**old["params"]["inputs"][key], "path": C.ROOT / old["params"]["inputs"][key]["path"]}
              for part in carried for key in PARTS[part]}
    for key, path in paths.items():
        if key == "short":
            records = sum(1 for _ in open(path))
            html = sum(len(json.loads(line)["raw_data"]) for line in open(path))
        else:
            records, html = C.html_bytes_of_warc(path)
        inputs[key] = {"path": path, "records": records, "html_bytes": html, "warc_bytes": path.stat().st_size,
                       "mib": round(html / C.MIB, 1) if key == "short" else {"small": small, "large": large}.get(key, big)}
        C.log(f"input {key}: {path.name}: {records} records, {html / 1e6:.1f} MB HTML, "
              f"{path.stat().st_size / 1e6:.1f} MB WARC")

    plan = [("read", "spec"), ("floor", "spec"), ("omni", "spec"), ("floor", "distinct"), ("omni", "distinct"),
            ("omni_noindex", "distinct"), ("omni", "small"), ("omni", "large"), ("floor_arrow", "short"),
            ("omni", "short"), ("floor", "short"), ("omni_noindex", "short")]
    keep = {key for part in carried for key in PARTS[part]}
    trials: list[dict] = [t for t in old.get("trials", []) if t["input"] in keep]
    to_run = [(kind, key) for kind, key in plan if key not in keep]
    labels = {("floor", "short"): "floor (json.loads per line, no ids)",
              ("floor_arrow", "short"): "floor (pyarrow.json + md5 ids + pq.write_table)"}
    for r in range(repeats):
        for kind, key in (to_run if r % 2 == 0 else to_run[::-1]):  # alternate order: no variant always first
            res = run_child(kind, inputs[key]["path"])
            res.update(repeat=r, input=key, input_mib=inputs[key]["mib"], load=C.load_average())
            trials.append(res)
            C.log(f"{kind:5s} {key:8s}: {res['wall_s']:.2f} s wall, {res['cpu_s']:.2f} s CPU, "
                  f"peak RSS {res['peak_rss_mib']:.0f} MiB, written {res['written']}")

    def pick(kind, key, field):
        return [t[field] for t in trials if t["kind"] == kind and t["input"] == key]

    rows = []
    med = {}
    for kind, key in plan:
        inp = inputs[key]
        wall = C.median(pick(kind, key, "wall_s"))
        med[(kind, key)] = wall
        rows.append([labels.get((kind, key), kind), f"{key} ({inp['mib']:g} MiB)", f"{inp['records']}", f"{wall:.2f}",
                     f"{C.median(pick(kind, key, 'cpu_s')):.2f}", f"{inp['records'] / wall:.0f}",
                     f"{inp['html_bytes'] / 1e6 / wall:.1f}", f"{max(pick(kind, key, 'peak_rss_mib')):.0f}",
                     f"{C.median(pick(kind, key, 'written')):.0f}", f"{C.median(pick(kind, key, 'out_bytes')) / 1e6:.1f}"])

    def ratio_of(key, floor="floor"):
        paired = [f / o for f, o in zip(pick(floor, key, "wall_s"), pick("omni", key, "wall_s"))]
        return med[(floor, key)] / med[("omni", key)], paired

    spec_ratio, spec_paired = ratio_of("spec")
    dist_ratio, dist_paired = ratio_of("distinct")
    short_ratio, short_paired = ratio_of("short", "floor_arrow")
    loads_ratio, loads_paired = ratio_of("short")
    index_cost = {key: med[("omni_noindex", key)] / med[("omni", key)] for key in ("distinct", "short")}
    rss_big, rss_small = max(pick("omni", "distinct", "peak_rss_mib")), max(pick("omni", "small", "peak_rss_mib"))
    rss_large = max(pick("omni", "large", "peak_rss_mib"))
    heads = [
        C.headline(f"throughput omni / floor, build_warc input ({big:g} MiB, repeats deduped by omni)", spec_ratio,
                   "x", ">= 0.5", spec_ratio >= 0.5, f"per repeat: {', '.join(f'{p:.2f}' for p in spec_paired)}"),
        C.headline(f"throughput omni / floor, distinct pages ({big:g} MiB, same rows written)", dist_ratio, "x",
                   ">= 0.5", dist_ratio >= 0.5, f"per repeat: {', '.join(f'{p:.2f}' for p in dist_paired)}"),
        C.headline(f"throughput omni / floor (pyarrow.json + md5 ids + pq.write_table, one process), "
                   f"{inputs['short']['records']:,} short JSONL records (~175 bytes), defaults, dedup and index on",
                   short_ratio, "x", ">= 0.5", short_ratio >= 0.5,
                   f"per repeat: {', '.join(f'{p:.2f}' for p in short_paired)}"),
        C.headline(f"throughput omni / json.loads floor (line by line, no ids), {inputs['short']['records']:,} "
                   "short JSONL records", loads_ratio, "x", "", None,
                   f"per repeat: {', '.join(f'{p:.2f}' for p in loads_paired)}"),
        C.headline("throughput with the id index / without (distinct pages)", index_cost["distinct"], "x", ">= 0.9",
                   index_cost["distinct"] >= 0.9),
        C.headline("throughput with the id index / without (short records)", index_cost["short"], "x", ">= 0.9",
                   index_cost["short"] >= 0.9),
        C.headline("reader time / floor time (share of the floor spent in the WARC reader)",
                   med[("read", "spec")] / med[("floor", "spec")], "x"),
        C.headline(f"omni peak RSS at {big:g} MiB / at {small:g} MiB (distinct pages)", rss_big / rss_small, "x",
                   "~1 (bounded)", None, f"{rss_big:.0f} MiB vs {rss_small:.0f} MiB"),
        C.headline(f"omni peak RSS at {large:g} MiB / at {big:g} MiB (distinct pages)", rss_large / rss_big, "x",
                   "~1 (bounded)", None, f"{rss_large:.0f} MiB vs {rss_big:.0f} MiB"),
    ]
    spec_in = inputs["spec"]
    notes = [
        (f"build_warc input: {spec_in['path'].name}: {spec_in['records']} HTML records, "
        f"{spec_in['html_bytes'] / 1e6:.1f} MB of HTML ({spec_in['warc_bytes'] / 1e6:.1f} MB gzipped WARC). "
        "corpora.build_warc repeats the ~80 MB of documentation round after round, so omni's md5 dedup writes "
        f"only {C.median(pick('omni', 'spec', 'written')):.0f} rows while the floor (no dedup) writes every record."),
        ("distinct input: the same pages in the same order, with '<!-- round n -->' appended to rounds n > 0 "
        "(benchmarks.common.distinct_docs_warc): omni and the floor write the same number of rows."),
        ("short input: the floor a user would write for the same file, in one process: "
         "pyarrow.json.read_json(file), ids = [hashlib.md5(t.encode()).hexdigest() for t in "
         "table.column('raw_data').to_pylist()], append_column, pq.write_table(table, out), all on pyarrow's "
         "defaults (threads on, snappy). omni runs on its defaults too (md5 ids, in-batch and table dedup, "
         "the LMDB id index): no OMNI_* setting reaches its process but OMNI_CACHE. "
         "The json.loads floor (omni's line-by-line reader into a ParquetWriter, no ids) is the weaker "
         "reference this figure used before; it has no target."),
        "docs/s and MB/s are over records READ; MB = 10^6 bytes of UTF-8 HTML (of raw_data for the short input).",
        ("Each trial is a fresh subprocess; peak RSS is its VmHWM and includes the interpreter and imports "
        f"(omni ~{C.median(pick('omni', 'spec', 'rss_before_mib')):.0f} MiB, "
        f"floor ~{C.median(pick('floor', 'spec', 'rss_before_mib')):.0f} MiB before reading)."),
        (f"{repeats} repeat(s)" + (f" of the {', '.join(parts)} part(s) ({old['params']['repeats']} of the kept ones)"
                                   if carried else "")
         + "; within a repeat the variants ran back to back, order reversed every other repeat."),
    ]
    run_facts = {"command": C.command_line(args), "commit": args.git["commit"], "date": time.strftime("%Y-%m-%d %H:%M"),
                 "load_average": C.load_average()}
    part_runs = {p: run_facts for p in parts}
    for p in carried:
        part_runs[p] = (old.get("part_runs") or {}).get(p) or {
            "command": old.get("command"), "commit": (old.get("git") or {}).get("commit"), "date": old.get("date"),
            "load_average": (old.get("machine") or {}).get("load_average")}
    if carried:
        notes.append(f"Merged result: the {', '.join(carried)} part(s) are the trials of an earlier run "
                     "(see where each part comes from); ratios are taken within a part, never across runs.")
    payload = {
        "title": "Ingest: omni submit vs plain Parquet write (floor)",
        "params": {"input_mib": big, "small_input_mib": small, "large_input_mib": large, "repeats": repeats, "parts": parts,
                   "inputs": {k: {**v, "path": str(v["path"].relative_to(C.ROOT))} for k, v in inputs.items()}},
        "headline": heads,
        "table": {"columns": ["variant", "input", "records", "wall s (median)", "CPU s (median)", "docs/s", "MB/s",
                              "peak RSS MiB (max)", "rows written", "output MB"], "rows": rows},
        "notes": notes,
        "trials": trials,
    }
    if carried:
        payload["part_runs"] = part_runs
    C.write_result(args, payload, started)

    plt, fig, (a1, a2, a3) = C.figure(3, width=15)
    C.plot_trials(a1, {"read\nbuild_warc": pick("read", "spec", "wall_s"),
                       "floor\nbuild_warc": pick("floor", "spec", "wall_s"),
                       "omni\nbuild_warc": pick("omni", "spec", "wall_s"),
                       "floor\ndistinct": pick("floor", "distinct", "wall_s"),
                       "omni\ndistinct": pick("omni", "distinct", "wall_s")},
                  "wall seconds", f"Wall time, {big:g} MiB of HTML (dots = trials)")
    short_label = "short records\n(arrow floor)"
    C.plot_ratios(a2, {"build_warc\ninput": spec_ratio, "distinct\npages": dist_ratio, short_label: short_ratio},
                  {"build_warc\ninput": 0.5, "distinct\npages": 0.5, short_label: 0.5},
                  "Throughput omni / floor (higher is better)")
    C.plot_trials(a3, {f"omni\n{small:g} MiB": pick("omni", "small", "peak_rss_mib"),
                       f"omni\n{big:g} MiB": pick("omni", "distinct", "peak_rss_mib"),
                       f"omni\n{large:g} MiB": pick("omni", "large", "peak_rss_mib"),
                       f"floor\n{big:g} MiB": pick("floor", "distinct", "peak_rss_mib")},
                  "peak RSS MiB (VmHWM)", "Peak RSS vs input size (distinct pages)")
    C.save_plot(plt, fig, args, f"ingest: {spec_in['records']} records, {spec_in['html_bytes'] / 1e6:.0f} MB of HTML")


if __name__ == "__main__":
    main()
