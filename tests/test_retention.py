"""Retention (governance/retention.py) on a real embedded SQLite catalog with real Parquet files.

What a user relies on: the last K versions plus tagged and manifest-pinned ones stay
readable with exactly the same rows; the rest is gone from disk; an expired ``--as-of``
names the oldest kept version; a crash or a concurrent writer never leaves a broken
table; the id index still answers after the history under it was cut.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.errors import NoSuchVersionError
from catalog_ext.store import FamilyStore
from governance import RetentionError, RetentionPolicy, apply_retention, plan_retention
from omni_iceberg.api import Omni

NAME = "web"


@pytest.fixture
def omni(omni_home):
    return Omni(config=omni_home)


def _jsonl(tmp_path: Path, tag: str, n: int) -> str:
    path = tmp_path / f"{tag}.jsonl"
    path.write_text("".join(json.dumps({"raw_data": f"<p>page {i} of {tag}: text {i * 7}</p>",
                                        "url": f"https://example.org/{tag}/{i}"}) + "\n" for i in range(n)))
    return str(path)


def _ingest(omni: Omni, tmp_path: Path, batches: list[str], rows: int = 6) -> None:
    for b in batches:
        omni.submit(NAME, [_jsonl(tmp_path, b, rows)], batch=b)


def _rows(omni: Omni, as_of=None) -> list[tuple]:
    data = omni.read(NAME, columns=[ID_COLUMN, BATCH_COLUMN], as_of=as_of).to_pylist()
    return sorted((r[ID_COLUMN], r[BATCH_COLUMN]) for r in data)


def _disk(root: Path) -> tuple[int, set[str]]:
    files = {str(p) for p in root.rglob("*") if p.is_file()}
    return sum(os.path.getsize(f) for f in files), files


def _policy(k: int, **kw) -> RetentionPolicy:
    return RetentionPolicy(keep_last=k, min_age_s=0, **kw)


def _versions(omni: Omni) -> list[int]:
    return [v.version for v in omni.log(NAME)]


def test_keeps_the_last_k_and_tagged_versions_and_they_read_the_same_rows(omni, tmp_path):
    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b"])
    omni.tag(NAME, "early")  # v4 records the tag of v3
    _ingest(omni, tmp_path, ["c", "d", "e", "f"])  # v5..v8
    before = {v: _rows(omni, v) for v in _versions(omni)}
    plan = plan_retention(omni.store, NAME, _policy(3))
    assert plan.expire == [1, 2, 5] and plan.kept == [3, 4, 6, 7, 8]
    assert "tagged 'early'" in plan.describe() and "records tag 'early'" in plan.describe()
    assert _versions(omni) == list(range(1, 9))  # planning changes nothing

    report = apply_retention(omni.store, NAME, _policy(3))
    assert report.versions_expired == [1, 2, 5] and report.logical_version == 9
    assert _versions(omni) == [3, 4, 6, 7, 8, 9]
    assert omni.log(NAME)[-1].operation == "expire"
    assert omni.log(NAME)[-1].summary["omni.expired-versions"] == "1-2, 5"
    for v in (3, 4, 6, 7, 8):
        assert _rows(omni, v) == before[v], f"version {v} reads different rows after retention"
    assert _rows(omni) == before[8] and _rows(omni, "early") == before[3]
    assert omni.tags(NAME) == {"early": 3}
    assert report.snapshots_expired > 0 and report.bytes_freed["metadata"] > 0
    # a second run with the same policy expires the version that fell out of the last 3
    again = apply_retention(omni.store, NAME, _policy(3))
    assert again.versions_expired == [6] and _versions(omni) == [3, 4, 7, 8, 9, 10]


class _ClockAheadFS:
    """A real local filesystem whose mtimes read ``ahead_s`` later, as a shared
    filesystem or object store whose clock runs ahead of this machine's would."""

    def __new__(cls, ahead_s: float):
        from datetime import timedelta

        from pyarrow import fs as pafs

        local = pafs.LocalFileSystem()

        class Handler(pafs.FileSystemHandler):
            def _shift(self, info):
                if info.mtime is None:
                    return info
                return pafs.FileInfo(info.path, info.type, size=info.size,
                                     mtime=info.mtime + timedelta(seconds=ahead_s))

            def get_type_name(self): return "clock-ahead"
            def equals(self, other): return self is other
            def normalize_path(self, path): return local.normalize_path(path)
            def get_file_info(self, paths): return [self._shift(i) for i in local.get_file_info(paths)]
            def get_file_info_selector(self, selector): return [self._shift(i) for i in local.get_file_info(selector)]
            def create_dir(self, path, recursive): local.create_dir(path, recursive=recursive)
            def delete_dir(self, path): local.delete_dir(path)
            def delete_dir_contents(self, path, missing_dir_ok=False): local.delete_dir_contents(path, missing_dir_ok)
            def delete_root_dir_contents(self): raise NotImplementedError
            def delete_file(self, path): local.delete_file(path)
            def move(self, src, dest): local.move(src, dest)
            def copy_file(self, src, dest): local.copy_file(src, dest)
            def open_input_stream(self, path): return local.open_input_stream(path)
            def open_input_file(self, path): return local.open_input_file(path)
            def open_output_stream(self, path, metadata): return local.open_output_stream(path, metadata=metadata)
            def open_append_stream(self, path, metadata): return local.open_append_stream(path, metadata=metadata)

        return pafs.PyFileSystem(Handler())


