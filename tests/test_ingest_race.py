"""Concurrent submits of overlapping content: every id lands exactly once (md5 tables).

The race is forced, not hoped for: each writer is held at a barrier right before its
logical commit, after dedup and after its data files are written, so all of them
dedup against the same base and all but one must lose the commit and rebase.
"""

import json
import subprocess
import sys
from pathlib import Path

from catalog_ext.store import FamilyStore
from omni_iceberg.api import Omni
from omni_iceberg.ingest import recheck
from omni_iceberg.ingest.identity import content_id

ROOT = Path(__file__).resolve().parents[1]

WRITER = r"""
import json, sys, time
from pathlib import Path
from catalog_ext.store import FamilyStore
from omni_iceberg.api import Omni

home, batch, src, gate, parties = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
real_commit = FamilyStore.commit

def at_barrier(self, *args, **kwargs):
    (gate / f"{batch}.ready").touch()
    deadline = time.monotonic() + 300  # a hang guard, not a timing assumption
    while len(list(gate.glob("*.ready"))) < parties:
        if time.monotonic() > deadline:
            raise SystemExit("barrier: the other writers never arrived")
        time.sleep(0.02)
    return real_commit(self, *args, **kwargs)

FamilyStore.commit = at_barrier
report = Omni(home=home).submit("web", [src], batch=batch, progress=False)
print(json.dumps(report.to_dict()))
"""


def test_three_concurrent_submits_of_the_same_content_write_each_id_once(tmp_path):
    home = tmp_path / "home"
    omni = Omni(home=home)
    omni.create_table("web")
    omni.submit("web", [_jsonl(tmp_path / "old.jsonl", [f"old doc {i}" for i in range(30)])], batch="old")
    # the same content for all three, with repeats inside and overlap with the earlier batch
    texts = [f"doc {i % 250}" for i in range(300)] + [f"old doc {i}" for i in range(10)]
    src = _jsonl(tmp_path / "same.jsonl", texts)
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(home), batch, src, str(gate), "3"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for batch in ("x", "y", "z")]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))

    ids = omni.read("web", columns=["_ai_unique_id_"]).column(0).to_pylist()
    assert len(ids) == len(set(ids)) == 280
    assert set(ids) == {content_id(t) for t in set(texts) | {f"old doc {i}" for i in range(30)}}
    for r in reports:  # every report adds up
        assert r["read"] == 310 and r["read"] == r["written"] + r["duplicates"] + r["rejected"]
    written = sorted(r["written"] for r in reports)
    assert written == [0, 0, 250]  # one winner; the others found all their rows already there
    state = omni.state("web")
    for r in reports:  # the committed batch records agree with the reports
        b = state.batch(r["batch"])
        assert (b.rows, b.duplicates) == (r["written"], r["duplicates"])
        assert omni.read("web", batches=[r["batch"]]).num_rows == r["written"]
    base = omni.catalog.load_table(state.base_table.identifier)
    assert not [ref for ref in base.metadata.refs if ref.startswith("omni-stage-")]


