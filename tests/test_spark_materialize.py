"""``omni accelerate --materialize --engine spark``: the plan of governance/materialize.py, Spark's join and writer.

The cluster test runs on a real standalone cluster (:class:`tests.services.spark_cluster.SparkTestCluster`,
2 cores) on the PostgreSQL catalog, driven by the ``omni`` command in a child process as a
user runs it, against the local engine on a twin family of the same pages. The others check
the plumbing and its errors without starting a JVM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from catalog_ext.errors import ConfigError
from omni_iceberg.api import Omni
from omni_iceberg.cli import main
from omni_iceberg.cli.parser import build_parser
from tests import feature_udfs as U
from tests.pages import pages_jsonl

REPO = Path(__file__).resolve().parents[1]
COLUMNS = ["t_len", "t_digits", "RawData.raw_data"]
READ = ["_ai_unique_id_", "_ai_append_name_", *COLUMNS]


def _family(omni: Omni, tmp_path, name: str, batches=("a", "b")) -> None:
    """Pages in ``batches`` (the same pages, so the same ids, for every family built here), two features."""
    omni.create_table(name)
    omni.register_features(name, [U.t_parse, U.t_len, U.t_digits])
    for b in batches:
        _add_batch(omni, tmp_path, name, b)


def _add_batch(omni: Omni, tmp_path, name: str, batch: str) -> None:
    omni.submit(name, [str(pages_jsonl(tmp_path, f"page-{batch}", 12))], batch=batch, progress=False)
    omni.backfill(name, ["t_len", "t_digits"], isolation="inline", progress=False)


def _omni_cli(config, *args: str) -> subprocess.CompletedProcess:
    """``omni`` in a child process on ``config``'s catalog: its own JVM, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "omni_iceberg.cli", "--catalog", config.catalog_uri, "--warehouse",
                           config.warehouse, "--home", str(config.home), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def _sorted(table: pa.Table) -> pa.Table:
    """Rows by (batch, id); string columns as ``string``: pyiceberg hands back ``large_string`` for
    some files (Spark's) and ``string`` for others, the same values either way."""
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_large_string(f.type) else f for f in table.schema])
    return table.cast(schema).sort_by([("_ai_append_name_", "ascending"), ("_ai_unique_id_", "ascending")])


def _copy(omni: Omni, name: str) -> pa.Table:
    """The materialized table's rows at the pinned snapshot, sorted."""
    state = omni.state(name)
    [m] = state.materializations
    meta = state.physical_table(m.table_key)
    return _sorted(omni.catalog.load_table(meta.identifier).scan(snapshot_id=meta.snapshot_id).to_arrow())


def _logical(omni: Omni, name: str, as_of: int | None = None) -> pa.Table:
    return _sorted(omni.read(name, columns=READ, as_of=as_of))


def test_accelerate_takes_an_engine_and_a_master():
    args = build_parser().parse_args(["accelerate", "web", "--materialize", "t_len", "--engine", "spark",
                                      "--spark-master", "spark://h:7077"])
    assert (args.engine, args.spark_master) == ("spark", "spark://h:7077")
    assert build_parser().parse_args(["accelerate", "web", "--refresh"]).engine == "local"


def test_auto_stays_local_on_the_embedded_catalog_and_hot_columns_refuse_an_engine(omni_home, tmp_path,
                                                                                    monkeypatch):
    omni = Omni(config=omni_home)
    _family(omni, tmp_path, "web")
    before = _logical(omni, "web")
    monkeypatch.setenv("OMNI_SPARK_THRESHOLD_BYTES", "0")
    report = omni.materialize("web", COLUMNS, engine="auto", progress=False)
    assert report["engine"] == "local" and "SQLite" in report["engine_reason"]
    assert report["rows_written"] == 24 and report["plan"]["action"] == "build"
    assert _logical(omni, "web").equals(before) and omni.verify_index("web").ok
    with pytest.raises(ConfigError, match="hot columns load in this process"):
        omni.accelerate("web", hot=["t_len"], engine="spark")
    # a fresh copy: auto says so without sizing anything
    again = omni.materialize("web", COLUMNS, engine="auto")
    assert again["plan"]["action"] == "fresh" and again["engine"] == "local"