def test_a_storage_clock_ahead_of_ours_still_frees_the_expired_files(omni, tmp_path, monkeypatch):
    """The sweep fences by file mtime; mtimes are stamped by the storage's clock, not ours."""
    import governance.retention as retention

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c", "d"])
    skewed = _ClockAheadFS(ahead_s=300)
    monkeypatch.setattr(retention, "_filesystem",
                        lambda uri: (skewed, uri.removeprefix("file://")))
    report = apply_retention(omni.store, NAME, _policy(2))
    assert report.versions_expired == [1, 2, 3]
    assert report.bytes_freed["metadata"] > 0, report.describe()
    assert report.files_deleted["metadata"] > len(report.versions_expired)  # view metadata files, not only documents
    assert _rows(omni) == _rows(omni, 5)


def test_expired_as_of_names_the_oldest_kept_version(omni, tmp_path):
    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c", "d"])
    apply_retention(omni.store, NAME, _policy(2))
    assert _versions(omni) == [4, 5, 6]
    with pytest.raises(NoSuchVersionError) as err:
        omni.read(NAME, as_of=2)
    assert "version 2 of aidata.web was expired by retention" in str(err.value)
    assert "oldest kept version is 4" in str(err.value) and "omni log" in str(err.value)
    with pytest.raises(NoSuchVersionError, match="oldest kept version is 4"):
        omni.tag(NAME, "late", version=3)
    with pytest.raises(NoSuchVersionError, match="versions 1..6"):  # never existed: the old message
        omni.read(NAME, as_of=60)


def test_minimum_age_keeps_versions_a_query_may_still_read(omni, tmp_path):
    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b"])
    plan = plan_retention(omni.store, NAME, RetentionPolicy(keep_last=1, min_age_s=3600))
    assert plan.expire == [] and plan.empty
    assert "minimum age" in " ".join(plan.versions[0].reasons)
    with pytest.raises(RetentionError, match="keep_last"):
        RetentionPolicy(keep_last=0)


def test_manifest_pinned_versions_are_kept_or_refused_naming_the_manifest(omni, tmp_path):
    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b"])
    out = tmp_path / "export-v2"
    omni.export(NAME, str(out), columns=["RawData.url"], as_of=2)
    manifest = out / "_omni_export_manifest.json"
    _ingest(omni, tmp_path, ["c", "d"])

    plan = plan_retention(omni.store, NAME, _policy(1))
    assert 2 in plan.kept and plan.expire == [1, 3, 4]
    assert str(manifest) in plan.describe()
    with pytest.raises(RetentionError) as err:
        apply_retention(omni.store, NAME, _policy(1, keep_pinned_by_manifests=False))
    assert str(manifest) in str(err.value) and "version 2" in str(err.value)
    assert _versions(omni) == [1, 2, 3, 4, 5]  # refused: nothing changed

    apply_retention(omni.store, NAME, _policy(1))
    assert 2 in _versions(omni)
    replay = omni.export_from_manifest(str(manifest), str(tmp_path / "again"))  # still byte-identical
    assert replay.rows == 6
    manifest.unlink()  # the first export is gone, but its replay pins version 2 as well
    assert 2 in apply_retention(omni.store, NAME, _policy(1)).plan.kept
    (tmp_path / "again" / "_omni_export_manifest.json").unlink()
    report = apply_retention(omni.store, NAME, _policy(1))
    assert 2 in report.versions_expired and 2 not in _versions(omni)


