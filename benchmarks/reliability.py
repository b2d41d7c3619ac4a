"""reliability: a fault campaign against the real ``omni`` command - kills, bad records, SQL escapes, races.

Four parts, each counted, none timed (a fault either breaks an invariant or it does not):

- **kills**: ``kill -9`` of ``omni submit`` / ``backfill`` / ``compact`` (the whole
  process group) at a random delay after start-up, then a rerun to completion. A kill
  is *survived* when the family is sound right after the kill and after the rerun
  (no partial batch, ``count(*) == count(distinct id)`` in every physical table at its
  pinned snapshot, logical versions 1..n chained, no feature computed twice, no
  staging branch left behind after the rerun). Kills that land after the command had
  already finished are counted apart (``finished_first``), not as survived.
- **fuzzed records**: bad records from the ingest fuzzer (``tests/fuzz_records.py``,
  when present) over every reader kind, one submit per kind, judged by its
  ``check_outcome``: each record lands exactly or is rejected with a reason; ``lost`` =
  input - landed - duplicates - rejected; ``crashed`` = a submit raised something other
  than an ``OmniError``.
- **escapes**: every payload of the SQL-escape corpus
  (``tests/fixtures/sql_escape_corpus.yaml``, when present) through ``omni sql``,
  ``omni export --columns`` and ``--where``, with a canary file outside the warehouse:
  *blocked* when nothing was read or written and the payload met its expectation.
- **concurrent pairs**: submit/submit (same content), backfill/backfill (shared missing
  ancestor), submit/backfill, backfill/compaction, register/register, each started
  together behind a barrier; an *anomaly* is a failed command or a broken invariant.
- **writer races**: every pair of the writers submit, backfill, compact, regroup,
  rebucket, drop-batch, materialize and retention (a writer with itself included: 36
  pairs), as two ``omni`` processes started behind a barrier on a fresh table where each
  has work (``tests.faults.race_table``), ``--races`` times per pair. Per pair: how the
  commands ended (a loser may exit 2 or 3, nothing else), the (id, batch) pairs found
  twice in a physical table, how often ``index verify`` failed (and its missing, stale,
  dangling and pending entries), and the other broken invariants (``tests.faults.race_problems``).

Writes ``benchmarks/results/reliability.json`` and ``reliability.md`` (a snippet for
RESULTS.md). Full scale is ``--kills 50 --records 10000 --pairs 3 --races 20`` (the
defaults); ``--quick`` is a smoke run (3 kills, 300 records, 1 pair each, 1 race per pair);
``--parts`` runs some parts only, ``--race-pairs`` some writer pairs only.

    python -m benchmarks.reliability [--quick] [--kills N] [--records N] [--pairs N] [--races N]
                                     [--race-pairs backfill/drop-batch,...] [--parts races,...] [--seed S]
"""

from __future__ import annotations

import importlib
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from benchmarks import common as C
from tests.faults import (
    CLEAN_EXIT_CODES,
    builtin_definitions_file,
    check_family,
    computed_twice,
    feature_nulls,
    race_problems,
    race_table,
    run_and_kill,
    run_omni,
    run_pair,
    staging_leftovers,
    write_docs,
    writer_argv,
    writer_pairs,
)

OPERATIONS = ("submit", "backfill", "compact")
#: Kill windows (seconds after the child is ready), wide enough to land anywhere in the work.
WINDOWS = {"submit": (0.05, 1.5), "backfill": (0.1, 4.0), "compact": (0.05, 2.0)}
FEATURES = ("html_parser", "punctuation_ratio", "digit_ratio")
PARTS = ("kills", "fuzz", "escapes", "hostile", "pairs", "races")


def _add_args(p) -> None:
    p.add_argument("--kills", type=int, default=50, help="kill -9 attempts in all, spread over the operations")
    p.add_argument("--records", type=int, default=10_000, help="fuzzed records to submit")
    p.add_argument("--pairs", type=int, default=3, help="runs of each concurrent pair")
    p.add_argument("--docs", type=int, default=3000, help="documents per table in the kill and pair parts")
    p.add_argument("--races", type=int, default=20, help="runs of each pair of writers in the writer races")
    p.add_argument("--race-docs", type=int, default=50, help="documents per batch in the writer races")
    p.add_argument("--race-pairs", default="", help="only these writer pairs, e.g. backfill/drop-batch,submit/submit")
    p.add_argument("--parts", default=",".join(PARTS), help=f"the parts to run (of {', '.join(PARTS)})")
    p.add_argument("--resume", action="store_true",
                   help="writer races: take the pairs already finished (same --races, --race-docs) from the checkpoint")
    p.add_argument("--merge", action="store_true",
                   help="keep the parts this run skips from the results file (each part records the run it came from)")
    p.add_argument("--seed", type=int, default=20261130)


# ---- set-up ------------------------------------------------------------------------------


def _table(folder: Path, batches: dict[str, int], *, features: bool = True):
    from omni_iceberg.api import Omni
    from omni_iceberg.features.library import BUILTINS

    home = folder / "home"
    omni = Omni(home=home)
    omni.create_table("web")
    start = 0
    for batch, count in batches.items():
        write_docs(folder / f"{batch}.jsonl", start, count, tag=batch)
        omni.submit("web", [str(folder / f"{batch}.jsonl")], batch=batch, progress=False)
        start += count
    if features:
        omni.register_features("web", [b for b in BUILTINS if b.definition.name in FEATURES])
    return home


def _family_problems(home: Path, *, final: bool) -> list[str]:
    from omni_iceberg.api import Omni

    omni = Omni(home=home)
    problems = check_family(omni, "web").anomalies + computed_twice(omni, "web")
    if final:
        problems += [f"left behind: {r}" for r in staging_leftovers(omni, "web")]
    return problems


# ---- kills -------------------------------------------------------------------------------


