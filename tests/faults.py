"""Fault injection for omni: kill ``omni`` commands at random points, race two of them, check the family.

Shared by ``tests/test_faults.py`` (a few faults, bounded in time) and
``benchmarks/reliability.py`` (the larger campaign). Everything runs the real ``omni``
command line in child processes on a real catalog (the embedded SQLite one, or any
``--catalog``), because the faults of interest - ``kill -9`` mid-commit, two processes
racing for one logical version - only exist across processes.

The checks are the invariants a reader relies on, read back with pyiceberg:

- every physical table at the snapshot the logical version pins has
  ``count(*) == count(distinct _ai_unique_id_)``, and so has the logical table;
- every batch the logical version lists is complete (its rows in the table equal the
  rows it recorded), so a killed submit is all or nothing;
- logical versions are 1..n (or k..n once retention expired the oldest), each the parent
  of the next.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
KEY = "_ai_unique_id_"

#: The child prints this on stderr once its imports are done, then runs ``omni``; kills are
#: timed from here, so that a random delay lands in omni's own work, not in Python's start-up.
READY = "omni-fault-ready"
#: With a barrier file the child waits for it after READY (to start two racers together).
_CHILD = r"""
import os, sys, time
import omni_iceberg.cli as cli
sys.stderr.write("%s\n"); sys.stderr.flush()
barrier = os.environ.get("OMNI_FAULT_BARRIER")
while barrier and not os.path.exists(barrier):
    time.sleep(0.01)
raise SystemExit(cli.main(sys.argv[1:]))
""" % READY


def omni_argv(*args: str) -> list[str]:
    """The command line of ``omni ARGS`` with this interpreter (the child prints READY first)."""
    return [sys.executable, "-c", _CHILD, *args]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra)
    return env


@dataclass
class Outcome:
    """What happened to one ``omni`` child: exit code (negative: killed by that signal) and its output."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    killed_after_s: float | None = None  # seconds after READY the kill was sent; None: not killed

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def describe(self) -> str:
        cmd = " ".join(self.argv[3:])
        return f"`omni {cmd}` -> rc {self.returncode}\nstdout: {self.stdout[-1500:]}\nstderr: {self.stderr[-3000:]}"