def test_a_bad_column_and_an_unreachable_master_exit_2_before_any_spark_work(omni_home, tmp_path, capsys):
    omni = Omni(config=omni_home)
    _family(omni, tmp_path, "web", batches=("a",))
    version = omni.state("web").version
    home = str(omni_home.home)
    code = main(["--home", home, "accelerate", "web", "--materialize", "t_len,no_such_col", "--engine", "spark",
                 "--spark-master", "spark://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2 and "no column 'no_such_col'" in err and "Spark" not in err, err
    code = main(["--home", home, "accelerate", "web", "--materialize", "t_len", "--engine", "spark",
                 "--spark-master", "spark://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2 and "Spark master spark://127.0.0.1:1 is unreachable" in err, err
    state = omni.state("web")
    assert state.version == version and not state.materializations  # nothing committed
    # nor created: the session is asked for before the copy's table
    assert not [t for t in omni.catalog.list_tables("aidata") if "__m_" in ".".join(t)]


@pytest.mark.spark
@pytest.mark.postgres
def test_spark_materialize_on_a_cluster_writes_the_local_engines_rows(pg_server, tmp_path):
    from catalog_ext.config import OmniConfig
    from tests.services.spark_cluster import SparkTestCluster

    config = OmniConfig.resolve(catalog=pg_server.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri(),
                                home=tmp_path / "home", catalog_name="omni")
    omni = Omni(config=config)
    _family(omni, tmp_path, "ms")  # materialized on Spark
    _family(omni, tmp_path, "ml")  # its twin, materialized by the local engine
    old = omni.state("ms").version
    before = _logical(omni, "ms")
    assert before.num_rows == 24 and before.equals(_logical(omni, "ml"))
    local = omni.materialize("ml", COLUMNS, progress=False)
    select = ["--materialize", ",".join(COLUMNS), "--json", "--no-progress"]
    with SparkTestCluster(tmp_path / "spark") as cluster:
        built = _omni_cli(config, "accelerate", "ms", *select, "--engine", "spark", "--spark-master",
                          cluster.master_url)
        assert built.returncode == 0, built.stderr[-6000:] + cluster.logs()
        # a new batch makes both copies stale; the refresh appends it, on Spark for one, locally for the other
        for name in ("ms", "ml"):
            _add_batch(omni, tmp_path, name, "c")
        local_refresh = omni.refresh_materializations("ml", progress=False)
        refreshed = _omni_cli(config, "accelerate", "ms", "--refresh", "--json", "--no-progress", "--engine", "spark",
                              "--spark-master", cluster.master_url)
        assert refreshed.returncode == 0, refreshed.stderr[-6000:] + cluster.logs()
    report = json.loads(built.stdout)
    assert report["engine"] == "spark" and report["engine_reason"] == "requested --engine spark"
    assert report["plan"]["action"] == "build" and report["rows_written"] == local["rows_written"] == 24
    assert report["logical_version"] == old + 1
    [appended] = json.loads(refreshed.stdout)["refreshed"]
    assert appended["plan"]["action"] == local_refresh[0]["plan"]["action"] == "append"
    assert appended["plan"]["batches"] == ["c"] and appended["rows_written"] == 12
    spark_state, local_state = omni.state("ms"), omni.state("ml")
    assert spark_state.fresh_materialized_tables() and local_state.fresh_materialized_tables()
    # the same rows in the copy (values and types), and through a logical read that now uses it
    spark_copy, local_copy = _copy(omni, "ms"), _copy(omni, "ml")
    assert spark_copy.num_rows == 36 and spark_copy.equals(local_copy), (spark_copy.slice(0, 3), local_copy.slice(0, 3))
    assert spark_state.physical_columns_of("t_len")[0].table == spark_state.materializations[0].table_key
    now = _logical(omni, "ms")
    assert now.num_rows == 36 and now.equals(_logical(omni, "ml"))
    assert now.filter(pc.not_equal(now.column("_ai_append_name_"), "c")).equals(before)
    assert _logical(omni, "ms", as_of=old).equals(before)  # the previous version reads the same
    assert omni.verify_index("ms").ok
    some = now.column("_ai_unique_id_").to_pylist()[::7]
    got = _sorted(omni.get("ms", some, columns=READ))
    assert got.column("t_len").to_pylist() == now.column("t_len").to_pylist()[::7]
    # Spark wrote the copy: its snapshots say so, one per command, and no staging branch is left
    meta = spark_state.physical_table(spark_state.materializations[0].table_key)
    table = omni.catalog.load_table(meta.identifier)
    summary = table.snapshot_by_id(meta.snapshot_id).summary.additional_properties
    assert summary.get("omni.engine") == "spark" and summary.get("omni.operation") == "materialize"
    assert not [r for r in table.metadata.refs if r.startswith("omni-stage")]


@pytest.mark.spark
@pytest.mark.postgres
def test_a_rebuild_on_spark_replaces_every_row_of_the_copy_in_one_snapshot(spark, tmp_path):
    from omni_iceberg.demo.wide import wide_features

    omni = Omni(config=spark.config)
    name = "ms_rebuild"
    _family(omni, tmp_path, name, batches=("a", "b"))
    [w] = wide_features(1)
    omni.register_features(name, [w])
    omni.backfill(name, [w.name], isolation="inline", progress=False)
    columns = [w.name, "t_len"]
    read = ["_ai_unique_id_", "_ai_append_name_", *columns]
    omni.materialize(name, columns, engine="spark", spark=spark.session, progress=False)
    built = omni.state(name).version
    old = _sorted(omni.read(name, columns=read))
    # a new version of the feature: the copy is stale, and a refresh rebuilds it
    omni.register_features(name, [w.model_copy(update={"params": {"k": 7}, "version": ""})])
    omni.backfill(name, [w.name], isolation="inline", progress=False)
    new = _sorted(omni.read(name, columns=read))
    assert not new.equals(old)
    [report] = omni.refresh_materializations(name, engine="spark", spark=spark.session, progress=False)
    assert report["plan"]["action"] == "rebuild" and report["engine"] == "spark" and report["rows_written"] == 24
    state = omni.state(name)
    assert state.fresh_materialized_tables()
    copy = _copy(omni, name).rename_columns(read)
    assert copy.to_pylist() == new.to_pylist() and _sorted(omni.read(name, columns=read)).equals(new)
    assert _sorted(omni.read(name, columns=read, as_of=built)).equals(old)
    assert omni.verify_index(name).ok
    meta = state.physical_table(state.materializations[0].table_key)
    table = omni.catalog.load_table(meta.identifier)
    snap = table.snapshot_by_id(meta.snapshot_id)
    # one snapshot on the build's: every file of the build deleted, the rebuild's added
    assert snap.parent_snapshot_id == omni.state(name, as_of=built).physical_table(meta.key).snapshot_id
    assert snap.summary.additional_properties.get("omni.engine") == "spark"
    assert int(snap.summary.additional_properties["total-records"]) == 24