def kill_campaign(total: int, docs: int, rng: random.Random) -> dict[str, Any]:
    per_op = {op: total // len(OPERATIONS) + (i < total % len(OPERATIONS)) for i, op in enumerate(OPERATIONS)}
    results: dict[str, Any] = {}
    for op, count in per_op.items():
        stats = Counter(tried=0, survived=0, finished_first=0)
        failures: list[str] = []
        for i in range(count):
            folder = C.scratch_dir(f"reliability/kill-{op}")
            if op == "submit":
                home = _table(folder, {}, features=False)
                write_docs(folder / "new.jsonl", 0, docs, tag="new")
                args = ["submit", "web", str(folder / "new.jsonl"), "--batch", "new", "--no-progress"]
            elif op == "backfill":
                home = _table(folder, {"a": docs // 2, "b": docs - docs // 2})
                args = ["backfill", "web", "--features", "punctuation_ratio", "--isolation", "inline", "--no-progress"]
            else:
                home = _table(folder, {f"b{k}": max(1, docs // 5) for k in range(5)})
                args = ["compact", "web", "--min-files", "2"]
            delay = rng.uniform(*WINDOWS[op])
            outcome = run_and_kill("--home", str(home), *args, delay_s=delay)
            if not outcome.killed:
                stats["finished_first"] += 1
                if outcome.returncode != 0:
                    failures.append(f"{op} #{i}: exited {outcome.returncode} before the kill: {outcome.stderr[-300:]}")
                C.remove(folder)
                continue
            stats["tried"] += 1
            problems = _family_problems(home, final=False)
            rerun = run_omni("--home", str(home), *args)
            if rerun.returncode != 0:
                problems.append(f"rerun exited {rerun.returncode}: {rerun.stderr[-300:]}")
            problems += _family_problems(home, final=True)
            if problems:
                failures.append(f"{op} #{i} (kill after {delay:.2f} s): {problems[:3]}")
            else:
                stats["survived"] += 1
                C.remove(folder)  # keep the folders of failures for inspection
        results[op] = {**stats, "failures": failures}
        print(f"kills/{op}: survived {stats['survived']}/{stats['tried']} "
              f"({stats['finished_first']} finished before the kill)", file=sys.stderr)
    return results


# ---- fuzzed records ----------------------------------------------------------------------


def _fuzzer() -> Any | None:
    """The ingest fuzzer module ``tests/fuzz_records.py`` (``KINDS``, ``make_fuzz_input``,
    ``check_outcome``), or None where this checkout does not have it yet."""
    try:
        return importlib.import_module("tests.fuzz_records")
    except ImportError:
        return None


def fuzz_campaign(records: int, seed: int) -> dict[str, Any]:
    """``records`` fuzzed records, spread over every reader kind, each kind one ``submit``.

    ``lost`` = records neither stored, nor rejected, nor counted as duplicates;
    ``crashed`` = submits that raised something other than an ``OmniError``;
    ``problems`` = every mismatch ``check_outcome`` found (wrong text stored, a good
    record rejected, a bad one stored, a reject without a reason...).
    """
    fuzz = _fuzzer()
    if fuzz is None:
        return {"status": "not run: tests/fuzz_records.py (make_fuzz_input, check_outcome) is not on this branch"}
    from catalog_ext.errors import OmniError
    from omni_iceberg.api import Omni

    folder = C.scratch_dir("reliability/fuzz")
    omni = Omni(home=folder / "home")
    totals = Counter(input=0, landed=0, duplicates=0, rejected=0, rejected_with_reason=0, lost=0, crashed=0,
                     crashed_records=0)
    problems: list[str] = []
    per_kind = {k: records // len(fuzz.KINDS) + (i < records % len(fuzz.KINDS)) for i, k in enumerate(fuzz.KINDS)}
    for kind, n in per_kind.items():
        data = fuzz.make_fuzz_input(kind, folder / kind, n=n, seed=seed)
        table = f"fuzz_{kind}"
        omni.create_table(table)
        totals["input"] += n
        try:
            report = omni.submit(table, data.paths, batch="fuzz", kind=kind, progress=False)
        except OmniError as e:  # refused as a whole (e.g. too many rejects): nothing lost, nothing landed
            problems.append(f"{kind}: submit refused: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - a crash is what this part counts
            totals["crashed"] += 1
            totals["crashed_records"] += n
            problems.append(f"{kind}: crashed with {type(e).__name__}: {e}")
            continue
        rows = omni.read(table, columns=["RawData"]).column("RawData").to_pylist()
        rejects = omni.rejects(table, "fuzz").to_pylist()
        totals["landed"] += report.written
        totals["duplicates"] += report.duplicates
        totals["rejected"] += report.rejected
        totals["rejected_with_reason"] += sum(1 for r in rejects if (r.get("reason") or "").strip())
        totals["lost"] += max(0, n - report.written - report.rejected - report.duplicates)
        problems += [f"{kind}: {p}" for p in fuzz.check_outcome(data, report, rows, rejects)]
    if not problems:
        C.remove(folder)
    return {"status": "run", **totals, "problems": len(problems), "problem_examples": problems[:20]}


# ---- SQL escapes -------------------------------------------------------------------------


def _escape_corpus() -> dict[str, Any] | None:
    """``tests/fixtures/sql_escape_corpus.yaml`` (``queries``, ``columns``, ``conditions``), or None."""
    path = C.ROOT / "tests" / "fixtures" / "sql_escape_corpus.yaml"
    if not path.is_file():
        return None
    import yaml

    return yaml.safe_load(path.read_text())


def _cli(argv: list[str]) -> tuple[int, str]:
    """``omni ARGV`` in this process: (exit code, stdout + stderr)."""
    import contextlib
    import io

    from omni_iceberg.cli import main as omni_main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            code = omni_main(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
        except Exception as e:  # noqa: BLE001 - counted as a crash below
            buf.write(f"Traceback: {type(e).__name__}: {e}")
            code = 70
    return code, buf.getvalue()


def escape_campaign() -> dict[str, Any]:
    """Every payload of the corpus through ``omni sql``, ``export --columns`` and ``export --where``.

    *escaped*: the canary's text reached the output or a file appeared where nothing may
    be written; *blocked*: no such effect and the payload met its expectation (refused
    with exit 2, or - marked ``harmless``/``either`` - ran as inert data); *not refused*:
    no effect, but a payload that must be refused ran; *crashed*: a traceback.
    """
    corpus = _escape_corpus()
    if corpus is None:
        return {"status": "not run: tests/fixtures/sql_escape_corpus.yaml is not on this branch"}
    from omni_iceberg.api import Omni
    from tests import feature_udfs as U

    folder = C.scratch_dir("reliability/escape")
    canary = folder / "outside" / "canary.txt"
    canary.parent.mkdir()
    secret = f"canary-{random.getrandbits(64):016x}"
    canary.write_text(secret + "\n")
    out = folder / "out"
    out.mkdir()
    home = folder / "home"
    omni = Omni(home=home)
    omni.create_table("web")
    write_docs(folder / "docs.jsonl", 0, 6)
    omni.submit("web", [str(folder / "docs.jsonl")], batch="cc", progress=False)
    omni.register_features("web", [U.t_parse, U.t_lang, U.t_len])
    omni.backfill("web", ["t_len", "t_lang"], isolation="inline", progress=False)

    def fill(text: str) -> str:
        return text.replace("{canary}", str(canary)).replace("{canary_dir}", str(canary.parent)).replace("{out}", str(out))

    cases: list[tuple[str, str, list[str], Path | None]] = []
    for c in corpus.get("queries", []):
        cases.append((c["sql"], c.get("expect", "refused"), ["sql", fill(c["sql"]), "--format", "csv"], None))
    for i, cols in enumerate(corpus.get("columns", [])):
        dest = folder / f"ex-c{i}"
        cases.append((cols, "refused", ["export", "web", "--out", str(dest), "--columns", fill(cols), "--no-progress"],
                      dest))
    for i, c in enumerate(corpus.get("conditions", [])):
        dest = folder / f"ex-w{i}"
        cases.append((c["text"], c.get("expect", "refused"),
                      ["export", "web", "--out", str(dest), "--where", fill(c["text"]), "--no-progress"], dest))
    counts = Counter(tried=0, blocked=0, escaped=0, not_refused=0, crashed=0)
    findings: list[str] = []
    for payload, expect, argv, dest in cases:
        counts["tried"] += 1
        code, text = _cli(["--home", str(home), *argv])
        if dest is not None and dest.exists():
            text += "".join(p.read_text(errors="replace") for p in dest.rglob("*") if p.is_file())
        written = sorted(p.name for p in out.iterdir())
        if secret in text or written:
            counts["escaped"] += 1
            findings.append(f"ESCAPED {payload[:70]!r}: {'read the canary' if secret in text else written}")
            for p in out.iterdir():
                p.unlink()
        elif "Traceback" in text or code not in (0, 2):
            counts["crashed"] += 1
            findings.append(f"crashed (exit {code}) {payload[:70]!r}: {text.strip()[-200:]}")
        elif expect == "refused" and code != 2:
            counts["not_refused"] += 1
            findings.append(f"not refused {payload[:70]!r}")
        elif expect == "harmless" and code != 0:
            counts["blocked"] += 1  # no effect either way; refusing an inert payload is only over-strict
            findings.append(f"inert payload refused {payload[:70]!r}: {text.strip()[-150:]}")
        else:
            counts["blocked"] += 1
    scope = _scope_probes(omni)
    clauses = _clause_probes(omni)
    findings += scope.pop("findings") + clauses.pop("findings")
    if not findings:
        C.remove(folder)
    return {"status": "run", **counts, "scope": scope, "clauses": clauses, "findings": findings[:40]}


def _scope_probes(omni: Any) -> dict[str, Any]:
    """Every name in DuckDB's own catalog (functions, macros, views: pg_settings, duckdb_settings,
    duckdb_columns, pg_proc, information_schema.*) in every spelling the escape tests know,
    the CTE-shadowing ones of issue #40 item 1 included, through ``Omni.query`` (the guard and
    the locked engine). *answered*: rows came back; anything else must be omni's own error."""
    from catalog_ext.errors import OmniError
    from tests.test_sql_security import CATALOG_SPELLINGS, _duckdb_catalog_names

    counts = Counter(tried=0, refused=0, answered=0, crashed=0)
    findings = []
    for schema, name in _duckdb_catalog_names():
        for spelling in CATALOG_SPELLINGS:
            sql = spelling.format(name=name, NAME=name.upper(), schema=schema)
            counts["tried"] += 1
            try:
                omni.query(sql)
            except OmniError:
                counts["refused"] += 1
                continue
            except Exception as e:  # noqa: BLE001 - counted
                counts["crashed"] += 1
                findings.append(f"scope probe crashed ({type(e).__name__}) {sql[:90]!r}")
                continue
            counts["answered"] += 1
            findings.append(f"ANSWERED {sql[:90]!r}")
    return {**counts, "spellings": len(CATALOG_SPELLINGS), "findings": findings}


def _clause_probes(omni: Any) -> dict[str, Any]:
    """Time travel and samples after a table name (issue #40 item 2): each must be honoured -
    the answer ``--as-of N`` gives, or the sample's size - or refused with omni's error; an
    answer that ignores the clause is *dropped*."""
    from catalog_ext.errors import OmniError

    def answer(sql: str, as_of: int | None = None) -> Any:
        try:
            return sorted(map(str, omni.query(sql, as_of=as_of).to_pylist()))
        except OmniError:
            return "refused"

    versions = [v.version for v in omni.log("web")]
    counts = Counter(tried=0, honoured=0, refused=0, dropped=0)
    findings = []

    def judge(sql: str, expected: Any) -> None:
        got = answer(sql)
        counts["tried"] += 1
        if got == "refused":
            counts["refused"] += 1
        elif got == expected:
            counts["honoured"] += 1
        else:
            counts["dropped"] += 1
            findings.append(f"clause dropped {sql!r}: {str(got)[:80]} (expected {str(expected)[:80]})")

    for v in versions:
        for query in ("SELECT count(*) AS n FROM web{c}", "SELECT t_len FROM web{c}"):
            expected = answer(query.format(c=""), as_of=v)
            for clause in (" AT (VERSION => {v})", " VERSION AS OF {v}", " FOR VERSION AS OF {v}"):
                judge(query.format(c=clause.format(v=v)), expected)
    for clause in (" FOR TIMESTAMP AS OF TIMESTAMP '2000-01-01'", " AT (TIMESTAMP => TIMESTAMP '2000-01-01')",
                   " TIMESTAMP AS OF '2000-01-01'"):
        judge(f"SELECT count(*) AS n FROM web{clause}", "must be refused")
    for sample in (" TABLESAMPLE reservoir(2 ROWS)", " USING SAMPLE 2 ROWS", " TABLESAMPLE reservoir(2 ROWS) AS w"):
        judge(f"SELECT count(*) AS n FROM web{sample}", ["{'n': 2}"])
    return {**counts, "findings": findings}


# ---- concurrent pairs --------------------------------------------------------------------


def _pairs(folder: Path, docs: int) -> dict[str, tuple[Path, list[str], list[str], Callable[[Any], list[str]]]]:
    """name -> (home, command A, command B, extra checks on the Omni after both)."""
    inline = ["--isolation", "inline", "--no-progress"]
    out = {}

    home = _table(folder / "ss", {}, features=False)
    write_docs(folder / "ss" / "same.jsonl", 0, docs)
    same = str(folder / "ss" / "same.jsonl")
    out["submit/submit same content"] = (
        home, ["submit", "web", same, "--batch", "x", "--no-progress"],
        ["submit", "web", same, "--batch", "y", "--no-progress"],
        lambda o: [] if o.read("web", columns=["_ai_unique_id_"]).num_rows == docs else ["rows != distinct docs"])

    home = _table(folder / "bb", {"a": docs})
    out["backfill/backfill shared ancestor"] = (
        home, ["backfill", "web", "--features", "punctuation_ratio", *inline],
        ["backfill", "web", "--features", "digit_ratio", *inline],
        lambda o: [f"{c}: {n} nulls" for c in ("punctuation_ratio", "digit_ratio")
                   if (n := feature_nulls(o, "web", c))])

    home = _table(folder / "sb", {"a": docs})
    write_docs(folder / "sb" / "b.jsonl", docs, docs, tag="b")
    out["submit/backfill"] = (
        home, ["submit", "web", str(folder / "sb" / "b.jsonl"), "--batch", "b", "--no-progress"],
        ["backfill", "web", "--features", "punctuation_ratio", "--batches", "a", *inline],
        lambda o: ([] if o.read("web", columns=["_ai_unique_id_"]).num_rows == 2 * docs else ["rows lost"])
        + ([] if feature_nulls(o, "web", "punctuation_ratio", ["a"]) == 0 else ["feature values lost"]))

    home = _table(folder / "bc", {f"b{k}": max(1, docs // 4) for k in range(4)})
    out["backfill/compaction"] = (
        home, ["backfill", "web", "--features", "punctuation_ratio", *inline], ["compact", "web", "--min-files", "2"],
        lambda o: [] if feature_nulls(o, "web", "punctuation_ratio") == 0 else ["feature values lost"])

    home = _table(folder / "rr", {"a": 50}, features=False)
    one = builtin_definitions_file(folder / "rr" / "one.json", ["html_parser", "punctuation_ratio"])
    two = builtin_definitions_file(folder / "rr" / "two.json", ["html_parser", "digit_ratio"])
    out["register/register"] = (
        home, ["feature", "register", str(one), "--table", "web"], ["feature", "register", str(two), "--table", "web"],
        lambda o: [] if {f.name for f in o.state("web").features} == set(FEATURES) else ["a registration was lost"])
    return out


def pair_campaign(runs: int, docs: int) -> dict[str, Any]:
    from omni_iceberg.api import Omni

    results: dict[str, Any] = {}
    for r in range(runs):
        folder = C.scratch_dir("reliability/pairs")
        for name, (home, a, b, extra) in _pairs(folder, docs).items():
            res = results.setdefault(name, {"run": 0, "anomalies": 0, "details": []})
            res["run"] += 1
            oa, ob = run_pair(["--home", str(home), *a], ["--home", str(home), *b], folder / "go")
            problems = [f"exit {o.returncode}: {o.stderr.strip()[-200:]}" for o in (oa, ob) if o.returncode != 0]
            problems += _family_problems(home, final=True) + extra(Omni(home=home))
            if problems:
                res["anomalies"] += 1
                res["details"].append(f"run {r}: {problems[:3]}")
        if not any(results[n]["details"] for n in results):
            C.remove(folder)
        print(f"pairs run {r + 1}/{runs}: " + ", ".join(f"{n} {v['anomalies']}" for n, v in results.items()),
              file=sys.stderr)
    return results


# ---- writer races ------------------------------------------------------------------------


#: Finished writer pairs, one JSON line each, so that a long campaign can be resumed
#: (``--resume``) or published part-way with the pairs it finished.
RACE_CHECKPOINT = C.OUT / "reliability" / "races.jsonl"


def _race_checkpoint(runs: int, docs: int) -> dict[str, Any]:
    """Pairs already finished with these ``runs`` and ``docs`` (the last line of a pair wins)."""
    done: dict[str, Any] = {}
    if RACE_CHECKPOINT.is_file():
        for line in RACE_CHECKPOINT.read_text().splitlines():
            entry = json.loads(line)
            if entry["runs"] == runs and entry["docs"] == docs:
                # the code a pair ran on: a campaign resumed across commits mixes them
                done[entry["pair"]] = {**entry["result"], "commit": entry.get("commit"), "date": entry.get("date")}
    return done


def race_campaign(runs: int, docs: int, only: str = "", resume: bool = False) -> dict[str, Any]:
    """Every pair of writers (or the ``a/b`` pairs named in ``only``), ``runs`` times each, as two
    ``omni`` processes on a fresh :func:`tests.faults.race_table`; per pair, what it found.

    A run is *clean* when both commands ended as a race allows (:data:`CLEAN_EXIT_CODES`)
    and :func:`tests.faults.race_problems` found nothing. The folders of runs that were not
    are kept under ``benchmarks/out/reliability/races`` for inspection.
    """
    from omni_iceberg.api import Omni

    wanted = {tuple(p.split("/")) for p in only.split(",") if p.strip()}
    pairs = [p for p in writer_pairs() if not wanted or p in wanted or p[::-1] in wanted]
    unknown = wanted - set(pairs) - {p[::-1] for p in pairs}
    if unknown:
        raise SystemExit(f"--race-pairs: no writer pair {', '.join('/'.join(p) for p in sorted(unknown))} "
                         f"(pairs of: {', '.join(sorted({w for p in writer_pairs() for w in p}))})")
    results: dict[str, Any] = {}
    done = _race_checkpoint(runs, docs) if resume else {}
    RACE_CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
    for first, second in pairs:
        if f"{first}/{second}" in done:
            results[f"{first}/{second}"] = done[f"{first}/{second}"]
            continue
        res = {"run": 0, "clean": 0, "exits": Counter(), "failed_commands": 0, "duplicate_pairs": 0,
               "verify_failed": 0, "missing": 0, "stale": 0, "dangling": 0, "pending": 0, "details": []}
        for r in range(runs):
            folder = C.scratch_dir("reliability/races")
            home = race_table(folder, docs)
            outcomes = run_pair(["--home", str(home), *writer_argv(first, "a", folder)],
                                ["--home", str(home), *writer_argv(second, "b", folder)], folder / "go")
            res["run"] += 1
            problems = []
            for writer, o in zip((first, second), outcomes):
                res["exits"][str(o.returncode)] += 1
                if o.returncode not in CLEAN_EXIT_CODES:
                    res["failed_commands"] += 1
                    problems.append(f"{writer} exited {o.returncode}: {o.stderr.strip()[-300:]}")
            found, counts = race_problems(Omni(home=home), "web")
            problems += found
            res["duplicate_pairs"] += counts.get("duplicate_pairs") or 0
            res["verify_failed"] += counts.get("verify_ok") is not True
            for k in ("missing", "stale", "dangling", "pending"):
                res[k] += counts.get(k) or 0
            if problems:
                res["details"].append(f"run {r} ({folder}): {problems[:3]}")
            else:
                res["clean"] += 1
                C.remove(folder)
        res["exits"] = dict(sorted(res["exits"].items()))
        res["commit"], res["date"] = C.git_facts()["commit"], time.strftime("%Y-%m-%d %H:%M")
        results[f"{first}/{second}"] = res
        with open(RACE_CHECKPOINT, "a") as f:
            f.write(json.dumps({"pair": f"{first}/{second}", "runs": runs, "docs": docs, "result": res,
                                "commit": C.git_facts()["commit"], "date": time.strftime("%Y-%m-%d %H:%M")}) + "\n")
        print(f"races/{first}/{second}: clean {res['clean']}/{res['run']}, duplicated (id, batch) pairs "
              f"{res['duplicate_pairs']}, verify failed {res['verify_failed']}, exits {res['exits']}",
              file=sys.stderr)
    return results


# ---- hostile files -----------------------------------------------------------------------

#: A submit that has not ended after this long is a hang (the worst case, 3 GiB of zeros
#: to inflate and refuse, takes seconds; a FIFO opened for reading blocks for ever).
HOSTILE_TIMEOUT_S = 300


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)  # holes: nothing on disk, all of it if read


def _zeros_gz(path: Path, zeros: int, before: str, after: str) -> None:
    """A .jsonl.gz: a good line, then ``zeros`` '0' characters on one line, then a good line."""
    import zlib

    comp = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
    chunk = b"0" * (64 << 20)
    with open(path, "wb") as f:
        f.write(comp.compress((before + "\n").encode()))
        left = zeros
        while left:
            piece = chunk[: min(left, len(chunk))]
            f.write(comp.compress(piece))
            left -= len(piece)
        f.write(comp.compress(("\n" + after + "\n").encode()))
        f.write(comp.flush())


def _hostile_cases(folder: Path) -> list[dict[str, Any]]:
    """Each case: sources for one ``omni submit``, the rows and rejects expected, the files whose
    rejects must name them, and text that must not land (a canary outside the submitted tree).

    The cases are those of issue #40 item 5, at its sizes: a FIFO and a socket in a folder,
    a FIFO among Parquet files (the schema check), a 2 GiB sparse .jsonl and HTML page, a
    .jsonl.gz holding 3 GiB of zeros on one line, links out of an HTML folder and a code tree
    (refused by default; ``--follow-links`` reads them).
    """
    import os
    import socket

    import pyarrow as pa
    import pyarrow.parquet as pq

    outside = folder / "outside"
    outside.mkdir()
    canary = f"canary-{random.getrandbits(64):016x}"
    (outside / "shadow").write_text(f"root:{canary}:19000:0:99999:7:::\n")
    (outside / "more.html").write_text(f"<p>outside page {canary}</p>")
    (outside / "secret.py").write_text(f"KEY = '{canary}'\n")
    cases: list[dict[str, Any]] = []

    src = folder / "fifo"
    src.mkdir()
    (src / "a.jsonl").write_text('{"raw_data": "one"}\n')
    os.mkfifo(src / "b.jsonl")
    sock = socket.socket(socket.AF_UNIX)  # bound for the whole part: a socket file in the folder
    sock.bind(str(src / "c.jsonl"))
    (src / "d.jsonl").write_text('{"raw_data": "two"}\n')
    cases.append({"name": "FIFO and socket in a JSONL folder", "sources": [src], "written": 2, "rejected": 2,
                  "named": [src / "b.jsonl", src / "c.jsonl"], "socket": sock})

    src = folder / "parquet"
    src.mkdir()
    pq.write_table(pa.table({"raw_data": ["p1", "p2"]}), src / "a.parquet")
    os.mkfifo(src / "b.parquet")
    cases.append({"name": "FIFO among Parquet files (schema check)", "sources": [src], "written": 2, "rejected": 1,
                  "named": [src / "b.parquet"]})

    src = folder / "sparse-jsonl"
    src.mkdir()
    (src / "a.jsonl").write_text('{"raw_data": "small"}\n')
    _sparse(src / "big.jsonl", 2 << 30)
    cases.append({"name": "2 GiB sparse .jsonl (one line of NULs)", "sources": [src], "written": 1, "rejected": 1,
                  "named": [src / "big.jsonl"]})

    src = folder / "sparse-html"
    src.mkdir()
    (src / "a.html").write_text("<p>small page</p>")
    _sparse(src / "big.html", 2 << 30)
    cases.append({"name": "2 GiB sparse HTML page", "sources": [src], "written": 1, "rejected": 1,
                  "named": [src / "big.html"]})

    src = folder / "bomb"
    src.mkdir()
    _zeros_gz(src / "bomb.jsonl.gz", 3 << 30, '{"raw_data": "before"}', '{"raw_data": "after"}')
    cases.append({"name": f".jsonl.gz of {(src / 'bomb.jsonl.gz').stat().st_size / 2**20:.0f} MiB: 3 GiB of zeros "
                          "on one line between two good lines", "sources": [src / "bomb.jsonl.gz"], "written": 2,
                  "rejected": 1, "named": [src / "bomb.jsonl.gz"]})

    src = folder / "links-html"
    src.mkdir()
    (src / "a.html").write_text("<p>inside</p>")
    os.symlink(outside / "shadow", src / "shadow.html")
    os.symlink(outside, src / "ext")
    cases.append({"name": "links out of an HTML folder (a file, a folder)", "sources": [src], "written": 1,
                  "rejected": 2, "named": [src / "shadow.html", src / "ext"], "canary": canary})
    # a.html is a duplicate of the batch before: the two linked pages are the new rows
    cases.append({"name": "the same with --follow-links (the flag reads them)", "sources": [src], "written": 2,
                  "rejected": 0, "named": [], "flags": ["--follow-links"], "must_contain": canary})

    src = folder / "links-code"
    src.mkdir()
    (src / "main.py").write_text("print('hi')\n")
    os.symlink(outside / "secret.py", src / "secret.py")
    cases.append({"name": "a link out of a code tree", "sources": [src], "written": 1, "rejected": 1,
                  "named": [src / "secret.py"], "canary": canary})
    return cases


#: The child omni process writes its own peak RSS (VmHWM of its address space after exec)
#: when it exits. ru_maxrss cannot be used: a forked child starts from a copy of this
#: (large) benchmark process, and the kernel keeps that copy's size as the child's maximum.
_PEAK_CHILD = r"""
import atexit, os, sys

def _peak():
    with open("/proc/self/status") as f:
        kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(os.environ["OMNI_PEAK_FILE"], "w") as f:
        f.write(kib)

atexit.register(_peak)
import omni_iceberg.cli as cli
raise SystemExit(cli.main(sys.argv[1:]))
"""


def _run_bounded(argv: list[str], timeout_s: float) -> tuple[int | None, float, float, str]:
    """Run ``omni ARGV`` in its own process group: (exit code or None when it hung and was
    killed, peak RSS of the omni process in MiB - 0 when it was killed -, seconds, stderr's tail)."""
    import os
    import signal
    import subprocess
    import tempfile

    from tests.faults import child_env

    with open(Path(os.devnull), "w") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.NamedTemporaryFile("r") as peak:
        proc = subprocess.Popen([sys.executable, "-c", _PEAK_CHILD, *argv], cwd=C.ROOT,
                                env=child_env(OMNI_PEAK_FILE=peak.name), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, text=True, start_new_session=True)
        started = time.monotonic()
        code: int | None = None
        while True:
            pid, status, _usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - started > timeout_s:
                os.killpg(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = -1  # reaped above; keeps Popen from waiting again
        seconds = time.monotonic() - started
        err.seek(0)
        text = peak.read().strip()
        return code, (int(text) / 1024 if text else 0.0), seconds, err.read()[-400:]


def hostile_campaign() -> dict[str, Any]:
    """Every hostile input of :func:`_hostile_cases` through ``omni submit`` in a child process.

    *handled*: the submit ended within :data:`HOSTILE_TIMEOUT_S` with exit 0, the good
    records landed, each hostile file is a reject with a reason naming it, no canary text
    landed (unless ``--follow-links`` asked for it), and the process's peak RSS stayed under
    ``OMNI_MEMORY_LIMIT_MB`` (the memory one local operation may hold; the record and
    document limits are left at a user's defaults). The same submit of one small good file
    is the baseline RSS, measured in the same run.
    """
    from catalog_ext import settings
    from omni_iceberg.api import Omni

    limit_mib = float(settings.value("OMNI_MEMORY_LIMIT_MB"))
    folder = C.scratch_dir("reliability/hostile")
    home = folder / "home"
    omni = Omni(home=home)
    for name in ("web", "code"):
        omni.create_table(name)
    (folder / "good.jsonl").write_text('{"raw_data": "baseline"}\n')
    code, base_rss, base_s, err = _run_bounded(
        ["--home", str(home), "submit", "web", str(folder / "good.jsonl"), "--batch", "base", "--no-progress"],
        HOSTILE_TIMEOUT_S)
    if code != 0:
        raise RuntimeError(f"the baseline submit failed (exit {code}): {err}")
    cases = _hostile_cases(folder)
    rows: list[dict[str, Any]] = []
    for i, case in enumerate(cases):
        table = "code" if "code tree" in case["name"] else "web"
        batch = f"h{i}"
        argv = ["--home", str(home), "submit", table, *map(str, case["sources"]), "--batch", batch, "--no-progress",
                *case.get("flags", [])]
        code, rss, seconds, err = _run_bounded(argv, HOSTILE_TIMEOUT_S)
        problems = []
        if code is None:
            problems.append(f"hung: killed after {HOSTILE_TIMEOUT_S} s")
        elif code != 0:
            problems.append(f"exit {code}: {err.strip()}")
        written = rejected = 0
        if code == 0:
            texts = [r["raw_data"] for r in omni.read(table, columns=["RawData"], batches=[batch])
                     .column("RawData").to_pylist()]
            rejects = omni.rejects(table, batch).to_pylist()
            written, rejected = len(texts), len(rejects)
            if (written, rejected) != (case["written"], case["rejected"]):
                problems.append(f"rows/rejects {written}/{rejected}, expected {case['written']}/{case['rejected']}")
            by_file = {r["source_file"]: (r.get("reason") or "").strip() for r in rejects}
            for path in case["named"]:
                if not by_file.get(str(path)):
                    problems.append(f"no reject with a reason names {path.name}")
            if case.get("canary") and any(case["canary"] in t for t in texts):
                problems.append("text from outside the submitted tree landed")
            if case.get("must_contain") and not any(case["must_contain"] in t for t in texts):
                problems.append("--follow-links did not read the links")
        if rss > limit_mib:
            problems.append(f"peak RSS {rss:.0f} MiB over OMNI_MEMORY_LIMIT_MB {limit_mib:.0f}")
        rows.append({"case": case["name"], "exit": code, "seconds": round(seconds, 1), "peak_rss_mib": round(rss),
                     "written": written, "rejected": rejected, "handled": not problems, "problems": problems,
                     "reasons": sorted({r for r in (by_file.values() if code == 0 else []) if r})[:3]})
        print(f"hostile/{case['name']}: {'handled' if not problems else problems} (exit {code}, {seconds:.1f} s, "
              f"peak RSS {rss:.0f} MiB)", file=sys.stderr)
    for case in cases:
        if case.get("socket") is not None:
            case["socket"].close()
    if all(r["handled"] for r in rows):
        C.remove(folder)
    return {"status": "run", "tried": len(rows), "handled": sum(r["handled"] for r in rows),
            "hangs": sum(r["exit"] is None for r in rows), "memory_limit_mib": limit_mib,
            "baseline_rss_mib": round(base_rss), "baseline_seconds": round(base_s, 1),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in rows), "cases": rows}


# ---- report ------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    lines = ["## Reliability", "", f"`{result['command']}` (seed {result['seed']})", ""]
    runs: dict[str, list[str]] = {}
    for part, facts in (result.get("part_runs") or {}).items():
        runs.setdefault(f"`{facts['command']}` at {facts['commit']}, {facts['date']}, load {facts['load_average']}",
                        []).append(part)
    if len(runs) > 1:
        lines += [f"- {', '.join(parts)}: {where}" for where, parts in runs.items()] + [""]
    lines += ["| part | what | result |", "| --- | --- | --- |"]
    for op, s in result["kills"].items():
        lines.append(f"| kill -9 | {op} | survived {s['survived']}/{s['tried']} "
                     f"({s['finished_first']} finished before the kill) |")
    f = result["fuzz"]
    if f["status"] == "run":
        lines.append(f"| fuzzed records | {f['input']} over every reader | landed {f['landed']}, duplicates "
                     f"{f['duplicates']}, rejected {f['rejected']} ({f['rejected_with_reason']} with a reason), "
                     f"lost {f['lost']}, crashed {f['crashed']}; {f['problems']} mismatches |")
    else:
        lines.append(f"| fuzzed records | - | {f['status']} |")
    e = result["escapes"]
    if e["status"] == "run":
        lines.append(f"| SQL escapes | {e['tried']} payloads (sql, export --columns/--where) | blocked "
                     f"{e['blocked']}/{e['tried']}, escaped {e['escaped']}, not refused {e['not_refused']}, "
                     f"crashed {e['crashed']} |")
        if e.get("scope"):
            sc = e["scope"]
            lines.append(f"| SQL scope probes | every DuckDB catalog name x {sc['spellings']} spellings (CTE shadowing "
                         f"of #40 included) | refused {sc['refused']}/{sc['tried']}, answered {sc['answered']}, "
                         f"crashed {sc['crashed']} |")
        if e.get("clauses"):
            cl = e["clauses"]
            lines.append(f"| SQL time travel / samples | {cl['tried']} clauses after a table name | honoured "
                         f"{cl['honoured']}, refused {cl['refused']}, dropped {cl['dropped']} |")
    else:
        lines.append(f"| SQL escapes | - | {e['status']} |")
    h = result.get("hostile", {"status": "not run"})
    if h["status"] == "run":
        for c in h["cases"]:
            state = "handled" if c["handled"] else "NOT handled: " + "; ".join(c["problems"])[:200]
            exit_text = "hung" if c["exit"] is None else f"exit {c['exit']}"
            lines.append(f"| hostile file | {c['case']} | {state}; {exit_text}, rows {c['written']}, rejects "
                         f"{c['rejected']}, peak RSS {c['peak_rss_mib']} MiB (limit {h['memory_limit_mib']:.0f}, "
                         f"small submit {h['baseline_rss_mib']}), {c['seconds']} s |")
    else:
        lines.append(f"| hostile files | - | {h['status']} |")
    for name, p in result["pairs"].items():
        lines.append(f"| concurrent pair | {name} | anomalies {p['anomalies']}/{p['run']} |")
    for name, r in result.get("races", {}).items():
        lines.append(f"| writer race | {name} | clean {r['clean']}/{r['run']}; duplicated (id, batch) pairs "
                     f"{r['duplicate_pairs']}; index verify failed {r['verify_failed']}/{r['run']} (missing "
                     f"{r['missing']}, stale {r['stale']}, dangling {r['dangling']}; pending {r['pending']}); "
                     f"failed commands {r['failed_commands']}"
                     + (f"; ran on {r['commit']}, {r.get('date')}" if r.get("commit") else "") + " |")
    races = result.get("races", {})
    missing = [f"{a}/{b}" for a, b in writer_pairs() if races and f"{a}/{b}" not in races]
    if missing:
        lines += ["", f"Writer pairs not run here ({len(missing)} of {len(writer_pairs())}): {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def _headlines(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Shares (1.0 = every fault handled); absent parts are left out rather than shown as 0."""
    heads = []
    tried = sum(s["tried"] for s in result["kills"].values())
    if tried:
        survived = sum(s["survived"] for s in result["kills"].values())
        heads.append(C.headline(f"kill -9 survived ({survived}/{tried})", survived / tried, "", "1.0",
                                survived == tried))
    f = result["fuzz"]
    if f["status"] == "run" and f["input"]:
        # a crashed submit leaves every record of its kind unhandled; a mismatch is one record
        bad = min(f["input"], f["lost"] + f["crashed_records"] + f["problems"] - f["crashed"])
        heads.append(C.headline(f"fuzzed records handled ({f['input']} records, {f['lost']} lost, "
                                f"{f['crashed']} crashed submits, {f['problems']} mismatches)",
                                1 - bad / f["input"], "", "1.0", bad == 0))
    e = result["escapes"]
    if e["status"] == "run" and e["tried"]:
        heads.append(C.headline(f"SQL escapes blocked ({e['blocked']}/{e['tried']})", e["blocked"] / e["tried"], "",
                                "1.0", e["blocked"] == e["tried"]))
    if e["status"] == "run" and e.get("scope"):
        sc, cl = e["scope"], e["clauses"]
        heads.append(C.headline(f"SQL scope probes refused ({sc['refused']}/{sc['tried']}: every DuckDB catalog name "
                                f"in {sc['spellings']} spellings; {sc['answered']} answered)",
                                sc["refused"] / sc["tried"], "", "1.0", sc["refused"] == sc["tried"]))
        ok = cl["honoured"] + cl["refused"]
        heads.append(C.headline(f"SQL time travel and samples honoured or refused ({ok}/{cl['tried']}; "
                                f"{cl['dropped']} dropped)", ok / cl["tried"], "", "1.0", ok == cl["tried"]))
    h = result.get("hostile", {"status": "not run"})
    if h["status"] == "run" and h["tried"]:
        heads.append(C.headline(f"hostile files handled ({h['handled']}/{h['tried']}; {h['hangs']} hangs; peak RSS "
                                f"{h['peak_rss_mib']} MiB, limit OMNI_MEMORY_LIMIT_MB {h['memory_limit_mib']:.0f})",
                                h["handled"] / h["tried"], "", "1.0", h["handled"] == h["tried"]))
    runs = sum(p["run"] for p in result["pairs"].values())
    if runs:
        clean = runs - sum(p["anomalies"] for p in result["pairs"].values())
        heads.append(C.headline(f"concurrent pairs without anomaly ({clean}/{runs})", clean / runs, "", "1.0",
                                clean == runs))
    races = result.get("races", {})
    runs = sum(r["run"] for r in races.values())
    if runs:
        clean = sum(r["clean"] for r in races.values())
        twice = sum(r["duplicate_pairs"] for r in races.values())
        heads.append(C.headline(f"writer races without anomaly ({clean}/{runs} over {len(races)} pairs; "
                                f"{twice} duplicated (id, batch) pairs)", clean / runs, "", "1.0", clean == runs))
        verified = runs - sum(r["verify_failed"] for r in races.values())
        heads.append(C.headline(f"index verify clean after writer races ({verified}/{runs})", verified / runs, "",
                                "1.0", verified == runs))
    return heads


def _merge_previous(result: dict[str, Any], parts: set[str]) -> None:
    """Carry the parts this run skipped from the results file, with the run each came from
    (a long part - the writer races - runs on its own beside the others)."""
    path = C.RESULTS / "reliability.json"
    if not path.is_file():
        return
    old = json.loads(path.read_text())
    earlier = {"command": old.get("command"), "commit": (old.get("git") or {}).get("commit"),
               "date": old.get("date"), "load_average": (old.get("machine") or {}).get("load_average")}
    for part in set(PARTS) - parts:
        value = old.get(part)
        ran = bool(value) and not (isinstance(value, dict) and str(value.get("status", "")).startswith("not run"))
        if ran:
            result[part] = value
            result["part_runs"][part] = (old.get("part_runs") or {}).get(part) or earlier
            result["params"].setdefault("carried", []).append(part)


def main(argv: list[str] | None = None) -> int:
    args = C.parse_args("reliability", __doc__, _add_args, argv)
    if args.quick:
        args.kills, args.records, args.pairs, args.docs = min(args.kills, 3), min(args.records, 300), 1, 600
        args.races, args.race_docs = 1, min(args.race_docs, 6)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if parts - set(PARTS):
        raise SystemExit(f"--parts: unknown part(s) {', '.join(sorted(parts - set(PARTS)))} (of {', '.join(PARTS)})")
    skipped = {"status": "not run (--parts)"}
    rng = random.Random(args.seed)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "title": "Reliability: kill -9, fuzzed records, SQL escapes and concurrent commands against the real omni",
        "command": C.command_line(args),
        "params": {"kills": args.kills, "records": args.records, "pairs": args.pairs, "docs": args.docs,
                   "races": args.races, "race_docs": args.race_docs, "parts": sorted(parts)},
        "seed": args.seed,
        "kills": kill_campaign(args.kills, args.docs, rng) if "kills" in parts else {},
        "fuzz": fuzz_campaign(args.records, args.seed) if "fuzz" in parts else skipped,
        "escapes": escape_campaign() if "escapes" in parts else skipped,
        "hostile": hostile_campaign() if "hostile" in parts else skipped,
        "pairs": pair_campaign(args.pairs, max(50, args.docs // 2)) if "pairs" in parts else {},
        "races": race_campaign(args.races, args.race_docs, args.race_pairs, args.resume) if "races" in parts else {},
    }
    run_facts = {"command": result["command"], "commit": args.git["commit"], "date": time.strftime("%Y-%m-%d %H:%M"),
                 "load_average": C.load_average(), "seconds": round(time.perf_counter() - started)}
    result["part_runs"] = {p: run_facts for p in sorted(parts)}
    if args.merge:
        _merge_previous(result, parts)
    result["headline"] = _headlines(result)
    snippet = markdown(result)
    rows = [line.strip("|").split(" | ") for line in snippet.splitlines() if line.startswith("| ") and "---" not in line]
    result["table"] = {"columns": [c.strip() for c in rows[0]], "rows": [[c.strip() for c in r] for r in rows[1:]]}
    C.write_result(args, result, started)
    (C.RESULTS / "reliability.md").write_text(snippet)
    print(snippet)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
