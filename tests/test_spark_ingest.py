"""``omni submit --engine spark``: the local engine's rows, ids, rejects and counts, from Spark tasks.

The equality test submits the same input to two tables of one PostgreSQL catalog - one
through the local engine, one through the Spark engine on the suite's Spark session - and
holds them equal batch by batch: JSONL files with duplicates inside a file and across
files, a bad line, an empty record, a truncated gzip file, and a field whose type the
first file fixes and the second contradicts (the second file is read again with it); an
HTML folder; a Parquet file and one without its footer; a batch re-submitting earlier
content; a real crawl's WARC files; CSV with a short row; a code tree with a binary file. The cluster test runs
``omni submit --engine spark`` as a user does, on the suite's standalone cluster
(:class:`tests.services.spark_cluster.SparkTestCluster`). The CLI tests check the flags and
their errors without starting a JVM. The fault test, on the same cluster, deletes a file after
the driver listed it and kills one task's Python worker once (a marker-file test hook).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from catalog_ext.errors import ConfigError, RejectLimitExceededError
from omni_iceberg.api import Omni
from omni_iceberg.cli import main
from omni_iceberg.cli.parser import build_parser
from omni_iceberg.demo import corpora

REPO = Path(__file__).resolve().parents[1]
KEY = "_ai_unique_id_"
REJECT_FIELDS = ("source_file", "line", "offset", "field", "reason")


def _page(i: int, tag: str = "doc") -> str:
    return f"<html><body><h1>{tag} {i}</h1><p>Text of {tag} {i}; digits {i * 7}!</p></body></html>"


def _jsonl(path: Path, records: list, bad: list[str] = ()) -> Path:
    lines = [json.dumps(r) for r in records] + list(bad)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _inputs(tmp: Path) -> list[tuple[str, list[str], dict]]:
    """(batch, sources, submit options) in submit order."""
    a1 = _jsonl(tmp / "a1.jsonl", [
        {"raw_data": _page(0), "url": "u0", "score": 1},
        {"raw_data": _page(1), "url": "u1", "score": 2},
        {"raw_data": _page(0), "url": "u0-again"},  # duplicate inside the file: the first stays
        {"raw_data": "   ", "url": "blank"},  # empty raw content: a reject
        {"raw_data": _page(2), "url": "u2"},
    ], bad=['{"raw_data": "unterminated'])  # bad JSON: a reject naming the line
    a2 = _jsonl(tmp / "a2.jsonl", [
        {"raw_data": _page(1), "url": "u1-from-a2"},  # duplicate of a1's row: a1's row stays
        {"raw_data": _page(3), "url": "u3", "score": "high"},  # a1 made score a long: a reject
        {"raw_data": _page(4), "url": "u4", "lang": "en"},
        {"raw_data": _page(5), "url": "u5", "score": 5},
    ])
    broken = tmp / "a3.jsonl.gz"
    whole = gzip.compress("".join(json.dumps({"raw_data": _page(i, "gz")}) + "\n" for i in range(50)).encode())
    broken.write_bytes(whole[: len(whole) // 2])  # truncated: the lines before the break, then a reject
    html = tmp / "site"
    (html / "sub").mkdir(parents=True)
    (html / "index.html").write_text(_page(10, "site"))
    (html / "copy.html").write_text(_page(10, "site"))  # same page twice in the folder
    (html / "sub" / "a.html").write_text(_page(11, "site"))
    (html / "sub" / "old.html").write_text(_page(2))  # the raw text of a row of batch a: an earlier batch's
    pq.write_table(pa.table({"text": [_page(0), _page(20, "pq"), _page(21, "pq"), _page(20, "pq"), None],
                             "n": [1, 2, 3, 4, 5]}), tmp / "c.parquet")
    whole = (tmp / "c.parquet").read_bytes()
    (tmp / "c-broken.parquet").write_bytes(whole[: len(whole) - 40])  # no footer: one reject naming the file
    again = _jsonl(tmp / "d.jsonl", [{"raw_data": _page(i)} for i in range(0, 8)])  # 0-2, 4, 5 are in batch a
    # the other readers: WARC files (a real crawl), CSV with a bad row, a code tree with a binary file
    warcs = [str(w) for w in sorted(corpora.fetch("pywb-warcs").rglob("*.warc.gz"))]
    (tmp / "e.csv").write_text('text,k\n"csv one",1\n"csv two",x\n"csv one",3\n"csv three"\n')
    code = tmp / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "main.py").write_text("print('hello')\n")
    (code / "pkg" / "util.py").write_text("def f():\n    return 1\n")
    (code / "pkg" / "blob.c").write_text("int x;\x00\n")
    return [("a", [str(a1), str(a2), str(broken)], {}),
            ("b", [str(html)], {}),
            ("c", [str(tmp / "c.parquet"), str(tmp / "c-broken.parquet")], {"field_map": ["text=raw_data"]}),
            ("d", [str(again)], {}),
            ("e", warcs, {}),
            ("f", [str(tmp / "e.csv")], {"field_map": ["text=raw_data"]}),
            ("g", [str(code)], {})]


def _rows(omni: Omni, name: str, batch: str) -> list[dict]:
    rows = omni.read(name, batches=[batch]).to_pylist()
    return sorted(rows, key=lambda r: r[KEY])


def _rejects(omni: Omni, name: str, batch: str) -> list[tuple]:
    return sorted(tuple(r[k] for k in REJECT_FIELDS) for r in omni.rejects(name, batch).to_pylist())


def test_spark_ingest_holds_the_local_engines_rows_ids_rejects_and_counts(spark, tmp_path):
    from spark_udfs.ingest import SparkIngest

    omni = Omni(config=spark.config)
    local, remote = "ingest_eq_local", "ingest_eq_spark"
    omni.create_table(local)
    omni.create_table(remote)
    engine = SparkIngest(omni.context, spark=spark.session)
    counts = ("read", "written", "duplicates", "rejected")
    inputs = _inputs(tmp_path)
    for batch, sources, options in inputs:
        want = omni.submit(local, sources, batch, progress=False, **options)
        got = engine.submit(remote, sources, batch, **options)
        assert {k: getattr(got, k) for k in counts} == {k: getattr(want, k) for k in counts}, batch
        assert got.logical_version is not None and not got.already_committed
        assert sorted(got.new_fields) == sorted(want.new_fields), batch
        assert sorted(got.reject_messages) == sorted(want.reject_messages), batch
        assert _rows(omni, remote, batch) == _rows(omni, local, batch), batch
        assert _rejects(omni, remote, batch) == _rejects(omni, local, batch), batch
    # what the input holds, counted by hand: the figures the two engines agree on are the right ones
    batch_a = _rows(omni, remote, "a")
    urls = [r["RawData"]["url"] for r in batch_a if r["RawData"]["url"] is not None]
    assert sorted(urls) == ["u0", "u1", "u2", "u4", "u5"]  # the first of each content; u3 rejected
    assert {r["RawData"]["url"]: r["RawData"]["score"] for r in batch_a if r["RawData"]["url"]} == \
        {"u0": 1, "u1": 2, "u2": None, "u4": None, "u5": 5}
    gz_rows = len(batch_a) - 5
    assert 0 < gz_rows < 50  # the lines before the break, no more
    a = omni.state(remote).batch("a")
    # a1: 6 lines, a2: 4, the gz file: its lines before the break plus one reject for the break
    assert (a.read, a.rows, a.duplicates, a.rejected) == (6 + 4 + gz_rows + 1, 5 + gz_rows, 2, 4)
    reasons = [r[4] for r in _rejects(omni, remote, "a")]
    assert any("expected long, got string" in r for r in reasons)
    assert any("empty raw content" in r for r in reasons)
    assert any(r[0].endswith("a3.jsonl.gz") for r in _rejects(omni, remote, "a"))
    # one task per file (3 JSONL, 4 pages, 2 Parquet, 1 JSONL, 1 CSV, 3 code files), but the 10 WARC
    # files are more than 4 tasks for each of the session's 2 cores: they share tasks of about equal
    # bytes (one file holds 96% of them: 3 tasks); a2 read again with a1's type of score
    assert engine.tasks == [3, 1, 4, 2, 1, 3, 1, 3]
    assert engine.files == [3, 1, 4, 2, 1, 10, 1, 3]
    # the Parquet file without a footer is one reject (the batch still lands), the null text another
    assert [r[0] for r in _rejects(omni, remote, "c")] == [str(tmp_path / "c-broken.parquet"),
                                                             str(tmp_path / "c.parquet")]
    d = omni.state(remote).batch("d")
    assert (d.read, d.rows, d.duplicates) == (8, 3, 5)  # pages 0-2, 4 and 5 came with batch a (3 was rejected)
    # the same ids in both tables, each once
    ids = lambda name: sorted(omni.read(name, columns=[KEY]).column(KEY).to_pylist())  # noqa: E731
    assert ids(remote) == ids(local) and len(set(ids(remote))) == len(ids(remote))
    # the batch is committed once: the same name again is answered from the version
    again = engine.submit(remote, inputs[0][1], "a")
    assert again.already_committed and again.written == a.rows
    # a batch refused after the read (too many rejects) commits nothing, keeps its rejects, frees the name
    version = omni.state(remote).version
    with pytest.raises(RejectLimitExceededError, match="nothing committed"):
        engine.submit(remote, inputs[0][1], "refused", max_reject_ratio=0.01)
    assert omni.state(remote).version == version and omni.state(remote).batch("refused") is None
    rejects = omni.rejects(remote)
    assert rejects.filter(pc.equal(rejects.column("batch"), "refused")).num_rows == a.rejected
    # Spark's append is the snapshot the commit pinned; no staging branch is left; the id index
    # learned the rows at the commit (the store's index hook read the files Spark wrote)
    base = omni.state(remote).base_table
    table = omni.catalog.load_table(base.identifier)
    assert not [r for r in table.metadata.refs if r.startswith("omni-stage")]
    pinned = table.snapshot_by_id(base.snapshot_id)  # the commit pins Spark's append itself, nothing on top
    assert pinned.summary.additional_properties.get("omni.ingest-part") == "spark"
    assert pinned.summary.additional_properties.get("omni.batch") == "g"  # the last batch
    assert omni.verify_index(remote).ok and omni.verify_index(local).ok
    engine.close()


def test_submit_takes_an_engine_and_a_master():
    args = build_parser().parse_args(["submit", "web", "x.jsonl", "--batch", "b", "--engine", "spark",
                                      "--spark-master", "spark://h:7077"])
    assert (args.engine, args.spark_master) == ("spark", "spark://h:7077")
    assert build_parser().parse_args(["submit", "web", "x.jsonl", "--batch", "b"]).engine == "local"


@pytest.fixture
def embedded(tmp_path):
    omni = Omni(home=tmp_path / "home")
    omni.create_table("web")
    _jsonl(tmp_path / "x.jsonl", [{"raw_data": _page(i)} for i in range(5)] + [{"raw_data": _page(0)}])
    return omni


def test_the_embedded_catalog_refuses_spark_and_auto_stays_local(embedded, tmp_path, capsys):
    home = ["--home", str(tmp_path / "home")]
    src = str(tmp_path / "x.jsonl")
    assert main([*home, "submit", "web", src, "--batch", "s", "--engine", "spark"]) == 2
    assert "embedded SQLite" in capsys.readouterr().err
    assert main([*home, "submit", "web", src, "--batch", "l", "--spark-master", "spark://h:7077"]) == 2
    assert "was given for engine 'local'" in capsys.readouterr().err
    assert not embedded.state("web").batches  # nothing committed by either
    assert main([*home, "--json", "submit", "web", src, "--batch", "auto", "--engine", "auto"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert (out["read"], out["written"], out["duplicates"]) == (6, 5, 1)
    assert "--engine auto: local (Spark cannot run here: the catalog is embedded SQLite" in captured.err


def test_the_python_api_takes_the_clis_engine_choice(embedded, tmp_path, caplog):
    """Omni.submit(engine=..., spark_master=...) decides as ``omni submit --engine`` does."""
    src = str(tmp_path / "x.jsonl")
    with pytest.raises(ConfigError, match="embedded SQLite"):
        embedded.submit("web", [src], "s", engine="spark")
    with pytest.raises(ConfigError, match="was given for engine 'local'"):
        embedded.submit("web", [src], "l", spark_master="spark://h:7077")
    with pytest.raises(ConfigError, match="unknown submit engine 'sparkk'"):
        embedded.submit("web", [src], "x", engine="sparkk")
    assert not embedded.state("web").batches  # nothing committed by any of them
    with caplog.at_level("INFO", logger="omni_iceberg"):
        report = embedded.submit("web", [src], "auto", engine="auto", progress=False)
    assert (report.read, report.written, report.duplicates) == (6, 5, 1)
    assert [b.name for b in embedded.state("web").batches] == ["auto"]
    assert "--engine auto: local (Spark cannot run here: the catalog is embedded SQLite" in caplog.text


def test_spark_refuses_s3_sources_by_name_before_any_work(embedded):
    """s3:// sources are not read by either engine yet: the Spark engine names the source and says so
    (the readers alone would say "source not found: s3:/lake/...", a path that was never given)."""
    from catalog_ext.errors import SourceError
    from spark_udfs.ingest import SparkIngest

    engine = SparkIngest(embedded.context)
    with pytest.raises(SourceError, match=r"source s3://lake/pages/: .* s3:// and other URL sources are not "
                                          r"supported yet"):
        engine.submit("web", ["s3://lake/pages/"], "remote")
    with pytest.raises(SourceError, match="source s3://lake/x.jsonl: "):  # auto's measure says the same
        engine.source_bytes(["s3://lake/x.jsonl"])
    assert engine._spark is None and not embedded.state("web").batches  # no session opened, nothing committed


def test_an_unreachable_master_fails_before_any_work(pg_server, tmp_path, capsys):
    config = ["--catalog", pg_server.sqlalchemy_uri, "--warehouse", (tmp_path / "wh").as_uri(),
              "--home", str(tmp_path / "home")]
    omni = Omni(catalog=pg_server.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri(), home=tmp_path / "home")
    omni.create_table("unreachable_web")
    _jsonl(tmp_path / "x.jsonl", [{"raw_data": _page(1)}])
    code = main([*config, "submit", "unreachable_web", str(tmp_path / "x.jsonl"), "--batch", "b", "--engine",
                 "spark", "--spark-master", "spark://127.0.0.1:1"])
    assert code == 2
    assert "Spark master spark://127.0.0.1:1 is unreachable" in capsys.readouterr().err
    assert not omni.state("unreachable_web").batches and omni.rejects("unreachable_web").num_rows == 0
    with pytest.raises(ConfigError, match="unreachable"):
        from omni_iceberg.engines import lookup

        lookup("ingest", "spark")(omni.context, master="spark://127.0.0.1:1").check()
    # auto on a shared catalog: below OMNI_SPARK_THRESHOLD_BYTES (1 TiB by default) it stays local
    code = main([*config, "--json", "submit", "unreachable_web", str(tmp_path / "x.jsonl"), "--batch", "auto",
                 "--engine", "auto"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["written"] == 1
    size = (tmp_path / "x.jsonl").stat().st_size
    assert f"--engine auto: local (the sources weigh {size} B, below the Spark threshold of {1 << 40} B)" \
        in captured.err


def _omni_cli(config, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--catalog", config.catalog_uri, "--warehouse",
                           config.warehouse, "--home", str(config.home), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=900, env={**os.environ, **(env or {})})


def test_spark_submit_on_a_cluster_gives_the_local_engines_batch(pg_server, tmp_path):
    """The ``omni`` command in a child process, as a user runs it, on the standalone cluster: the
    tasks run in the cluster's executors (omni shipped by PYTHONPATH), not in the driver."""
    from catalog_ext.config import OmniConfig
    from tests.services.spark_cluster import SparkTestCluster

    config = OmniConfig.resolve(catalog=pg_server.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri(),
                                home=tmp_path / "home", catalog_name="omni")
    omni = Omni(config=config)
    inputs = _inputs(tmp_path)
    for name in ("cluster_local", "cluster_spark"):
        omni.create_table(name)
    a_sources, b_sources = inputs[0][1], inputs[1][1]
    for batch, sources in (("a", a_sources), ("b", b_sources)):
        omni.submit("cluster_local", sources, batch, progress=False)
    with SparkTestCluster(tmp_path / "spark") as cluster:
        # batch b through auto, with a threshold its pages reach
        done = [_omni_cli(config, "--json", "--no-progress", "submit", "cluster_spark", *sources, "--batch", batch,
                          "--engine", engine, "--spark-master", cluster.master_url,
                          env={"OMNI_SPARK_THRESHOLD_BYTES": "1"})
                for batch, sources, engine in (("a", a_sources, "spark"), ("b", b_sources, "auto"))]
        for d in done:
            assert d.returncode == 0, d.stderr[-6000:] + cluster.logs()
    assert "--engine auto: spark (the sources weigh" in done[1].stderr
    table = omni.catalog.load_table(omni.state("cluster_spark").base_table.identifier)
    assert {s.summary.additional_properties.get("omni.batch") for s in table.snapshots()
            if s.summary.additional_properties.get("omni.ingest-part") == "spark"} == {"a", "b"}
    for (batch, _), d in zip((("a", None), ("b", None)), done):
        got, want = json.loads(d.stdout), omni.state("cluster_local").batch(batch)
        assert (got["read"], got["written"], got["duplicates"], got["rejected"]) == \
            (want.read, want.rows, want.duplicates, want.rejected), batch
        assert _rows(omni, "cluster_spark", batch) == _rows(omni, "cluster_local", batch), batch
        assert _rejects(omni, "cluster_spark", batch) == _rejects(omni, "cluster_local", batch), batch
    assert "omni: rejected:" in done[0].stderr  # the reject messages are printed as the local engine prints them
    assert omni.verify_index("cluster_spark").ok


