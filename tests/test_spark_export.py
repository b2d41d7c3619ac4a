"""``omni export --engine spark``: one Spark task per part, the local engine's per-part code, the same bytes.

The cluster test runs on a real standalone cluster (:class:`tests.services.spark_cluster.SparkTestCluster`,
2 cores) with the export driven by the ``omni`` command in a child process, as a user runs it.
The others check the plumbing and its errors without starting a JVM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from catalog_ext.errors import ConfigError
from omni_iceberg.api import Omni
from omni_iceberg.cli import main
from omni_iceberg.cli.parser import build_parser
from omni_iceberg.explore.export import MANIFEST
from tests.faults import write_docs

REPO = Path(__file__).resolve().parents[1]
JARS = (Path(os.environ["OMNI_CACHE"]) if os.environ.get("OMNI_CACHE") else REPO / ".cache") / "jars"
COLUMNS = ["_ai_unique_id_", "_ai_append_name_", "RawData.raw_data"]
WHERE = "RawData.raw_data LIKE '%7%'"


def _fill(omni: Omni, tmp: Path) -> int:
    """Three batches of 40 pages; returns how many match WHERE."""
    omni.create_table("web")
    matching = 0
    for k, batch in enumerate(["a", "b", "c"]):
        texts = write_docs(tmp / f"{batch}.jsonl", 40 * k, 40)
        matching += sum("7" in t for t in texts)
        omni.submit("web", [str(tmp / f"{batch}.jsonl")], batch=batch, progress=False)
    return matching


@pytest.fixture
def embedded(tmp_path):
    o = Omni(home=tmp_path / "home")
    _fill(o, tmp_path)
    return o


def test_export_takes_an_engine_and_a_master():
    args = build_parser().parse_args(["export", "web", "--out", "x", "--engine", "spark", "--spark-master",
                                      "spark://h:7077"])
    assert (args.engine, args.spark_master) == ("spark", "spark://h:7077")
    assert build_parser().parse_args(["export", "web", "--out", "x"]).engine == "local"


def test_a_master_for_the_local_engine_or_an_unreachable_one_fails_before_any_work(embedded, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"a Spark master \(spark://h:7077\) was given for engine 'local'"):
        embedded.export("web", str(tmp_path / "x"), spark_master="spark://h:7077")
    out = tmp_path / "unreachable"
    code = main(["--home", str(tmp_path / "home"), "export", "web", "--out", str(out), "--where", WHERE,
                 "--engine", "spark", "--spark-master", "spark://127.0.0.1:1"])
    assert code == 2
    assert "Spark master spark://127.0.0.1:1 is unreachable" in capsys.readouterr().err
    assert not out.exists()
    assert not list((tmp_path / "home").rglob("spill/*"))


def test_auto_stays_local_on_the_embedded_catalog(embedded, tmp_path):
    r = embedded.export("web", str(tmp_path / "auto"), columns=COLUMNS, where=WHERE, engine="auto")
    assert r.manifest["engine"]["name"] == "local"
    assert "embedded SQLite" in r.manifest["engine"]["reason"]
    local = embedded.export("web", str(tmp_path / "local"), columns=COLUMNS, where=WHERE)
    assert local.manifest["engine"] == {"name": "local", "reason": "requested --engine local"}
    assert [f["sha256"] for f in r.manifest["files"]] == [f["sha256"] for f in local.manifest["files"]]


def _omni_cli(config, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--catalog", config.catalog_uri, "--warehouse",
                           config.warehouse, "--home", str(config.home), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def test_spark_export_on_a_cluster_writes_the_local_engines_bytes(pg_server, tmp_path):
    from catalog_ext.config import OmniConfig
    from tests.services.spark_cluster import SparkTestCluster

    config = OmniConfig.resolve(catalog=pg_server.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri(),
                                home=tmp_path / "home", catalog_name="omni")
    omni = Omni(config=config)
    matching = _fill(omni, tmp_path)
    local = omni.export("web", str(tmp_path / "local"), columns=COLUMNS, where=WHERE).manifest
    assert local["rows"] == matching > 0 and {f["batch"] for f in local["files"]} == {"a", "b", "c"}
    select = ["--columns", ",".join(COLUMNS), "--where", WHERE, "--json", "--no-progress"]
    with SparkTestCluster(tmp_path / "spark") as cluster:
        done = _omni_cli(config, "export", "web", "--out", str(tmp_path / "spark-out"), *select,
                         "--engine", "spark", "--spark-master", cluster.master_url)
        assert done.returncode == 0, done.stderr[-6000:] + cluster.logs()
        replay = _omni_cli(config, "export", "--from-manifest", str(tmp_path / "spark-out"), "--out",
                           str(tmp_path / "spark-replay"), "--json", "--no-progress", "--engine", "spark",
                           "--spark-master", cluster.master_url)
        assert replay.returncode == 0, replay.stderr[-6000:] + cluster.logs()
        # a --where that binds but fails on the rows (a text that is no number) fails in the tasks:
        # exit 2, the query's error, and nothing left behind
        bad = _omni_cli(config, "export", "web", "--out", str(tmp_path / "bad"), "--no-progress",
                        "--where", "CAST(RawData.raw_data AS INTEGER) > 0", "--engine", "spark",
                        "--spark-master", cluster.master_url)
    spark = json.loads((tmp_path / "spark-out" / MANIFEST).read_text())
    assert spark["engine"] == {"name": "spark", "reason": "requested --engine spark"}
    # the same files, byte for byte, in the same manifest order
    assert [(f["file"], f["rows"], f["sha256"]) for f in spark["files"]] == \
        [(f["file"], f["rows"], f["sha256"]) for f in local["files"]]
    for f in local["files"]:
        assert (tmp_path / "spark-out" / f["file"]).read_bytes() == (tmp_path / "local" / f["file"]).read_bytes()
    assert sorted(p.name for p in (tmp_path / "spark-out").iterdir()) == sorted(
        [f["file"] for f in local["files"]] + [MANIFEST])  # no temporary folder left
    assert {k: spark[k] for k in ("rows", "logical_version", "pinned_snapshots", "columns", "where", "batches")} \
        == {k: local[k] for k in ("rows", "logical_version", "pinned_snapshots", "columns", "where", "batches")}
    again = json.loads((tmp_path / "spark-replay" / MANIFEST).read_text())
    assert [(f["file"], f["sha256"]) for f in again["files"]] == [(f["file"], f["sha256"]) for f in spark["files"]]
    for f in spark["files"]:
        assert (tmp_path / "spark-replay" / f["file"]).read_bytes() == (tmp_path / "spark-out" / f["file"]).read_bytes()
    assert bad.returncode == 2, bad.stderr[-4000:]
    assert "the export's query failed" in bad.stderr and "Conversion Error" in bad.stderr, bad.stderr[-4000:]
    assert not (tmp_path / "bad").exists()