def test_bytes_are_freed_on_disk_and_kept_versions_still_read(omni, tmp_path):
    from governance.compaction import compact

    omni.create_table(NAME)
    for b in ("a", "b", "c"):
        omni.submit(NAME, [_jsonl(tmp_path, b, 40)], batch="a" if b != "c" else "c")  # may be re-submits
    compact(omni.store, NAME, min_files=1)  # rewrites every file: the old ones only old versions reach
    expected = _rows(omni)
    warehouse = Path(omni.config.home) / "warehouse"
    size_before, files_before = _disk(warehouse)
    report = apply_retention(omni.store, NAME, _policy(1))
    size_after, files_after = _disk(warehouse)

    assert report.bytes_freed["data"] > 0 and report.files_deleted["data"] > 0
    assert report.bytes_freed["manifests"] > 0 and report.bytes_freed["metadata"] > 0
    gone = files_before - files_after
    assert len([f for f in gone if f.endswith(".parquet")]) == report.files_deleted["data"]
    # what the report says it freed left the disk (the expire commit itself wrote a little)
    assert size_before - size_after >= report.total_bytes_freed - 64 * 1024
    assert size_after < size_before
    assert _rows(omni) == expected
    # nothing a kept version reaches was deleted: every pinned file exists
    state = omni.state(NAME)
    for t in state.tables:
        table = omni.catalog.load_table(t.identifier)
        for task in table.scan(snapshot_id=t.snapshot_id).plan_files():
            assert Path(task.file.file_path.removeprefix("file://")).exists()
    # and a second run finds nothing left to free
    assert apply_retention(omni.store, NAME, _policy(1)).bytes_freed["data"] == 0


def test_a_crash_after_the_view_swap_leaves_kept_versions_readable_and_the_next_run_cleans_up(
        omni, tmp_path, monkeypatch):
    import governance.retention as retention

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c", "d"])
    expected, expected_v4 = _rows(omni), _rows(omni, 4)
    original = retention._expire_table

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed between the view swap and the snapshot expiry")

    monkeypatch.setattr(retention, "_expire_table", killed)
    with pytest.raises(KeyboardInterrupt):
        apply_retention(omni.store, NAME, _policy(2))
    monkeypatch.setattr(retention, "_expire_table", original)
    assert _versions(omni) == [4, 5, 6] and _rows(omni) == expected and _rows(omni, 4) == expected_v4
    base = omni.catalog.load_table(omni.state(NAME).tables[0].identifier)
    assert len(base.metadata.snapshots) > 2  # nothing physical was expired yet

    report = apply_retention(omni.store, NAME, _policy(2))
    assert report.versions_expired == [4] and report.snapshots_expired > 0
    assert _rows(omni) == expected


def test_a_crash_before_the_view_swap_changes_nothing(omni, tmp_path, monkeypatch):
    from catalog_ext.views import SqlViewCatalog

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c"])
    expected = {v: _rows(omni, v) for v in _versions(omni)}

    def killed(self, current, metadata):
        raise KeyboardInterrupt("killed right before the compare-and-swap")

    monkeypatch.setattr(SqlViewCatalog, "replace_view", killed)
    with pytest.raises(KeyboardInterrupt):
        apply_retention(omni.store, NAME, _policy(1))
    monkeypatch.undo()
    assert {v: _rows(omni, v) for v in _versions(omni)} == expected


