"""``omni regroup --engine spark``: the plan of governance/column_groups.py, Spark's join and writer.

The cluster test runs on a real standalone cluster (:class:`tests.services.spark_cluster.SparkTestCluster`,
2 cores) on the PostgreSQL catalog, driven by the ``omni`` command in a child process, against
the local engine on a twin family of the same pages: a first regroup (a new group) and a
second after a new batch (into the existing group, whose files of other batches stay
readable). The others check the plumbing without starting a JVM.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from catalog_ext.errors import ConfigError
from omni_iceberg.api import Omni
from omni_iceberg.cli import main
from tests import feature_udfs as U
from tests.pages import pages_jsonl
from tests.test_spark_materialize import _omni_cli, _sorted

READ = ["_ai_unique_id_", "_ai_append_name_", "t_len", "t_digits", "RawData.raw_data"]


def _family(omni: Omni, tmp_path, name: str, batches=("a", "b")) -> None:
    omni.create_table(name)
    omni.register_features(name, [U.t_parse, U.t_len, U.t_digits])
    for b in batches:
        _add_batch(omni, tmp_path, name, b)


def _add_batch(omni: Omni, tmp_path, name: str, batch: str) -> None:
    omni.submit(name, [str(pages_jsonl(tmp_path, f"page-{batch}", 12))], batch=batch, progress=False)
    omni.backfill(name, ["t_len", "t_digits"], isolation="inline", progress=False)


def _logical(omni: Omni, name: str, as_of: int | None = None) -> pa.Table:
    return _sorted(omni.read(name, columns=READ, as_of=as_of))


def _group(omni: Omni, name: str) -> pa.Table:
    """The column group's rows at the pinned snapshot, its value columns named by logical path, sorted."""
    state = omni.state(name)
    [meta] = [t for t in state.tables if t.role == "column-group"]
    data = omni.catalog.load_table(meta.identifier).scan(snapshot_id=meta.snapshot_id).to_arrow()
    names = {pc.name: pc.logical for pc in state.physical_columns if pc.table == meta.key}
    data = data.rename_columns([names.get(n, n) for n in data.column_names])
    return _sorted(data.select(["_ai_unique_id_", "_ai_append_name_", *sorted(names.values())]))


def test_auto_stays_local_on_the_embedded_catalog_and_split_refuses_an_engine(omni_home, tmp_path, monkeypatch,
                                                                               capsys):
    omni = Omni(config=omni_home)
    _family(omni, tmp_path, "web")
    before, version = _logical(omni, "web"), omni.state("web").version
    with pytest.raises(ConfigError, match="Spark master spark://127.0.0.1:1 is unreachable"):
        omni.regroup("web", engine="spark", spark_master="spark://127.0.0.1:1")
    # before any group table was made
    assert omni.state("web").version == version
    assert not [t for t in omni.catalog.list_tables("aidata") if "__g_" in ".".join(t)]
    monkeypatch.setenv("OMNI_SPARK_THRESHOLD_BYTES", "0")
    report = omni.regroup("web", engine="auto", progress=False)
    assert report["engine"] == "local" and "SQLite" in report["engine_reason"]
    assert report["logical_version"] == report["plan"]["version"] + 1
    assert _logical(omni, "web").equals(before) and omni.verify_index("web").ok
    again = omni.regroup("web", engine="auto")  # nothing left to move: auto says so without sizing
    assert again["engine"] == "local" and again["engine_reason"] == "auto: nothing to move"
    code = main(["--home", str(omni_home.home), "regroup", "web", "--split", "t_len", "--engine", "spark"])
    assert code == 2 and "--split and --co-read run in this process" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.postgres
def test_spark_regroup_on_a_cluster_gives_the_local_engines_rows(pg_server, tmp_path):
    from catalog_ext.config import OmniConfig
    from tests.services.spark_cluster import SparkTestCluster

    config = OmniConfig.resolve(catalog=pg_server.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri(),
                                home=tmp_path / "home", catalog_name="omni")
    omni = Omni(config=config)
    _family(omni, tmp_path, "rs")  # regrouped on Spark
    _family(omni, tmp_path, "rl")  # its twin, regrouped by the local engine
    old = omni.state("rs").version
    before = _logical(omni, "rs")
    assert before.num_rows == 24 and before.equals(_logical(omni, "rl"))
    omni.regroup("rl", progress=False)
    with SparkTestCluster(tmp_path / "spark") as cluster:
        first = _omni_cli(config, "regroup", "rs", "--json", "--no-progress", "--engine", "spark", "--spark-master",
                          cluster.master_url)
        assert first.returncode == 0, first.stderr[-6000:] + cluster.logs()
        middle = omni.state("rs").version
        for name in ("rs", "rl"):  # a new batch lands in the feature tables, then moves into the existing group
            _add_batch(omni, tmp_path, name, "c")
        omni.regroup("rl", progress=False)
        second = _omni_cli(config, "regroup", "rs", "--json", "--no-progress", "--engine", "spark",
                           "--spark-master", cluster.master_url)
        assert second.returncode == 0, second.stderr[-6000:] + cluster.logs()
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["engine"] == two["engine"] == "spark" and one["logical_version"] == old + 1
    assert [m["new"] for m in one["plan"]["moves"]] == [True] and [m["new"] for m in two["plan"]["moves"]] == [False]
    state = omni.state("rs")
    assert state.operation == "regroup" and sum(1 for t in state.tables if t.role == "column-group") == 1
    # the same rows in the group, and through a logical read
    spark_group, local_group = _group(omni, "rs"), _group(omni, "rl")
    assert spark_group.num_rows == 36 and spark_group.equals(local_group), (spark_group.slice(0, 2),
                                                                            local_group.slice(0, 2))
    now = _logical(omni, "rs")
    assert now.num_rows == 36 and now.equals(_logical(omni, "rl"))
    assert _logical(omni, "rs", as_of=old).equals(before)  # older versions read their own layout
    assert _logical(omni, "rs", as_of=middle).equals(before)
    assert omni.verify_index("rs").ok
    some = now.column("_ai_unique_id_").to_pylist()[::5]
    got = _sorted(omni.get("rs", some, columns=READ))
    assert got.column("t_digits").to_pylist() == now.column("t_digits").to_pylist()[::5]
    # the members are emptied, Spark wrote the group, no staging branch is left anywhere
    for t in state.tables:
        ice = omni.catalog.load_table(t.identifier)
        assert not [r for r in ice.metadata.refs if r.startswith("omni-stage")], t.identifier
        if t.role == "column-group":
            summary = ice.snapshot_by_id(t.snapshot_id).summary.additional_properties
            assert summary.get("omni.engine") == "spark" and summary.get("omni.operation") == "regroup"
        elif t.emptied:
            assert not list(ice.scan(snapshot_id=t.snapshot_id).plan_files()), t.identifier