def test_a_race_loser_rewrites_its_files_without_the_winners_ids_reading_only_their_files(tmp_path, monkeypatch):
    """In one process: B commits while A waits at its commit; A keeps only what B did not add."""
    omni = Omni(home=tmp_path / "home")
    omni.create_table("web")
    omni.submit("web", [_jsonl(tmp_path / "old.jsonl", [f"old {i}" for i in range(40)])], batch="old")
    a_src = _jsonl(tmp_path / "a.jsonl", [f"doc {i}" for i in range(0, 100)])
    b_src = _jsonl(tmp_path / "b.jsonl", [f"doc {i}" for i in range(60, 130)])
    real_commit = FamilyStore.commit
    checks: list[recheck.WinnerCheck] = []
    real_init = recheck.WinnerCheck.__init__

    def remember(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        checks.append(self)

    def b_wins_first(self, namespace, name, updates, **kwargs):
        if kwargs.get("operation") == "ingest" and not hasattr(b_wins_first, "done"):
            b_wins_first.done = True
            b = omni.submit("web", [b_src], batch="b")  # runs its own commit through this same hook
            assert b.written == 70
        return real_commit(self, namespace, name, updates, **kwargs)

    monkeypatch.setattr(recheck.WinnerCheck, "__init__", remember)
    monkeypatch.setattr(FamilyStore, "commit", b_wins_first)
    a = omni.submit("web", [a_src], batch="a", progress=False)
    monkeypatch.undo()

    assert (a.read, a.written, a.duplicates) == (100, 60, 40)
    ids = omni.read("web", columns=["_ai_unique_id_"]).column(0).to_pylist()
    assert len(ids) == len(set(ids)) == 40 + 130
    assert omni.read("web", batches=["a"]).num_rows == 60
    state = omni.state("web")
    assert (state.batch("a").rows, state.batch("a").duplicates) == (60, 40)
    # the re-check read B's files only: not the 40-row batch before, not A's own
    base = omni.catalog.load_table(state.base_table.identifier)
    b_snapshot = next(s for s in base.snapshots() if (s.summary or {}).get("omni.batch") == "b")
    from catalog_ext import iceberg_io

    b_files = {f.file_path for f in iceberg_io.added_data_files(base, b_snapshot.snapshot_id)}
    a_check = next(c for c in checks if c.files_read)
    assert set(a_check.files_read) == b_files


def test_the_ids_a_loser_keeps_are_checked_through_every_winner(tmp_path, monkeypatch):
    """Two winners in turn (B, then C) while A waits: A is re-checked against both."""
    omni = Omni(home=tmp_path / "home")
    omni.create_table("web")
    a_src = _jsonl(tmp_path / "a.jsonl", [f"doc {i}" for i in range(30)])
    b_src = _jsonl(tmp_path / "b.jsonl", [f"doc {i}" for i in range(0, 10)])
    c_src = _jsonl(tmp_path / "c.jsonl", [f"doc {i}" for i in range(20, 40)])
    real_commit = FamilyStore.commit
    order = iter(["b", "c"])

    def winners_first(self, namespace, name, updates, **kwargs):
        nxt = next(order, None)
        if nxt is not None:
            omni.submit("web", [b_src if nxt == "b" else c_src], batch=nxt)
        return real_commit(self, namespace, name, updates, **kwargs)

    monkeypatch.setattr(FamilyStore, "commit", winners_first)
    a = omni.submit("web", [a_src], batch="a", progress=False)
    monkeypatch.undo()
    assert (a.written, a.duplicates) == (10, 20)
    ids = omni.read("web", columns=["_ai_unique_id_"]).column(0).to_pylist()
    assert len(ids) == len(set(ids)) == 40


def _jsonl(path: Path, texts: list[str]) -> str:
    path.write_text("".join(json.dumps({"raw_data": t}) + "\n" for t in texts))
    return str(path)


def test_added_between_follows_ancestry_and_falls_back_to_every_live_file(tmp_path):
    omni = Omni(home=tmp_path / "home")
    omni.create_table("web")
    omni.submit("web", [_jsonl(tmp_path / "a.jsonl", ["a1", "a2"])], batch="a")
    after_a = omni.state("web").base_table.snapshot_id
    omni.submit("web", [_jsonl(tmp_path / "b.jsonl", ["b1", "b2", "b3"])], batch="b")
    state = omni.state("web")
    table = omni.catalog.load_table(state.base_table.identifier)
    until = state.base_table.snapshot_id

    def rows(files):
        return sorted(recheck.read_data_files(table, files, ("_ai_unique_id_",)).column(0).to_pylist())

    assert rows(recheck.added_between(table, after_a, until)) == sorted(content_id(t) for t in ("b1", "b2", "b3"))
    assert recheck.added_between(table, until, until) == []
    # a base that is no ancestor (history rewritten): every live file, slower but still correct
    everything = sorted(content_id(t) for t in ("a1", "a2", "b1", "b2", "b3"))
    assert rows(recheck.added_between(table, 12345, until)) == everything