def start_omni(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    # own session: a kill reaches the whole group, UDF worker processes included, like a lost machine
    return subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_ready(proc: subprocess.Popen[str], timeout_s: float) -> list[str]:
    """Read stderr up to the READY line; returns the lines before it (empty when the child died first)."""
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            return lines  # EOF: exited before READY
        if line.strip() == READY:
            return lines
        lines.append(line)
    raise TimeoutError(f"{proc.args!r} printed no {READY} within {timeout_s} s")


def _finish(proc: subprocess.Popen[str], before: list[str], timeout_s: float, killed_after: float | None) -> Outcome:
    out, err = proc.communicate(timeout=timeout_s)
    return Outcome(list(proc.args), proc.returncode, out, "".join(before) + err, killed_after)  # type: ignore[arg-type]


def run_omni(*args: str, env: dict[str, str] | None = None, timeout_s: float = 300) -> Outcome:
    """Run ``omni ARGS`` to completion."""
    proc = start_omni(omni_argv(*args), env or child_env())
    before = wait_ready(proc, timeout_s)
    return _finish(proc, before, timeout_s, None)


def run_and_kill(*args: str, delay_s: float, env: dict[str, str] | None = None, timeout_s: float = 300) -> Outcome:
    """Run ``omni ARGS`` and ``kill -9`` its process group ``delay_s`` after it is ready.

    When the command finishes first, the outcome is its normal exit (``killed`` False).
    """
    proc = start_omni(omni_argv(*args), env or child_env())
    before = wait_ready(proc, timeout_s)
    try:
        proc.wait(timeout=delay_s)
        killed_after = None
    except subprocess.TimeoutExpired:
        killed_after = delay_s
        os.killpg(proc.pid, signal.SIGKILL)
    return _finish(proc, before, timeout_s, killed_after)


def run_and_kill_when(*args: str, condition: Callable[[], bool], env: dict[str, str] | None = None,
                      poll_s: float = 0.05, timeout_s: float = 300) -> Outcome:
    """Run ``omni ARGS`` and ``kill -9`` its process group as soon as ``condition()`` holds.

    ``condition`` is polled from this process (e.g. "a staging branch exists" read from
    the catalog); an exception in it counts as False (the catalog may be busy). When the
    command finishes first, the outcome is its normal exit (``killed`` False).
    """
    proc = start_omni(omni_argv(*args), env or child_env())
    before = wait_ready(proc, timeout_s)
    ready = time.monotonic()
    killed_after = None
    while proc.poll() is None and time.monotonic() - ready < timeout_s:
        try:
            hit = condition()
        except Exception:  # noqa: BLE001 - e.g. "database is locked" while the child commits
            hit = False
        if hit:
            killed_after = time.monotonic() - ready
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(poll_s)
    return _finish(proc, before, timeout_s, killed_after)


def run_pair(a: list[str], b: list[str], barrier: Path, env: dict[str, str] | None = None,
             timeout_s: float = 300) -> tuple[Outcome, Outcome]:
    """Run ``omni A`` and ``omni B`` at once: both import, wait at ``barrier``, then start together."""
    barrier.unlink(missing_ok=True)
    env = child_env(OMNI_FAULT_BARRIER=str(barrier), **(env or {}))
    procs = [start_omni(omni_argv(*argv), env) for argv in (a, b)]
    try:
        befores = [wait_ready(p, timeout_s) for p in procs]
        barrier.touch()
        return tuple(_finish(p, bef, timeout_s, None) for p, bef in zip(procs, befores))  # type: ignore[return-value]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


# ---- the invariants ----------------------------------------------------------------------


@dataclass
class FamilyReport:
    """What :func:`check_family` saw; ``anomalies`` is empty when every invariant holds."""

    version: int
    rows: int
    distinct_ids: int
    batches: dict[str, int]
    tables: dict[str, tuple[int, int]]  # identifier -> (rows, distinct ids) at the pinned snapshot
    anomalies: list[str] = field(default_factory=list)


def _ids_at(catalog: Any, identifier: str, snapshot_id: int) -> list[str]:
    table = catalog.load_table(identifier)
    return table.scan(selected_fields=(KEY,), snapshot_id=snapshot_id).to_arrow().column(KEY).to_pylist()


def check_family(omni: Any, name: str) -> FamilyReport:
    """Read the latest logical version of ``name`` back and list every broken invariant."""
    state = omni.state(name)
    anomalies: list[str] = []
    data = omni.read(name, columns=[KEY, "_ai_append_name_"])
    ids = data.column(KEY).to_pylist()
    if len(ids) != len(set(ids)):
        dup = [i for i, n in Counter(ids).items() if n > 1]
        anomalies.append(f"logical table {name}: {len(ids)} rows, {len(set(ids))} distinct ids (e.g. {dup[:3]})")
    per_batch = Counter(data.column("_ai_append_name_").to_pylist())
    recorded = {b.name: b.rows for b in state.batches}
    for batch, rows in recorded.items():
        if per_batch.get(batch, 0) != rows:
            anomalies.append(f"batch {batch!r} records {rows} rows, the table holds {per_batch.get(batch, 0)}")
    for batch in set(per_batch) - set(recorded):
        anomalies.append(f"batch {batch!r} has {per_batch[batch]} rows but no committed batch entry")
    tables: dict[str, tuple[int, int]] = {}
    for t in state.tables:
        if t.snapshot_id is None:
            continue
        tids = _ids_at(omni.catalog, t.identifier, t.snapshot_id)
        tables[t.identifier] = (len(tids), len(set(tids)))
        if len(tids) != len(set(tids)):
            anomalies.append(f"physical table {t.identifier}@{t.snapshot_id}: {len(tids)} rows, "
                             f"{len(set(tids))} distinct ids")
        if t.role == "base" and set(tids) != set(ids):
            anomalies.append(f"base table {t.identifier} and the logical table disagree on ids")
    versions = sorted(v.version for v in omni.log(name))
    first = versions[0] if versions else 1  # retention expires the oldest versions (omni expire --keep-last)
    if versions != list(range(first, state.version + 1)):
        anomalies.append(f"logical versions are not {first}..{state.version}: {versions}")
    for v in versions:
        parent = omni.state(name, as_of=v).parent_version
        if v > 1 and parent != v - 1:
            anomalies.append(f"version {v} has parent {parent}, expected {v - 1}")
    return FamilyReport(state.version, len(ids), len(set(ids)), recorded, tables, anomalies)


def feature_nulls(omni: Any, name: str, column: str, batches: list[str] | None = None) -> int:
    """How many rows (of ``batches``) have no value for ``column``."""
    return omni.read(name, columns=[column], batches=batches).column(column).null_count


def computed_twice(omni: Any, name: str) -> list[str]:
    """Feature versions recorded as computed more than once for one batch (a lost race that committed twice)."""
    seen = Counter((u.feature, u.version, u.batch) for u in omni.state(name).computed)
    return [f"{f}@{v} on batch {b} computed {n} times" for (f, v, b), n in seen.items() if n > 1]


# ---- inputs ------------------------------------------------------------------------------


def write_docs(path: Path, start: int, count: int, tag: str = "doc") -> set[str]:
    """A JSONL of ``count`` distinct small HTML pages; returns their raw texts."""
    texts = {f"<html><body><h1>{tag} {i}</h1><p>Text of {tag} {i}, with punctuation; digits {i * 7}!</p>"
             f"</body></html>" for i in range(start, start + count)}
    path.write_text("".join(json.dumps({"raw_data": t}) + "\n" for t in sorted(texts)))
    return texts


def builtin_definitions_file(path: Path, names: list[str]) -> Path:
    """A JSON file of the named built-in feature definitions, for ``omni feature register``."""
    from omni_iceberg.features.library import BUILTINS

    by_name = {b.definition.name: json.loads(b.definition.canonical_json()) for b in BUILTINS}
    path.write_text(json.dumps([by_name[n] for n in names]))
    return path


def seeded_rng(label: str) -> tuple[random.Random, int]:
    """A random generator for ``label``, seeded from ``$OMNI_FAULT_SEED`` (default: fixed), and its seed."""
    seed = int(os.environ.get("OMNI_FAULT_SEED", "20261130")) + sum(map(ord, label))
    return random.Random(seed), seed


def staging_leftovers(omni: Any, name: str) -> list[str]:
    """Staging branches (``omni-stage-*``) still on the family's tables: what a killed writer left behind."""
    from catalog_ext.physical import STAGING_BRANCH_PREFIX

    left = []
    for t in omni.state(name).tables:
        refs = omni.catalog.load_table(t.identifier).metadata.refs
        left += [f"{t.identifier}:{r}" for r in refs if r.startswith(STAGING_BRANCH_PREFIX)]
    return left


# ---- two writers racing ------------------------------------------------------------------

#: every writer of a logical table, raced pairwise by ``tests/test_writer_races.py`` (threads, in
#: one process) and ``python -m benchmarks.reliability --races N`` (two ``omni`` processes)
WRITERS = ("submit", "backfill", "compact", "regroup", "rebucket", "drop-batch", "materialize", "retention")
RACE_FEATURES = ("html_parser", "punctuation_ratio", "digit_ratio", "uppercase_ratio", "avg_word_length")


def writer_pairs() -> list[tuple[str, str]]:
    """Every unordered pair of :data:`WRITERS`, a writer with itself included."""
    return [(a, b) for i, a in enumerate(WRITERS) for b in WRITERS[i:]]


def race_table(folder: Path, docs: int = 6) -> Path:
    """A logical table ``web`` on which every writer has work to race for; returns its home.

    Batches ``b0`` and ``b1`` have ``html_parser``, ``punctuation_ratio`` and ``digit_ratio``
    computed; ``b2`` came later and has none, so two backfills of different features both
    need ``html_parser`` for it (a shared ancestor). 4 id buckets, so every partition of
    every table holds several small files (compaction has work) and re-bucketing to 8 or 2 is
    allowed. ``uppercase_ratio`` and ``avg_word_length`` are registered, never computed: a
    backfill of either writes a table the family had no rows in. ``new.jsonl`` is content no
    batch holds yet, for the submits.
    """
    from omni_iceberg.api import Omni
    from omni_iceberg.features.library import BUILTINS

    home = folder / "home"
    omni = Omni(home=home)
    omni.create_table("web", bucket_count=4)
    for i, batch in enumerate(("b0", "b1", "b2")):
        write_docs(folder / f"{batch}.jsonl", i * docs, docs, tag=batch)
        omni.submit("web", [str(folder / f"{batch}.jsonl")], batch=batch, progress=False)
        if batch == "b1":
            omni.register_features("web", [b for b in BUILTINS if b.definition.name in RACE_FEATURES])
            omni.backfill("web", ["punctuation_ratio", "digit_ratio"], isolation="inline", progress=False)
    write_docs(folder / "new.jsonl", 3 * docs, docs, tag="new")
    return home


def writer_argv(writer: str, side: str, folder: Path) -> list[str]:
    """``omni`` arguments of ``writer`` on :func:`race_table`'s table (``side`` "a" or "b": a writer
    raced with itself does different work on each side where that makes the race meaningful)."""
    a = side == "a"
    return {
        "submit": ["submit", "web", str(folder / "new.jsonl"), "--batch", f"new-{side}"],  # same content
        "backfill": ["backfill", "web", "--features", "uppercase_ratio" if a else "avg_word_length",
                     "--isolation", "inline"],
        "compact": ["compact", "web", "--min-files", "2"],
        "regroup": ["regroup", "web"],
        "rebucket": ["rebucket", "web", "--buckets", "8" if a else "2"],
        "drop-batch": ["drop-batch", "web", "b1"],
        "materialize": ["accelerate", "web", "--materialize", "punctuation_ratio" if a else "digit_ratio"],
        "retention": ["expire", "web", "--keep-last", "2", "--min-age", "0"],
    }[writer] + ["--no-progress"]


def run_writer(omni: Any, writer: str, side: str, folder: Path) -> Any:
    """The command of :func:`writer_argv` through the Python API (for races between threads)."""
    a = side == "a"
    if writer == "submit":
        return omni.submit("web", [str(folder / "new.jsonl")], batch=f"new-{side}", progress=False)
    if writer == "backfill":
        return omni.backfill("web", ["uppercase_ratio" if a else "avg_word_length"], isolation="inline",
                             progress=False)
    if writer == "compact":
        return omni.compact("web", min_files=2, progress=False)
    if writer == "regroup":
        return omni.regroup("web", progress=False)
    if writer == "rebucket":
        return omni.rebucket("web", 8 if a else 2, progress=False)
    if writer == "drop-batch":
        return omni.drop_batch("web", "b1", progress=False)
    if writer == "materialize":
        return omni.materialize("web", ["punctuation_ratio" if a else "digit_ratio"], progress=False)
    if writer == "retention":
        return omni.expire("web", keep_last=2, min_age_s=0, progress=False)
    raise ValueError(f"unknown writer {writer!r}")


#: how an ``omni`` writer that lost a race may end: done (0), refused what the winner made
#: impossible (2: the batch it drops is gone, a count no longer allowed) or a conflict (3)
CLEAN_EXIT_CODES = (0, 2, 3)


def clean_failure(error: BaseException) -> bool:
    """A writer that lost a race may fail, but only as :data:`CLEAN_EXIT_CODES` say."""
    from catalog_ext.errors import OmniError

    return isinstance(error, OmniError) and error.exit_code in CLEAN_EXIT_CODES


def duplicate_pairs(omni: Any, name: str) -> dict[str, int]:
    """Per physical table of the latest version: rows whose (id, batch) pair an earlier row has."""
    out: dict[str, int] = {}
    for t in omni.state(name).tables:
        if t.snapshot_id is None:
            continue
        rows = omni.catalog.load_table(t.identifier).scan(
            snapshot_id=t.snapshot_id, selected_fields=(KEY, "_ai_append_name_")).to_arrow()
        pairs = list(zip(rows.column(KEY).to_pylist(), rows.column("_ai_append_name_").to_pylist()))
        if len(pairs) != len(set(pairs)):
            out[t.identifier] = len(pairs) - len(set(pairs))
    return out


def race_problems(omni: Any, name: str) -> tuple[list[str], dict[str, Any]]:
    """Every broken invariant after a race (family, duplicated (id, batch) pairs, the id index,
    leftover branches), and the counts behind them; a check that cannot even read the family
    (a table the version pins is gone) is a problem too, not a crash of the campaign."""
    counts: dict[str, Any] = {"duplicate_pairs": None, "verify_ok": None}
    problems: list[str] = []
    try:
        duplicated = duplicate_pairs(omni, name)
        counts["duplicate_pairs"] = sum(duplicated.values())
        problems += [f"{t}: {n} duplicated (id, batch) pairs" for t, n in duplicated.items()]
        problems += check_family(omni, name).anomalies + computed_twice(omni, name)
        report = omni.verify_index(name, progress=False)
        counts.update({"verify_ok": report.ok, **{k: getattr(report, k) for k in
                                                   ("missing", "stale", "dangling", "pending")}})
        if not report.ok or report.pending:
            problems.append("index verify: " + report.text().replace("\n", " | "))
        problems += [f"left behind: {r}" for r in staging_leftovers(omni, name)]
    except Exception as e:  # noqa: BLE001 - see the docstring
        problems.append(f"the family cannot be read back: {type(e).__name__}: {e}")
    return problems, counts