@pytest.mark.parametrize("when", ["before the view swap", "right after the view swap"])
def test_a_killed_expire_process_leaves_a_readable_table_and_the_next_run_cleans_up(omni, tmp_path, when):
    from tests.faults import child_env, run_and_kill, run_and_kill_when, run_omni

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c", "d", "e"])
    expected = {v: _rows(omni, v) for v in _versions(omni)}
    env = child_env(OMNI_HOME=str(omni.config.home))
    argv = ("expire", NAME, "--keep-last", "2", "--min-age", "0", "--no-progress")
    if when == "before the view swap":
        outcome = run_and_kill(*argv, delay_s=0.05, env=env)  # planning alone takes longer than this
        assert outcome.killed and _versions(omni) == [1, 2, 3, 4, 5, 6], outcome.describe()
    else:
        store = FamilyStore(omni.catalog)  # the child's commit is polled from here
        outcome = run_and_kill_when(*argv, condition=lambda: store.log("aidata", NAME)[-1].operation == "expire",
                                    poll_s=0.01, env=env)
        assert outcome.killed or outcome.returncode == 0, outcome.describe()
    for v in _versions(omni):  # every version the log lists reads exactly what it read before
        assert _rows(omni, v) == expected.get(v, expected[6]), f"version {v} changed"
    done = run_omni(*argv[:-1], "--json", env=env)
    assert done.returncode == 0, done.describe()
    assert _rows(omni) == expected[6]
    # killed before the swap: the rerun does all the work; after it: the rerun only expires what is due now
    assert _versions(omni) == ([5, 6, 7] if when == "before the view swap" else [6, 7, 8])
    base = omni.catalog.load_table(omni.state(NAME).tables[0].identifier)
    pinned = {t.snapshot_id for v in _versions(omni) for t in omni.state(NAME, as_of=v).tables}
    assert {s.snapshot_id for s in base.metadata.snapshots} <= pinned | {r.snapshot_id for r in
                                                                         base.metadata.refs.values()}


def test_expire_racing_a_submit_in_another_process_loses_nothing(omni, tmp_path):
    from tests.faults import child_env, run_pair

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c", "d"])
    env = child_env(OMNI_HOME=str(omni.config.home))
    expire, submit = run_pair(["expire", NAME, "--keep-last", "1", "--min-age", "0", "--no-progress"],
                              ["submit", NAME, _jsonl(tmp_path, "e", 6), "--batch", "e", "--no-progress"],
                              tmp_path / "barrier", env=env)
    assert expire.returncode == 0, expire.describe()
    assert submit.returncode == 0, submit.describe()
    assert {b.name for b in omni.state(NAME).batches} == {"a", "b", "c", "d", "e"}
    rows = _rows(omni)
    assert len(rows) == 30 and len({r[0] for r in rows}) == 30
    for v in _versions(omni):  # whatever the order, every version still listed reads its rows
        assert len(_rows(omni, v)) in (24, 30)
    state = omni.state(NAME)
    for t in state.tables:
        table = omni.catalog.load_table(t.identifier)
        for task in table.scan(snapshot_id=t.snapshot_id).plan_files():
            assert Path(task.file.file_path.removeprefix("file://")).exists()


def test_a_tag_committed_mid_run_makes_retention_replan_and_keep_it(omni, tmp_path, monkeypatch):
    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c"])
    original = FamilyStore.commit
    raced = {"done": False}

    def commit(self, namespace, table, updates, **kw):
        if kw.get("operation") == "expire" and not raced["done"]:
            raced["done"] = True
            omni.tag(NAME, "mid", version=2)  # lands after the plan, before the swap
        return original(self, namespace, table, updates, **kw)

    monkeypatch.setattr(FamilyStore, "commit", commit)
    report = apply_retention(omni.store, NAME, _policy(1))
    assert report.replans == 1
    assert 2 in _versions(omni) and omni.tags(NAME) == {"mid": 2}
    assert 1 in report.versions_expired and 2 not in report.versions_expired


def test_a_writer_winning_the_swap_is_kept_and_retention_retries(omni, tmp_path, monkeypatch):
    from catalog_ext.views import SqlViewCatalog

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b"])
    original = SqlViewCatalog.replace_view
    raced = {"done": False}

    def replace_view(self, current, metadata):
        if not raced["done"] and metadata["properties"].get("omni.logical-version") and \
                metadata["versions"][-1]["summary"].get("omni.operation") == "expire":
            raced["done"] = True
            _ingest(omni, tmp_path, ["c"])  # another writer commits between our read and our swap
        return original(self, current, metadata)

    monkeypatch.setattr(SqlViewCatalog, "replace_view", replace_view)
    report = apply_retention(omni.store, NAME, _policy(1))
    assert raced["done"]
    log = omni.log(NAME)
    assert [v.operation for v in log][-2:] == ["ingest", "expire"]
    assert {b.name for b in omni.state(NAME).batches} == {"a", "b", "c"}
    assert len(_rows(omni)) == 18
    assert report.logical_version == log[-1].version


