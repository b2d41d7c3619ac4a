"""What every benchmark shares: arguments, clocks, fresh catalogs, real data, results, plots.

Measurement rules (the machines are 2 shared cores):

- every figure is a ratio against a baseline timed in the same run;
- baseline and candidate trials are interleaved (A B A B ...), each trial starting
  from fresh state, and the median of each side is reported together with every trial;
- CPU time is this process plus its waited-for children (``RUSAGE_SELF`` +
  ``RUSAGE_CHILDREN``), so UDFs run in a worker process are counted.

Scratch data lives in ``benchmarks/out/`` (git-ignored) and is removed after use,
except the WARC / JSONL inputs, which are cached there because they are
deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
OUT = BENCH / "out"
RESULTS = BENCH / "results"
DOC_CORPORA = ("python-docs-html", "django-docs-html")
MIB = 2**20

os.environ.setdefault("OMNI_CACHE", str(ROOT / ".cache"))


# --------------------------------------------------------------------------- arguments


def parse_args(name: str, doc: str | None, add: Callable[[argparse.ArgumentParser], None] | None = None,
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``--quick`` (smoke size) and ``--repeats`` for every benchmark, plus its own options."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}",
                                     description=(doc or "").strip().split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small smoke-test size (about a minute)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved trials per variant")
    if add is not None:
        add(parser)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.name = name
    args.git = git_facts()  # the code that runs: HEAD may move during a long run
    return args


def command_line(args: argparse.Namespace) -> str:
    return " ".join(["python", "-m", f"benchmarks.{args.name}", *map(shlex.quote, args.argv)])


# --------------------------------------------------------------------------- clocks


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of every child it has waited for."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def measure(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Run ``fn``; return (its result, wall seconds, CPU seconds incl. children)."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0, cpu_seconds() - c0


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def peak_rss_mib() -> float:
    """This process's peak resident set (``VmHWM``) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine_facts() -> dict[str, Any]:
    """nproc, RAM, CPU model, Python and key library versions, load at the time of the call."""
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {}
    for mod in ("pyarrow", "pyiceberg", "duckdb", "pyspark"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001, S110 - a missing optional library is just not listed
            pass
    return {"nproc": os.cpu_count(), "ram_gib": round(mem_kib / 2**20, 1), "cpu": cpu,
            "python": platform.python_version(), "platform": platform.platform(), "versions": versions,
            "load_average": load_average()}


# --------------------------------------------------------------------------- fresh state


def scratch_dir(kind: str) -> Path:
    """A new empty folder ``benchmarks/out/<kind>/<unique>``."""
    path = OUT / kind / f"{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


def remove(path: Path | str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def fresh_omni(tag: str, catalog: str | None = None) -> Any:
    """An :class:`Omni` on a brand-new catalog and warehouse under ``benchmarks/out/homes``.

    Embedded SQLite by default; ``catalog`` may name a SQLAlchemy URI (PostgreSQL for
    benchmarks that share the catalog with Spark). Every trial gets its own, because
    omni reuses feature values by content across the tables of one catalog.
    """
    from omni_iceberg.api import Omni
    from catalog_ext.config import OmniConfig

    home = scratch_dir(f"homes/{tag}")
    uri = catalog or f"sqlite:///{home / 'catalog.db'}"
    return Omni(OmniConfig.resolve(catalog=uri, warehouse=str(home / "warehouse"), home=str(home)))


def dir_bytes(path: Path | str) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# --------------------------------------------------------------------------- real data


def doc_dirs() -> list[Path]:
    """The Python 3.11 and Django 3.2 HTML documentation (fetched from Debian once)."""
    from omni_iceberg.demo import corpora

    return [corpora.fetch(name) for name in DOC_CORPORA]


def doc_pages() -> list[Path]:
    """Every HTML page of :func:`doc_dirs`, in the order ``build_warc`` writes them."""
    return [f for d in doc_dirs() for f in _html_files(d)]


def docs_warc(target_mib: float) -> Path:
    """A WARC of the documentation pages holding ``target_mib`` MiB of HTML (cached).

    Built by :func:`omni_iceberg.demo.corpora.build_warc`: pages repeat round after round
    with distinct URLs, so inputs larger than the corpora (~80 MB) hold duplicates.
    """
    from omni_iceberg.demo import corpora

    target = int(target_mib * MIB)
    out = OUT / "inputs" / f"docs-{target}.warc.gz"
    if not out.exists():
        corpora.build_warc(doc_dirs(), out, target)
    return out


def distinct_docs_warc(target_mib: float) -> Path:
    """Like :func:`docs_warc`, but every record's body is distinct (cached).

    Round ``n > 0`` appends ``<!-- round n -->`` to each page (``corpora.build_warc``
    with ``mark_rounds``), so md5 dedup keeps every record: the writer then has as many
    rows to write as the floor. Otherwise unchanged real HTML.
    """
    from omni_iceberg.demo import corpora

    target = int(target_mib * MIB)
    out = OUT / "inputs" / f"docs-distinct-{target}.warc.gz"
    if out.exists():
        return out
    return corpora.build_warc(doc_dirs(), out, target, mark_rounds=True)


def _html_files(folder: Path) -> list[Path]:
    from omni_iceberg.ingest.sources.html_dir import HTML_SUFFIXES, iter_files

    return [f for f in iter_files(folder, HTML_SUFFIXES) if f.is_file()]


def docs_one_round_mib() -> float:
    """MiB of HTML in one round of both documentation corpora (every page once)."""
    return sum(p.stat().st_size for p in doc_pages()) / MIB


def html_bytes_of_warc(path: Path) -> tuple[int, int]:
    """(records, bytes of UTF-8 HTML) the WARC reader yields for ``path``."""
    from omni_iceberg.ingest.sources import iter_sources
    from omni_iceberg.ingest.sources.records import SourceRecord

    n = size = 0
    for item in iter_sources([str(path)]):
        if isinstance(item, SourceRecord):
            n += 1
            size += len(item.fields["raw_data"].encode("utf-8"))
    return n, size


def paragraphs_jsonl(count: int) -> Path:
    """A JSONL of ``count`` distinct real paragraphs (>= 40 characters) of the documentation.

    Each line of the pages' extracted text is one paragraph; records are
    ``{"raw_data": ..., "page": ...}``. Cached; deterministic (pages in sorted order).
    """
    from omni_iceberg.features.library.text import extract_text

    out = OUT / "inputs" / f"paragraphs-{count}.jsonl"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    tmp = out.with_suffix(".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        for page in doc_pages():
            for line in extract_text(page.read_text(encoding="utf-8", errors="replace")).split("\n"):
                line = line.strip()
                if len(line) < 40 or line in seen:
                    continue
                seen.add(line)
                f.write(json.dumps({"raw_data": line, "page": page.name}, ensure_ascii=False) + "\n")
                if len(seen) >= count:
                    break
            if len(seen) >= count:
                break
    if len(seen) < count:
        tmp.unlink()
        raise SystemExit(f"the documentation has only {len(seen)} distinct paragraphs; ask for fewer")
    os.replace(tmp, out)
    return out


def ingest_and_parse(omni: Any, table: str, sources: list[Path | str], batch: str = "b1") -> dict[str, float]:
    """Create ``table``, ingest ``sources`` and compute ``html_parser`` (untimed set-up)."""
    from omni_iceberg.features.library import html_parser

    t0 = time.perf_counter()
    omni.create_table(table)
    rep = omni.submit(table, [str(s) for s in sources], batch=batch, progress=False)
    t1 = time.perf_counter()
    omni.register_features(table, [html_parser])
    omni.backfill(table, ["html_parser"], isolation="inline", progress=False, has_gpu=False)
    return {"rows": rep.written, "duplicates": rep.duplicates, "ingest_s": t1 - t0,
            "html_parser_s": time.perf_counter() - t1}


def snapshot_added_bytes(table: Any, after_snapshot_ids: set[int]) -> tuple[int, int]:
    """(added data-file bytes, added files) over the snapshots of ``table`` not in ``after_snapshot_ids``."""
    size = files = 0
    for snap in table.metadata.snapshots:
        if snap.snapshot_id in after_snapshot_ids or snap.summary is None:
            continue
        props = snap.summary.additional_properties
        size += int(props.get("added-files-size", 0))
        files += int(props.get("added-data-files", 0))
    return size, files


# --------------------------------------------------------------------------- results


def git_facts() -> dict[str, Any]:
    """The commit the product code was at, and tracked files changed outside ``benchmarks/``.

    Others commit while benchmarks run: a result is only comparable with another from
    the same commit and a clean tree.
    """
    import subprocess

    def git(*cmd: str) -> str:
        proc = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, check=False)
        return proc.stdout.rstrip("\n")  # not strip(): porcelain lines start with a status column

    dirty = [ln[3:] for ln in git("status", "--porcelain", "--untracked-files=no").splitlines()
             if not ln[3:].startswith("benchmarks/")]
    return {"commit": git("rev-parse", "--short", "HEAD"), "subject": git("log", "-1", "--format=%s")[:100],
            "dirty_files": dirty}


def write_result(args: argparse.Namespace, payload: dict[str, Any], started: float) -> Path:
    """Write ``benchmarks/results/<name>.json`` with the command, date and machine added."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": args.name,
        "command": command_line(args),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": bool(args.quick),
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine_facts(),
        "git": getattr(args, "git", None) or git_facts(),
        **payload,
    }
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False, default=_json_default) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return path


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def headline(metric: str, value: float, unit: str = "", target: str = "", meets: bool | None = None,
             note: str = "", peer: bool = False) -> dict[str, Any]:
    """One headline figure: a ratio, with the target it is checked against (when any).

    ``peer`` marks the figure against the strongest peer a user would pick for the job
    (DuckDB on the same files, ClickHouse against the best Iceberg path): README's table
    always shows it, target or not.
    """
    out = {"metric": metric, "value": round(value, 4), "unit": unit, "target": target, "meets_target": meets,
           "note": note}
    return out | {"peer": True} if peer else out


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- plots


def figure(ncols: int = 2, width: float = 11.0, height: float = 4.2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width, height))
    return plt, fig, (axes if ncols > 1 else [axes])


def plot_trials(ax: Any, variants: dict[str, list[float]], ylabel: str, title: str) -> None:
    """One column of dots per variant (every trial) with its median as a bar."""
    names = list(variants)
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860"]
    for i, name in enumerate(names):
        vals = variants[name]
        med = median(vals) if vals else 0.0
        ax.bar(i, med, color=colors[i % len(colors)], alpha=0.55, width=0.6)
        ax.scatter([i] * len(vals), vals, color="black", s=14, zorder=3)
        # beside the bar's top, not above it: the trial dots sit on the bar's centre line
        ax.annotate(f"{med:.3g}", (i + 0.3, med), ha="left", va="center", fontsize=9, xytext=(2, 0),
                    textcoords="offset points")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def plot_ratios(ax: Any, ratios: dict[str, float], targets: dict[str, float] | None, title: str,
                ylabel: str = "ratio (x)") -> None:
    """Horizontal bars of ratios with a dashed line at each target."""
    names = list(ratios)
    vals = [ratios[n] for n in names]
    bars = ax.barh(range(len(names)), vals, color="#4c72b0", alpha=0.75)
    for b, v in zip(bars, vals):
        ax.annotate(f"{v:.3g}", (b.get_width(), b.get_y() + b.get_height() / 2), va="center", fontsize=9,
                    xytext=(3, 0), textcoords="offset points")
    for i, n in enumerate(names):
        t = (targets or {}).get(n)
        if t is not None:
            ax.plot([t, t], [i - 0.4, i + 0.4], color="#c44e52", linestyle="--", linewidth=1.5)
            ax.annotate(f"target {t:g}", (t, i - 0.42), color="#c44e52", fontsize=8, ha="center", va="bottom")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlim(0, max(vals + [t for t in (targets or {}).values() if t is not None] + [1]) * 1.25)


def save_plot(plt: Any, fig: Any, args: argparse.Namespace, suptitle: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.suptitle(suptitle + ("  [--quick]" if args.quick else ""), fontsize=11)
    fig.tight_layout()
    path = RESULTS / f"{args.name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path.relative_to(ROOT)}")
    return path