def test_small_files_share_tasks_in_batch_order():
    from spark_udfs.ingest import FileTask, group_files

    def todo(sizes):
        return [(FileTask(i, "html_dir", None, size), {}) for i, size in enumerate(sizes)]

    few = todo([10, 10, 10])
    assert group_files(few, slots=4) == [[one] for one in few]  # up to the slots: one file a task
    many = todo([10] * 20)
    groups = group_files(many, slots=4)
    assert [[t.index for t, _ in g] for g in groups] == [list(range(k, k + 5)) for k in range(0, 20, 5)]
    # more bytes than the slots' share: at least one task per group_bytes (whole files: about)
    big = group_files(todo([100] * 10), slots=2, group_bytes=150)
    assert [[t.index for t, _ in g] for g in big] == [[0], [1, 2], [3], [4, 5], [6], [7, 8], [9]]
    empty = group_files(todo([0] * 9), slots=3)  # files of no bytes still spread over the slots
    assert [len(g) for g in empty] == [3, 3, 3]


def test_uuid_tables_keep_every_row_with_its_own_id(spark, tmp_path):
    """No content ids, no dedup: every accepted record is a row, with a fresh id, on either engine."""
    from spark_udfs.ingest import SparkIngest

    omni = Omni(config=spark.config)
    omni.create_table("ingest_uuid_local", id_mode="uuid")
    omni.create_table("ingest_uuid_spark", id_mode="uuid")
    sources = _inputs(tmp_path)[0][1]
    want = omni.submit("ingest_uuid_local", sources, "a", progress=False)
    with SparkIngest(omni.context, spark=spark.session) as engine:
        got = engine.submit("ingest_uuid_spark", sources, "a")
    counts = ("read", "written", "duplicates", "rejected")
    assert {k: getattr(got, k) for k in counts} == {k: getattr(want, k) for k in counts}
    assert got.duplicates == 0 and got.dedup == "none"

    def without_ids(name):
        return sorted(json.dumps(r["RawData"], sort_keys=True) for r in _rows(omni, name, "a"))

    assert without_ids("ingest_uuid_spark") == without_ids("ingest_uuid_local")
    ids = omni.read("ingest_uuid_spark", columns=[KEY]).column(KEY).to_pylist()
    assert len(set(ids)) == len(ids) == got.written