def test_the_index_stays_authoritative_after_expiry(omni, tmp_path):
    from omni_iceberg.explore.lookup import get_rows
    from omni_iceberg.index import FOUND_COLUMN, open_index, rebuild
    from omni_iceberg.index import visibility

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c"])
    idx = open_index(omni.config, f"aidata.{NAME}", "lmdb")
    rebuild(omni.catalog, omni.state(NAME), idx)
    ids = [r[ID_COLUMN] for r in omni.read(NAME, columns=[ID_COLUMN]).to_pylist()]
    before = get_rows(omni, NAME, ids, columns=["RawData.url"], explain=True, index="lmdb")
    assert before.tables[0].method == "index"

    report = apply_retention(omni.store, NAME, _policy(1))
    assert report.snapshots_expired > 0
    visibility._CACHE.clear()  # a fresh process: nothing remembered from before the expiry
    t = omni.state(NAME).tables[0]
    table = omni.catalog.load_table(t.identifier)
    assert len(table.metadata.snapshots) < 4  # the ancestry really was cut
    hist = visibility.history(omni.catalog, t.identifier, t.snapshot_id)
    assert len(hist.runs) == 3 and hist.problems == ()
    after = get_rows(omni, NAME, ids, columns=["RawData.url"], explain=True, index="lmdb")
    assert after.tables[0].method == "index", after.tables[0].reason
    assert after.rows.to_pylist() == before.rows.to_pylist() and all(after.rows.column(FOUND_COLUMN).to_pylist())
    # without the record the walk would stop at the cut and name too few runs
    runs, _ = visibility.ancestry_runs(table, t.snapshot_id, records={})
    assert len(runs) < 3


def test_the_expiry_record_keeps_only_runs_with_live_files(omni, tmp_path):
    """After a compaction the ingest runs own no live file: the cut record drops them, so
    what a lookup walks follows the live data, not every batch ever ingested."""
    import json as _json

    from omni_iceberg.explore.lookup import get_rows
    from omni_iceberg.index import FOUND_COLUMN, open_index, verify, visibility

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b", "c", "d"], rows=30)
    omni.compact(NAME)
    _ingest(omni, tmp_path, ["e"], rows=30)
    expected = {r[ID_COLUMN]: r["RawData.url"] for r in omni.read(NAME, columns=[ID_COLUMN, "RawData.url"]).to_pylist()}
    report = apply_retention(omni.store, NAME, _policy(1))
    assert report.snapshots_expired > 0 and not report.errors
    visibility._CACHE.clear()
    t = omni.state(NAME).base_table
    table = omni.catalog.load_table(t.identifier)
    record = _json.loads(table.metadata.properties[visibility.EXPIRED_RUNS_PROPERTY])
    [cut] = record.values()
    # the compaction's run, plus only those of a..d that still own a file it left alone
    # (a bucket holding one small file is not rewritten)
    assert any(r.startswith("compact-") for r in cut["runs"]) and len(cut["runs"]) < 4
    hist = visibility.history(omni.catalog, t.identifier, t.snapshot_id)
    assert hist.problems == () and len(hist.runs) == len(cut["runs"]) + 1  # and batch e
    lookup = get_rows(omni, NAME, sorted(expected), columns=["RawData.url"], explain=True, index="lmdb")
    assert lookup.tables[0].method == "index", lookup.tables[0].reason
    got = {r[ID_COLUMN]: r["RawData.url"] for r in lookup.rows.to_pylist() if r[FOUND_COLUMN]}
    assert got == expected
    checked = verify(omni.catalog, omni.state(NAME), open_index(omni.config, f"aidata.{NAME}", "lmdb"))
    assert checked.ok and checked.expired > 0, checked.text()  # the dropped runs' entries: expired, not faults


