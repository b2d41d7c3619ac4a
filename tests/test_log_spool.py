"""The query-log spool: a query pays a file append, the table gets every row exactly once."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from datetime import datetime, timezone

import pytest

from catalog_ext import system_tables
from catalog_ext.log_spool import TOKEN_PROPERTY, LogSpool, spool_for
from omni_iceberg.api import Omni
from omni_iceberg.cli import main


@pytest.fixture
def omni(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_QUERY_LOG_FLUSH_ROWS", "5")
    monkeypatch.setenv("OMNI_QUERY_LOG_FLUSH_S", "3600")
    o = Omni(home=tmp_path / "home")
    o.create_table("web")
    docs = tmp_path / "d.jsonl"
    docs.write_text("".join(json.dumps({"raw_data": f"<p>page {i}</p>"}) + "\n" for i in range(3)))
    o.submit("web", [str(docs)], batch="b")
    return o


def _log_rows(omni) -> list[dict]:
    try:
        return omni.catalog.load_table("omni_sys.query_log").scan().to_arrow().to_pylist()
    except Exception:  # noqa: BLE001 - not created yet
        return []


def _snapshots(omni) -> int:
    try:
        return len(omni.catalog.load_table("omni_sys.query_log").metadata.snapshots)
    except Exception:  # noqa: BLE001
        return 0


def test_queries_spool_until_due_then_one_commit_holds_them_all(omni):
    spool = spool_for(omni.config, system_tables.QUERY_LOG)
    for i in range(4):
        omni.query(f"SELECT count(*) AS n FROM web WHERE _ai_append_name_ <> 'x{i}'")
    assert spool.pending() == 4 and _log_rows(omni) == [] and _snapshots(omni) == 0
    omni.query("SELECT count(*) AS n FROM web")  # the fifth: due
    rows = _log_rows(omni)
    assert len(rows) == 5 and _snapshots(omni) == 1 and spool.pending() == 0
    assert len({r["query_id"] for r in rows}) == 5
    assert all(isinstance(r["at"], datetime) and r["logical_table"] == "aidata.web" for r in rows)


def test_an_old_spool_is_flushed_by_the_next_query(omni, monkeypatch):
    omni.query("SELECT count(*) AS n FROM web")
    assert _log_rows(omni) == []
    monkeypatch.setenv("OMNI_QUERY_LOG_FLUSH_S", "0")
    omni.query("SELECT count(*) AS n FROM web")
    assert len(_log_rows(omni)) == 2


def test_one_commit_per_query_when_asked(omni, monkeypatch):
    monkeypatch.setenv("OMNI_QUERY_LOG_FLUSH_ROWS", "1")
    omni.query("SELECT count(*) AS n FROM web")
    assert len(_log_rows(omni)) == 1 and not spool_for(omni.config, system_tables.QUERY_LOG).path.exists()


def test_reading_the_log_through_omni_sees_spooled_rows_and_the_cli_flushes(omni, capsys):
    omni.query("SELECT count(*) AS n FROM web")
    omni.query("SELECT count(*) AS n FROM web")
    got = omni.query("SELECT count(*) AS n FROM omni_sys.query_log").to_pylist()
    assert got == [{"n": 2}]
    omni.query("SELECT count(*) AS n FROM web")
    assert main(["--home", str(omni.config.home), "flush-log", "--json"]) == 0
    # a query of system tables alone is not logged: only the third count was spooled
    assert json.loads(capsys.readouterr().out) == {"flushed_rows": 1}
    assert len(_log_rows(omni)) == 3


def test_a_flusher_that_died_after_its_commit_leaves_no_duplicate(omni):
    spool = spool_for(omni.config, system_tables.QUERY_LOG)
    omni.query("SELECT count(*) AS n FROM web")
    # what a flusher leaves when it dies between its append and deleting its file
    token = "0" * 32
    stranded = spool.dir / f"query_log.{token}.flushing"
    spool.path.rename(stranded)
    rows = [json.loads(line) for line in stranded.read_text().splitlines()]
    for r in rows:
        r["at"] = datetime.fromisoformat(r["at"])
    system_tables.append_rows(omni.catalog, system_tables.QUERY_LOG, rows, snapshot_properties={TOKEN_PROPERTY: token})
    # and one that died before its append
    omni.query("SELECT count(*) AS n FROM web WHERE _ai_append_name_ = 'b'")
    spool.path.rename(spool.dir / f"query_log.{'1' * 32}.flushing")
    omni.query("SELECT count(*) AS n FROM web WHERE _ai_append_name_ = 'c'")
    assert spool.pending() == 3
    assert spool.flush(omni.catalog) == 2  # the uncommitted stranded file and the live spool
    logged = _log_rows(omni)
    assert len(logged) == 3 and len({r["query_id"] for r in logged}) == 3
    assert not list(spool.dir.glob("*.flushing"))


def test_a_torn_line_is_kept_aside_and_the_rest_flushed(omni, capsys):
    spool = spool_for(omni.config, system_tables.QUERY_LOG)
    omni.query("SELECT count(*) AS n FROM web")
    with open(spool.path, "ab") as f:
        f.write(b'{"query_id": "torn", "ki\n')
    assert spool.flush(omni.catalog) == 1
    assert "unreadable log line moved to" in capsys.readouterr().err
    assert (spool.dir / "query_log.rejected.jsonl").read_bytes() == b'{"query_id": "torn", "ki\n'


def _spool_rows(home: str, uri: str, worker: int) -> None:
    import os

    os.environ["OMNI_QUERY_LOG_FLUSH_ROWS"] = "7"
    from omni_iceberg.api import Omni

    omni = Omni(home=home, catalog=uri)
    spool = LogSpool(omni.config.home, omni.config.catalog_uri, system_tables.QUERY_LOG)
    for i in range(20):
        spool.add(omni.catalog, [{"query_id": f"w{worker}-{i}", "kind": "sql", "logical_table": "aidata.web",
                                  "logical_version": 1, "columns": "[]", "filter_columns": "[]", "batches": "null",
                                  "physical_tables": "[]", "engine": "local", "rows": 1, "latency_ms": 1,
                                  "sql": "SELECT 1", "at": datetime.now(timezone.utc)}])


def test_concurrent_processes_spool_and_flush_every_row_once(omni):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_spool_rows, args=(str(omni.config.home), omni.config.catalog_uri, w))
             for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    omni.flush_query_log()
    ids = [r["query_id"] for r in _log_rows(omni)]
    assert sorted(ids) == sorted(f"w{w}-{i}" for w in range(3) for i in range(20))


def _row(query_id: str) -> dict:
    return {"query_id": query_id, "kind": "sql", "logical_table": "aidata.web", "logical_version": 1, "columns": "[]",
            "filter_columns": "[]", "batches": "null", "physical_tables": "[]", "engine": "local", "rows": 1,
            "latency_ms": 1, "sql": "SELECT 1", "at": datetime.now(timezone.utc).isoformat()}


def test_the_spool_folder_names_the_catalog_not_its_spelling_nor_its_password(tmp_path):
    home = tmp_path / "home"
    spellings = [
        "postgresql+psycopg://omni:SECRETPW-1@DB.example.com:5432/omni?sslmode=require&password=SECRETPW-2",
        "postgresql://reader@db.example.com/omni",
        "postgresql+psycopg2://omni:rotated@db.example.com:5432/omni",
    ]
    folders = {LogSpool(home, uri, system_tables.QUERY_LOG).dir for uri in spellings}
    assert len(folders) == 1
    (folder,) = folders
    assert folder.parent == home / "spool"
    # nothing derived from a spelling that holds a password names the folder
    assert all(hashlib.sha1(uri.encode()).hexdigest()[:12] not in folder.name for uri in spellings)
    others = ["postgresql://db.example.com/other", "postgresql://db.example.com:5433/omni",
              "postgresql://db2.example.com/omni", "mysql://db.example.com/omni"]
    assert len({LogSpool(home, uri, system_tables.QUERY_LOG).dir for uri in others} | folders) == 5
    rest = {LogSpool(home, uri, system_tables.QUERY_LOG).dir
            for uri in ["https://user:pw@Rest.example:443/catalog?token=abc", "https://rest.example/catalog/"]}
    assert len(rest) == 1


def test_rows_spooled_under_one_spelling_are_flushed_under_another(omni, capsys):
    home = omni.config.home
    other = f"sqlite:///{home}/./catalog.db?timeout=30"  # the same SQLite file, spelled otherwise
    assert Omni(home=home, catalog=other).list_tables() == omni.list_tables()
    omni.query("SELECT count(*) AS n FROM web")
    omni.query("SELECT count(*) AS n FROM web WHERE _ai_append_name_ = 'b'")
    assert _log_rows(omni) == []
    assert main(["--home", str(home), "--catalog", other, "flush-log", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"flushed_rows": 2}
    assert len(_log_rows(omni)) == 2 and spool_for(omni.config, system_tables.QUERY_LOG).pending() == 0


def test_rows_left_in_an_old_style_folder_are_flushed_and_the_folder_goes(omni):
    """Earlier versions named the folder sha1(catalog URI as given); its rows are not stranded."""
    legacy = omni.config.home / "spool" / hashlib.sha1(omni.config.catalog_uri.encode()).hexdigest()[:12]
    legacy.mkdir(parents=True, exist_ok=True)
    (legacy / "query_log.jsonl").write_text("".join(json.dumps(_row(f"old-{i}")) + "\n" for i in range(2)))
    # a flusher of the old version that died before its append
    (legacy / f"query_log.{'2' * 32}.flushing").write_text(json.dumps(_row("old-stranded")) + "\n")
    # ... and one that died after it: its rows are in the table already
    committed = "3" * 32
    (legacy / f"query_log.{committed}.flushing").write_text(json.dumps(_row("old-committed")) + "\n")
    row = {**_row("old-committed"), "at": datetime.now(timezone.utc)}
    system_tables.append_rows(omni.catalog, system_tables.QUERY_LOG, [row], snapshot_properties={TOKEN_PROPERTY: committed})
    (legacy / "query_log.lock").touch()
    omni.query("SELECT count(*) AS n FROM web")  # a row of this version, in its own folder
    spool = spool_for(omni.config, system_tables.QUERY_LOG)
    assert spool.dir != legacy and spool.pending() == 5
    assert omni.flush_query_log() == 4
    ids = [r["query_id"] for r in _log_rows(omni)]
    assert sorted(i for i in ids if i.startswith("old-")) == ["old-0", "old-1", "old-committed", "old-stranded"]
    assert len(ids) == len(set(ids)) == 5
    assert not legacy.exists() and spool.pending() == 0