def test_a_spark_submit_that_loses_the_commit_race_leaves_the_winners_ids_to_it(spark, tmp_path, monkeypatch):
    """A local submit commits overlapping content between the Spark submit's staging and its commit:
    the Spark batch is rebased without the ids the winner added (read from the files Spark staged),
    counted as duplicates; every id stays unique and the index verifies."""
    from spark_udfs import ingest as I

    omni = Omni(config=spark.config)
    name = "ingest_race_spark"
    omni.create_table(name)
    mine = _jsonl(tmp_path / "mine.jsonl", [{"raw_data": _page(i, "race")} for i in range(10)])
    theirs = _jsonl(tmp_path / "theirs.jsonl", [{"raw_data": _page(i, "race")} for i in range(6, 15)])
    commit = I.P.commit_batch

    def lose_the_race(*args, **kwargs):
        omni.submit(name, [str(theirs)], "theirs", progress=False)  # the winner commits first
        return commit(*args, **kwargs)

    monkeypatch.setattr(I.P, "commit_batch", lose_the_race)
    with I.SparkIngest(omni.context, spark=spark.session) as engine:
        got = engine.submit(name, [str(mine)], "mine")
    assert (got.read, got.written, got.duplicates) == (10, 6, 4)
    state = omni.state(name)
    assert [(b.name, b.rows, b.duplicates) for b in state.batches] == [("theirs", 9, 0), ("mine", 6, 4)]
    ids = omni.read(name, columns=[KEY]).column(KEY).to_pylist()
    assert len(ids) == len(set(ids)) == 15
    assert omni.verify_index(name).ok