def test_cli_expire_and_maintain(omni, tmp_path, capsys):
    from omni_iceberg.cli import main

    omni.create_table(NAME, bucket_count=1)  # one bucket already fits: maintain has no re-bucketing to commit
    _ingest(omni, tmp_path, ["a", "b", "c"])
    home = ["--home", str(omni.config.home)]
    capsys.readouterr()
    assert main(home + ["expire", NAME, "--keep-last", "2", "--min-age", "0", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["dry_run"] and plan["plan"]["expire_versions"] == [1, 2]
    assert _versions(omni) == [1, 2, 3, 4]
    assert main(home + ["expire", NAME, "--keep-last", "2", "--min-age", "0", "--dry-run"]) == 0
    assert "expire 2 version(s): 1-2" in capsys.readouterr().out
    assert main(home + ["maintain", NAME, "--keep-last", "2", "--min-age", "0", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "expired 2 version(s) (1-2) -> version 5" in text and "freed" in text
    assert main(home + ["log", NAME]) == 0
    assert "expire" in capsys.readouterr().out
    assert main(home + ["maintain", NAME, "--keep-last", "2", "--min-age", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["retention"]["versions_expired"] == [3] and out["tasks"][0] == "stale staging branches"
    assert main(home + ["expire", NAME, "--keep-last", "0"]) == 2
    assert "keep_last" in capsys.readouterr().err


def test_a_column_missing_at_a_kept_old_version_names_a_kept_version_to_read(omni, tmp_path):
    from catalog_ext.errors import SchemaConflictError

    omni.create_table(NAME)
    omni.tag(NAME, "empty", version=1)
    _ingest(omni, tmp_path, ["a", "b", "c"])  # RawData.url appears at v3, which retention expires
    apply_retention(omni.store, NAME, _policy(1))
    assert _versions(omni) == [1, 2, 5, 6]
    with pytest.raises(SchemaConflictError, match=r"added after version 2 and is in version 5 \(retention expired"):
        omni.read(NAME, columns=["RawData.url"], as_of="empty")


def test_a_crash_between_snapshot_expiry_and_file_deletion_is_cleaned_by_the_next_maintain(
        omni, tmp_path, monkeypatch):
    import governance.retention as retention
    from governance.compaction import compact

    omni.create_table(NAME)
    _ingest(omni, tmp_path, ["a", "b"])
    compact(omni.store, NAME, min_files=1)  # the pre-compaction files are reached by old snapshots only
    expected = _rows(omni)
    warehouse = Path(omni.config.home) / "warehouse"
    _, files_before = _disk(warehouse)
    original = retention._delete

    def killed(catalog, files, kind, report):
        if kind == "data" and files:
            raise KeyboardInterrupt("killed after the snapshot expiry commit, before deleting files")
        return original(catalog, files, kind, report)

    monkeypatch.setattr(retention, "_delete", killed)
    with pytest.raises(KeyboardInterrupt):
        apply_retention(omni.store, NAME, _policy(1))
    monkeypatch.setattr(retention, "_delete", original)
    assert _rows(omni) == expected
    _, files_mid = _disk(warehouse)
    left = {f for f in files_before & files_mid if f.endswith(".parquet")}
    state = omni.state(NAME)
    live = {task.file.file_path.removeprefix("file://") for t in state.tables
            for task in omni.catalog.load_table(t.identifier).scan(snapshot_id=t.snapshot_id).plan_files()}
    stranded = left - live
    assert stranded, "the crash should have left the expired snapshots' files behind"

    monkeypatch.setenv("OMNI_ORPHAN_GRACE_S", "0")
    # files written in the second before a run are never taken for garbage (a commit may be in
    # flight); the stranded ones must be older than that
    time.sleep(1.1)
    report = omni.maintain(NAME, 1, min_age_s=0)
    assert report.cleanup.orphans.orphan_files_deleted >= len(stranded)
    _, files_after = _disk(warehouse)
    assert not stranded & files_after
    assert not [f for f in files_after if f.endswith(".avro") and "/metadata/" in f
                and f not in _referenced_metadata(omni)]
    assert _rows(omni) == expected


def _referenced_metadata(omni: Omni) -> set[str]:
    out = set()
    for t in omni.state(NAME).tables:
        table = omni.catalog.load_table(t.identifier)
        for snap in table.metadata.snapshots:
            out.add(snap.manifest_list.removeprefix("file://"))
            out |= {m.manifest_path.removeprefix("file://") for m in snap.manifests(table.io)}
    return out


def test_spark_reads_the_view_after_retention(spark, tmp_path):
    """Spark's Iceberg runtime parses the trimmed view metadata and reads the kept version."""
    omni = Omni(config=spark.config)
    name = "rt_spark"
    omni.create_table(name)
    for b in ("a", "b", "c"):
        omni.submit(name, [_jsonl(tmp_path, b, 5)], batch=b, progress=False)
    report = omni.expire(name, 1, min_age_s=0)
    assert report.versions_expired == [1, 2, 3]
    rows = spark.sql(f"SELECT _ai_append_name_, count(*) FROM omni.aidata.{name} GROUP BY 1 ORDER BY 1")
    assert rows == [("a", 5), ("b", 5), ("c", 5)]
    props = dict(spark.sql(f"SHOW TBLPROPERTIES omni.aidata.{name}"))
    assert props["omni.logical-version"] == str(report.logical_version)
