"""Leftovers of killed runs: stale staging branches, their files, orphans, and rejects.

Runs are killed for real (a subprocess that SIGKILLs itself at a chosen point), then
the next submit, backfill rerun or maintenance must leave storage as if the killed run
never happened - and keep everything a live or resumable run still needs.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

from catalog_ext import iceberg_io
from catalog_ext.staging import StagingPolicy, sweep_stale_branches
from governance.compaction import compact
from governance.leftovers import clean_leftovers
from omni_iceberg.api import Omni
from tests import feature_udfs as U

ROOT = Path(__file__).resolve().parents[1]

# Submit a batch, SIGKILL-ing this process at one point of the pipeline: after the
# batch is staged on its branch (just before the logical commit), or before anything
# is staged (data files written, no branch yet).
KILLED_SUBMIT = r"""
import os, signal, sys
from catalog_ext.physical import StagedWrite
from catalog_ext.store import FamilyStore
from omni_iceberg.api import Omni
from omni_iceberg.ingest import pipeline
home, src, batch, where = sys.argv[1:5]
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
if where == "before-commit":
    FamilyStore.commit = die
else:
    StagedWrite.stage = die
omni = Omni(home=home)
pipeline.submit(omni.store, "aidata", "web", [src], batch, chunk_rows=5)
"""


def _docs(path: Path, prefix: str, n: int, bad: int = 0) -> Path:
    rows = [json.dumps({"raw_data": f"{prefix} doc {i}"}) for i in range(n)]
    rows += [json.dumps({"raw_data": ""}) for _ in range(bad)]  # rejected: empty raw content
    path.write_text("\n".join(rows) + "\n")
    return path


def _data_files_on_disk(omni: Omni, identifier: str) -> set[str]:
    root = Path(urlparse(omni.catalog.load_table(identifier).location()).path) / "data"
    return {str(p) for p in root.rglob("*.parquet")}


def _referenced(omni: Omni, identifier: str) -> set[str]:
    table = omni.catalog.load_table(identifier)
    # from refs, not from every snapshot: a dropped branch's snapshots must be gone too
    paths = iceberg_io.reachable_data_files(table, [r.snapshot_id for r in table.metadata.refs.values()])
    return {urlparse(p).path for p in paths}


def _staging_refs(omni: Omni, identifier: str) -> list[str]:
    return [r for r in omni.catalog.load_table(identifier).metadata.refs if r.startswith("omni-stage-")]


def _kill_submit(home: Path, src: Path, batch: str, where: str) -> None:
    done = subprocess.run([sys.executable, "-c", KILLED_SUBMIT, str(home), str(src), batch, where], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == -9, done.stderr  # really killed, no cleanup code ran


@pytest.fixture
def web(tmp_path):
    omni = Omni(home=tmp_path / "home")
    omni.create_table("web")
    omni.submit("web", [str(_docs(tmp_path / "a.jsonl", "a", 20))], batch="a")
    return omni


def test_the_next_submit_removes_a_killed_submits_branch_files_and_rejects(web, tmp_path, monkeypatch):
    base = web.state("web").base_table.identifier
    before = _data_files_on_disk(web, base)
    src = _docs(tmp_path / "b.jsonl", "b", 30, bad=2)
    _kill_submit(web.config.home, src, "b", "before-commit")
    assert len(_staging_refs(web, base)) == 1
    dead_files = _data_files_on_disk(web, base) - before
    assert dead_files  # the killed run's files take space
    assert web.read("web").num_rows == 20  # and nobody sees them

    monkeypatch.setenv("OMNI_STAGE_GRACE_S", "0")  # the killed run is certainly not live any more
    report = web.submit("web", [str(src)], batch="b")
    assert report.written == 30 and report.rejected == 2
    assert _staging_refs(web, base) == []
    on_disk = _data_files_on_disk(web, base)
    assert not (dead_files & on_disk)  # the dead run's files were deleted
    assert on_disk == _referenced(web, base)  # nothing unreferenced is left behind
    assert web.read("web").num_rows == 50
    # both attempts wrote rejects; only the committed attempt's count as batch b's
    all_rows = web.catalog.load_table("omni_sys.rejects").scan().to_arrow()
    assert all_rows.num_rows == 4
    rejects = web.rejects("web", "b")
    assert rejects.num_rows == 2 and set(rejects.column("submit_id").to_pylist()) == {report.submit_id}


def test_a_live_submits_branch_is_kept_within_the_grace_period(web, tmp_path):
    base = web.state("web").base_table.identifier
    _kill_submit(web.config.home, _docs(tmp_path / "b.jsonl", "b", 10), "b", "before-commit")
    state = web.state("web")
    kept = sweep_stale_branches(web.catalog, state, policy=StagingPolicy(grace_s=3600, ttl_s=7200))
    assert [b.verdict for b in kept.branches] == ["live"] and not kept.removed
    assert len(_staging_refs(web, base)) == 1
    # the data files only the staging branch reaches: exactly what the sweep must delete
    table = web.catalog.load_table(base)
    head = table.metadata.refs[_staging_refs(web, base)[0]].snapshot_id
    on_main = {f["file_path"] for f in table.inspect.files(snapshot_id=state.base_table.snapshot_id).to_pylist()}
    staged = {f["file_path"]: f["file_size_in_bytes"] for f in table.inspect.files(snapshot_id=head).to_pylist()
              if f["file_path"] not in on_main}
    assert staged and all(Path(p.removeprefix("file://")).exists() for p in staged)
    gone = sweep_stale_branches(web.catalog, state, policy=StagingPolicy(grace_s=0, ttl_s=7200))
    assert [(b.verdict, b.removed) for b in gone.branches] == [("stale", True)]
    assert gone.branches[0].files_deleted == len(staged) and gone.branches[0].bytes_freed == sum(staged.values())
    assert not any(Path(p.removeprefix("file://")).exists() for p in staged)
    assert "never committed" in gone.branches[0].reason


def test_maintenance_deletes_files_of_a_run_killed_before_its_first_checkpoint(web, tmp_path):
    base = web.state("web").base_table.identifier
    before = _data_files_on_disk(web, base)
    _kill_submit(web.config.home, _docs(tmp_path / "b.jsonl", "b", 30), "b", "before-stage")
    assert _staging_refs(web, base) == []  # no metadata mentions the files it wrote
    orphans = _data_files_on_disk(web, base) - before
    assert orphans
    young = clean_leftovers(web.store, "web")  # default grace: they may belong to a live run
    assert young.orphans.orphan_files_deleted == 0 and orphans <= _data_files_on_disk(web, base)
    report = clean_leftovers(web.store, "web", orphan_grace_s=0)
    assert report.orphans.orphan_files_deleted == len(orphans)
    assert _data_files_on_disk(web, base) == before
    assert web.read("web").num_rows == 20


RESUMABLE_BACKFILL = r"""
import sys
from omni_iceberg.api import Omni
from tests import feature_udfs as U
Omni(home=sys.argv[1]).backfill("web", ["t_die"], isolation="inline", progress=False)
"""


def test_resumable_backfill_branch_is_kept_until_superseded_then_removed(tmp_path, monkeypatch):
    omni = Omni(home=tmp_path / "h")
    omni.create_table("web")
    for batch in ("a", "b"):
        src = tmp_path / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"{batch} doc {i}" + (" DIE" if batch == "b" and i == 3 else "")})
                               + "\n" for i in range(20)))
        omni.submit("web", [str(src)], batch=batch)
    omni.register_features("web", [U.t_die])
    marker = tmp_path / "die"
    marker.write_text("x")
    env = dict(os.environ, OMNI_TEST_DIE_MARKER=str(marker))
    killed = subprocess.run([sys.executable, "-c", RESUMABLE_BACKFILL, str(tmp_path / "h")], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert killed.returncode == 13, killed.stderr  # died on batch b, after checkpointing batch a
    state = omni.state("web")
    table = state.physical_table(state.feature("t_die").table_key).identifier
    (branch,) = _staging_refs(omni, table)
    dead_files = _data_files_on_disk(omni, table)
    assert dead_files

    policy = StagingPolicy(grace_s=0, ttl_s=3600)
    kept = sweep_stale_branches(omni.catalog, state, policy=policy)
    assert [(b.branch, b.verdict) for b in kept.branches] == [(branch, "resumable")]
    assert _staging_refs(omni, table) == [branch]

    marker.unlink()
    omni.backfill("web", ["t_die"], ["b"], isolation="inline")  # another plan commits: the old branch is superseded
    report = compact(omni.store, "web", min_files=1000, clean=False)  # nothing to compact; no cleanup asked
    assert report["plan"]["tables"] == [] and _staging_refs(omni, table) == [branch]
    monkeypatch.setenv("OMNI_STAGE_GRACE_S", "0")
    cleanup = compact(omni.store, "web", min_files=1000)["cleanup"]
    assert [(b["branch"], b["verdict"], b["removed"]) for b in cleanup["branches"]] == [(branch, "stale", True)]
    assert "superseded" in cleanup["branches"][0]["reason"]
    assert _staging_refs(omni, table) == []
    assert not (dead_files & _data_files_on_disk(omni, table))
    assert omni.read("web", columns=["t_die"], batches=["b"]).column("t_die").null_count == 0


def test_a_branch_left_by_an_interrupted_publish_is_dropped_and_its_data_kept(web, tmp_path, monkeypatch):
    from catalog_ext.physical import StagedWrite

    monkeypatch.setattr(StagedWrite, "publish", lambda self: None)  # the process "died" right after the commit
    web.submit("web", [str(_docs(tmp_path / "b.jsonl", "b", 10))], batch="b")
    monkeypatch.undo()
    state = web.state("web")
    base = state.base_table.identifier
    assert len(_staging_refs(web, base)) == 1
    report = sweep_stale_branches(web.catalog, state, policy=StagingPolicy(grace_s=3600, ttl_s=7200))
    assert [(b.verdict, b.removed, b.files_deleted) for b in report.branches] == [("committed", True, 0)]
    assert _staging_refs(web, base) == []
    assert web.read("web").num_rows == 30


def test_a_killed_submits_branch_outlives_only_the_short_ingest_grace(web, tmp_path):
    _kill_submit(web.config.home, _docs(tmp_path / "b.jsonl", "b", 10), "b", "before-commit")
    state = web.state("web")
    head = web.catalog.load_table(state.base_table.identifier).metadata.refs
    (branch,) = [r for r in head if r.startswith("omni-stage-")]
    ts = web.catalog.load_table(state.base_table.identifier).snapshot_by_id(head[branch].snapshot_id).timestamp_ms
    policy = StagingPolicy(grace_s=3600, ttl_s=7200, ingest_grace_s=600)
    soon = sweep_stale_branches(web.catalog, state, policy=policy, dry_run=True, now_ms=ts + 599_000)
    later = sweep_stale_branches(web.catalog, state, policy=policy, dry_run=True, now_ms=ts + 601_000)
    assert [b.verdict for b in soon.branches] == ["live"] and [b.verdict for b in later.branches] == ["stale"]