#: what the fault test's child process runs: the Spark engine on the cluster, with the two faults armed
_FAULTS_SCRIPT = r'''
import json, os, sys
from catalog_ext.config import OmniConfig
from omni_iceberg.api import Omni
from spark_udfs import ingest as I

args = json.loads(sys.argv[1])
omni = Omni(config=OmniConfig.resolve(catalog=args["catalog"], warehouse=args["warehouse"], home=args["home"],
                                      catalog_name="omni"))
listing = I.plan_files


def list_then_lose(sources, kind, policy):
    # the driver listed the file; it is gone before any task opens it
    planned = listing(sources, kind, policy)
    if args["gone"] in sources:
        os.remove(args["gone"])
    return planned


I.plan_files = list_then_lose
out = {}
with I.SparkIngest(omni.context, master=args["master"]) as engine:
    gone = engine.submit("faults_spark", args["gone_sources"], "gone")
    engine.test_kill_marker = args["marker"]
    killed = engine.submit("faults_spark", args["killed_sources"], "killed", chunk_rows=10)
    for name, r in (("gone", gone), ("killed", killed)):
        out[name] = {k: getattr(r, k) for k in ("read", "written", "duplicates", "rejected")}
    out["tasks"] = engine.tasks
print(json.dumps(out))
'''


def test_spark_ingest_survives_a_lost_file_and_a_killed_task_on_a_cluster(pg_server, tmp_path):
    """Faults on the standalone cluster, in one Spark application (a child process, as a user runs it):
    a file the driver listed that is deleted before its task reads it ends as ONE reject naming it and
    the rest lands; a task whose Python worker dies after sending some rows (the test hook, armed by a
    marker file) is run again by Spark, and the batch holds no duplicate and loses nothing."""
    from catalog_ext.config import OmniConfig
    from tests.services.spark_cluster import SparkTestCluster

    config = OmniConfig.resolve(catalog=pg_server.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri(),
                                home=tmp_path / "home", catalog_name="omni")
    omni = Omni(config=config)
    for name in ("faults_local", "faults_spark"):
        omni.create_table(name)
    a1, a2, a3 = _inputs(tmp_path)[0][1]
    # 6 files of 30 records, each file's last 10 pages repeating the next file's first 10
    killed = [str(_jsonl(tmp_path / f"k{f}.jsonl", [{"raw_data": _page(i, "kill"), "n": i}
                                                    for i in range(f * 20, f * 20 + 30)])) for f in range(6)]
    # the local engine's batches: the same files, without the one that disappears
    want_gone = omni.submit("faults_local", [a1, a3], "gone", progress=False)
    want_killed = omni.submit("faults_local", killed, "killed", progress=False)
    marker = tmp_path / "kill-one-task"
    marker.write_text("armed")
    args = {"catalog": config.catalog_uri, "warehouse": config.warehouse, "home": str(config.home),
            "gone": a2, "gone_sources": [a1, a2, a3], "killed_sources": killed, "marker": str(marker)}
    with SparkTestCluster(tmp_path / "spark", workers=2, cores=1) as cluster:  # 2 workers of 1 core
        args["master"] = cluster.master_url
        done = subprocess.run([sys.executable, "-c", _FAULTS_SCRIPT, json.dumps(args)], cwd=REPO,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-6000:] + cluster.logs()
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # the lost file: one more read and one more reject than the local engine without it, the rest equal
    assert not Path(a2).exists()
    assert got["gone"] == {"read": want_gone.read + 1, "written": want_gone.written,
                           "duplicates": want_gone.duplicates, "rejected": want_gone.rejected + 1}
    assert _rows(omni, "faults_spark", "gone") == _rows(omni, "faults_local", "gone")
    extra = sorted(set(_rejects(omni, "faults_spark", "gone")) - set(_rejects(omni, "faults_local", "gone")))
    assert extra == [(a2, None, None, None, "cannot read file: No such file or directory")]
    # the killed task: the hook claimed the marker (one worker died), Spark retried, the batch is whole
    assert not marker.exists()
    assert "Lost task" in done.stderr  # Spark's scheduler saw the task fail (and ran it again)
    assert got["killed"] == {"read": 180, "written": 130, "duplicates": 50, "rejected": 0}
    assert (want_killed.read, want_killed.written, want_killed.duplicates) == (180, 130, 50)
    assert _rows(omni, "faults_spark", "killed") == _rows(omni, "faults_local", "killed")
    ids = omni.read("faults_spark", columns=[KEY], batches=["killed"]).column(KEY).to_pylist()
    assert len(ids) == len(set(ids)) == 130
    assert got["tasks"] == [3, 6]  # one task a file: the killed one is one of six, retried in place
    assert omni.verify_index("faults_spark").ok
