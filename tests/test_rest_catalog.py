"""Logical tables on a real Iceberg REST catalog (Apache Iceberg's reference server).

The same guarantees as on the SQL catalog (see :mod:`catalog_ext.rest_commit`): one
logical version becomes visible atomically, concurrent writers lose nothing, a writer
killed at any point leaves nothing visible, and the REST view - derived state for Spark
and Trino - is repaired after a crash between the pointer commit and the view replace.
Each test gets its own server (~1-3 s to start) and warehouse.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from catalog_ext.rest_commit import POINTER_SUFFIX
from omni_iceberg.api import Omni
from tests.faults import (
    REPO_ROOT,
    check_family,
    child_env,
    run_and_kill,
    run_and_kill_when,
    run_omni,
    staging_leftovers,
    write_docs,
)
from tests.services.rest_catalog import RestCatalogServer

pytestmark = [pytest.mark.rest, pytest.mark.slow]
CHEAP = ["punctuation_ratio", "digit_ratio"]


@pytest.fixture
def rest():
    with RestCatalogServer() as server:
        yield server


def _omni(rest: RestCatalogServer, home: Path) -> Omni:
    return Omni(catalog=rest.uri, warehouse=rest.warehouse, home=home)


def _rest_env(rest: RestCatalogServer, home: Path) -> dict[str, str]:
    return child_env(OMNI_CATALOG=rest.uri, OMNI_WAREHOUSE=rest.warehouse, OMNI_HOME=str(home))


def _view(rest: RestCatalogServer, name: str, namespace: str = "aidata") -> dict:
    import urllib.request

    with urllib.request.urlopen(f"{rest.uri}/v1/namespaces/{namespace}/views/{name}", timeout=10) as resp:
        return json.loads(resp.read())["metadata"]


def _current_sql(view: dict, dialect: str) -> str:
    current = next(v for v in view["versions"] if v["version-id"] == view["current-version-id"])
    return next(r["sql"] for r in current["representations"] if r["dialect"] == dialect)


def test_lifecycle_submit_backfill_sql_and_as_of(rest, tmp_path):
    omni = _omni(rest, tmp_path / "home")
    omni.create_table("web")
    texts = write_docs(tmp_path / "a.jsonl", 0, 30)
    omni.submit("web", [str(tmp_path / "a.jsonl")], batch="a", progress=False)
    write_docs(tmp_path / "b.jsonl", 30, 10)
    omni.submit("web", [str(tmp_path / "b.jsonl")], batch="b", progress=False)
    from omni_iceberg.features.library import BUILTINS

    omni.register_features("web", [b for b in BUILTINS if b.definition.name in ["html_parser", *CHEAP]])
    report = omni.backfill("web", CHEAP)
    assert report.errors == 0

    fresh = _omni(rest, tmp_path / "home2")  # nothing cached: everything comes from the REST catalog
    assert fresh.list_tables() == ["aidata.web"]
    ops = [v.operation for v in fresh.log("web")]
    assert ops[:3] == ["create", "ingest", "ingest"] and len(ops) == fresh.state("web").version
    rows = fresh.query("SELECT _ai_append_name_ AS b, count(*) AS n, count(punctuation_ratio) AS p "
                       "FROM web GROUP BY 1 ORDER BY 1").to_pylist()
    assert rows == [{"b": "a", "n": 30, "p": 30}, {"b": "b", "n": 10, "p": 10}]
    assert {r["raw_data"] for r in fresh.read("web", columns=["RawData"], batches=["a"])
            .column("RawData").to_pylist()} == texts
    # as-of resolves through the pointer table: version 2 had batch a only, no features
    assert fresh.query("SELECT count(*) AS n FROM web", as_of=2).to_pylist() == [{"n": 30}]
    with pytest.raises(Exception, match="punctuation_ratio"):
        fresh.query("SELECT punctuation_ratio FROM web", as_of=3)

    # the REST view is derived from the pointer: latest version, its pins in the SQL
    state = fresh.state("web")
    view = _view(rest, "web")
    assert view["properties"]["omni.logical-version"] == str(state.version)
    spark_sql = _current_sql(view, "spark")
    for table in state.tables:
        assert str(table.snapshot_id) in spark_sql
    pointer = fresh.catalog.load_table(f"aidata.web{POINTER_SUFFIX}")
    assert pointer.current_snapshot().summary.additional_properties["omni.logical-version"] == str(state.version)
    assert check_family(fresh, "web").anomalies == []


def test_a_commit_on_a_stale_pointer_is_refused(rest, tmp_path):
    """Two writers read the same pointer snapshot: the second commit fails its CAS (FamilyStore then re-applies)."""
    from catalog_ext.errors import CommitConflictError
    from catalog_ext.rest_commit import RestViewCatalog

    omni = _omni(rest, tmp_path / "home")
    omni.create_table("web")
    store = omni.store
    stale = store.views.load_view("aidata", "web")  # what a slow writer read
    write_docs(tmp_path / "a.jsonl", 0, 5)
    omni.submit("web", [str(tmp_path / "a.jsonl")], batch="a", progress=False)  # another writer wins
    from catalog_ext.views import with_new_version

    meta = with_new_version(stale.metadata, stale.metadata["schemas"][0], [], ["aidata"],
                            stale.properties, {"omni.family-location": "x"}, version_id=2)
    with pytest.raises(CommitConflictError, match="another writer committed first"):
        RestViewCatalog(omni.catalog).replace_view(stale, meta)
    assert [v.version for v in omni.log("web")] == [1, 2] and omni.state("web").batches[0].name == "a"


WRITER = r"""
import sys
from omni_iceberg.api import Omni
who, n, src_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
omni = Omni()
for i in range(n):
    omni.submit("web", [f"{src_dir}/{who}-{i}.jsonl"], batch=f"{who}-{i}", progress=False)
"""


def test_concurrent_writers_lose_nothing(rest, tmp_path):
    home = tmp_path / "home"
    omni = _omni(rest, home)
    omni.create_table("web")
    n = 3
    for who in ("p", "q"):
        for i in range(n):
            rows = [json.dumps({"raw_data": f"{who} batch {i} doc {j}"}) for j in range(20)]
            (tmp_path / f"{who}-{i}.jsonl").write_text("\n".join(rows) + "\n")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, who, str(n), str(tmp_path)], cwd=REPO_ROOT,
                              env=_rest_env(rest, home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for who in ("p", "q")]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    state = omni.state("web")
    assert sorted(b.name for b in state.batches) == sorted(f"{w}-{i}" for w in "pq" for i in range(n))
    assert [v.version for v in omni.log("web")] == list(range(1, 2 * n + 2))
    texts = {r["raw_data"] for r in omni.read("web", columns=["RawData"]).column("RawData").to_pylist()}
    assert texts == {f"{w} batch {i} doc {j}" for w in "pq" for i in range(n) for j in range(20)}
    for b in state.batches:  # every batch is readable at the version that committed it
        assert omni.read("web", batches=[b.name], as_of=b.version).num_rows == 20
    assert _view(rest, "web")["properties"]["omni.logical-version"] == str(state.version)
    assert check_family(omni, "web").anomalies == []


def test_kill9_during_submit_leaves_nothing_visible_and_resumes(rest, tmp_path):
    home = tmp_path / "home"
    _omni(rest, home).create_table("web")
    expected = write_docs(tmp_path / "a.jsonl", 0, 1500)
    env = _rest_env(rest, home)
    args = ["submit", "web", str(tmp_path / "a.jsonl"), "--batch", "a", "--no-progress"]
    landed = 0
    for outcome in (run_and_kill(*args, delay_s=0.4, env=env),
                    run_and_kill_when(*args, env=env,
                                      condition=lambda: bool(staging_leftovers(_omni(rest, home), "web")))):
        assert outcome.killed or outcome.returncode == 0, outcome.describe()
        landed += outcome.killed
        report = check_family(_omni(rest, home), "web")
        assert report.anomalies == [] and report.batches in ({}, {"a": 1500}), report
    assert landed >= 1, "every run finished before its kill: the test proved nothing"
    final = run_omni(*args, env=env)
    assert final.returncode == 0, final.describe()
    omni = _omni(rest, home)
    report = check_family(omni, "web")
    assert report.anomalies == [] and report.batches == {"a": 1500}
    assert {r["raw_data"] for r in omni.read("web", columns=["RawData"]).column("RawData").to_pylist()} == expected


# A writer that dies (os._exit: no cleanup, like kill -9) at one exact step of the protocol.
DIE_AT = r"""
import os, sys
from catalog_ext import rest_commit
where, src = sys.argv[1], sys.argv[2]
if where == "before-pointer-commit":
    from pyiceberg.catalog.rest import RestCatalog
    RestCatalog.commit_table = lambda *a, **k: os._exit(9)
else:  # after the pointer commit, before the view replace
    rest_commit.RestViewCatalog._write_view = lambda *a, **k: os._exit(9)
from omni_iceberg.api import Omni
Omni().submit("web", [src], batch="a", progress=False)
"""


@pytest.mark.parametrize("where", ["before-pointer-commit", "after-pointer-commit"])
def test_a_writer_dying_at_each_protocol_step(rest, tmp_path, where):
    home = tmp_path / "home"
    omni = _omni(rest, home)
    omni.create_table("web")
    write_docs(tmp_path / "a.jsonl", 0, 40)
    done = subprocess.run([sys.executable, "-c", DIE_AT, where, str(tmp_path / "a.jsonl")], cwd=REPO_ROOT,
                          env=_rest_env(rest, home), capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stderr
    if where == "before-pointer-commit":
        # nothing visible: still version 1, no batch, the view untouched
        reader = _omni(rest, home)
        assert reader.state("web").version == 1 and reader.state("web").batches == ()
        assert _view(rest, "web")["properties"]["omni.logical-version"] == "1"
        assert check_family(reader, "web").anomalies == []
        return
    # committed: the pointer says version 2, the view still shows 1 until someone reads
    assert _view(rest, "web")["properties"]["omni.logical-version"] == "1"
    reader = _omni(rest, home)
    state = reader.state("web")  # loading repairs the derived view
    assert state.version == 2 and [b.name for b in state.batches] == ["a"]
    view = _view(rest, "web")
    assert view["properties"]["omni.logical-version"] == "2"
    assert str(state.base_table.snapshot_id) in _current_sql(view, "trino")
    assert reader.read("web", columns=["RawData"]).num_rows == 40
    assert check_family(reader, "web").anomalies == []


def test_unreachable_rest_catalog_names_host_and_port_and_fails_fast(tmp_path):
    from catalog_ext.errors import ConfigError
    from tests.services import free_port

    port = free_port()  # nothing listens there
    omni = Omni(catalog=f"http://admin:s3cr3t-pw@127.0.0.1:{port}", warehouse=(tmp_path / "wh").as_uri(),
                home=tmp_path / "home")
    with pytest.raises(ConfigError) as info:
        omni.list_tables()
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and "s3cr3t-pw" not in message


def test_spark_and_trino_config_emit_rest_and_s3_settings_without_secrets(tmp_path, monkeypatch, capsys):
    """No server needed: the settings are derived from the configuration alone."""
    import stat

    from omni_iceberg.cli import main

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-never-shown")
    base = ["--home", str(tmp_path / "home"), "--catalog", "http://127.0.0.1:8181", "--warehouse", "s3://lake/wh"]
    assert main([*base, "spark-config"]) == 0
    out = capsys.readouterr().out
    assert "spark.sql.catalog.omni.type rest" in out and "spark.sql.catalog.omni.uri http://127.0.0.1:8181" in out
    assert "spark.sql.catalog.omni.io-impl org.apache.iceberg.aws.s3.S3FileIO" in out
    assert "spark.sql.catalog.omni.s3.endpoint http://127.0.0.1:9000" in out and "client.region eu-west-1" in out
    assert "aws-secret-never-shown" not in out
    assert main([*base, "trino-config", "--out", str(tmp_path / "etc")]) == 0
    trino = (tmp_path / "etc" / "omni.properties").read_text()
    assert "iceberg.catalog.type=rest" in trino and "iceberg.rest-catalog.uri=http://127.0.0.1:8181" in trino
    assert "fs.native-s3.enabled=true" in trino and "s3.path-style-access=true" in trino
    assert "aws-secret-never-shown" not in trino
    # a JDBC password: masked on stdout, kept in the owner-only file a Spark set-up reads
    pg = ["--home", str(tmp_path / "home"), "--catalog", "postgresql+psycopg://bob:pg-pass-123@db:5432/cat",
          "--warehouse", str(tmp_path / "wh")]
    assert main([*pg, "spark-config"]) == 0
    out = capsys.readouterr().out
    assert "spark.sql.catalog.omni.type jdbc" in out and "pg-pass-123" not in out and "jdbc.password ***" in out
    assert main([*pg, "spark-config", "--out", str(tmp_path / "spark-defaults.conf")]) == 0
    written = tmp_path / "spark-defaults.conf"
    assert "jdbc.password pg-pass-123" in written.read_text()
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert "pg-pass-123" not in capsys.readouterr().out


# Runs in a fresh interpreter: in the test process a SparkSession already exists (the
# shared ``spark`` fixture, on another catalog) and getOrCreate would hand that one back;
# stopping it here would stop it for every later Spark test.
REST_SPARK_CHILD = r"""
import json, sys
from catalog_ext.config import OmniConfig
from spark_udfs.session import build_spark_session

uri, warehouse, home, jar_cache = sys.argv[1:5]
config = OmniConfig.resolve(catalog=uri, warehouse=warehouse, home=home, catalog_name="omni")
session = build_spark_session(config, app_name="omni-rest-tests", jar_cache_dir=jar_cache)
try:
    rows = session.sql("SELECT _ai_append_name_, count(*) FROM omni.aidata.web GROUP BY 1 ORDER BY 1").collect()
    props = {r[0]: r[1] for r in session.sql("SHOW TBLPROPERTIES omni.aidata.web").collect()}
    print(json.dumps({"rows": [list(r) for r in rows], "version": props.get("omni.logical-version")}))
finally:
    session.stop()
"""


@pytest.mark.spark
def test_spark_reads_the_derived_view_on_the_rest_catalog(rest, tmp_path):
    """The REST view is what Spark reads: it must pin the latest logical version's snapshots."""
    import os

    from tests.conftest import _jar_cache

    home = tmp_path / "home"
    omni = _omni(rest, home)
    omni.create_table("web")
    write_docs(tmp_path / "a.jsonl", 0, 12)
    omni.submit("web", [str(tmp_path / "a.jsonl")], batch="a", progress=False)
    write_docs(tmp_path / "b.jsonl", 12, 3)
    omni.submit("web", [str(tmp_path / "b.jsonl")], batch="b", progress=False)
    state = omni.state("web")
    done = subprocess.run([sys.executable, "-c", REST_SPARK_CHILD, rest.uri, rest.warehouse, str(home),
                           str(_jar_cache())], cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == [["a", 12], ["b", 3]]
    assert result["version"] == str(state.version)
    # as of the first ingest (through the pointer), omni and Spark's pinned view agree on what it held
    assert omni.query("SELECT count(*) AS n FROM web", as_of=2).to_pylist() == [{"n": 12}]


def test_tags_drop_and_recreate(rest, tmp_path):
    omni = _omni(rest, tmp_path / "home")
    omni.create_table("web")
    write_docs(tmp_path / "a.jsonl", 0, 8)
    omni.submit("web", [str(tmp_path / "a.jsonl")], batch="a", progress=False)
    omni.tag("web", "first", version=2)
    write_docs(tmp_path / "b.jsonl", 8, 4)
    omni.submit("web", [str(tmp_path / "b.jsonl")], batch="b", progress=False)
    assert omni.query("SELECT count(*) AS n FROM web", as_of="first").to_pylist() == [{"n": 8}]
    report = omni.drop_table("web", purge=True)
    assert report["physical_tables"] and report["files_deleted"] >= 4
    fresh = _omni(rest, tmp_path / "home2")
    assert fresh.list_tables() == []
    assert not fresh.catalog.table_exists(f"aidata.web{POINTER_SUFFIX}")
    import urllib.error

    with pytest.raises(urllib.error.HTTPError, match="404"):  # the derived view went with it
        _view(rest, "web")
    from catalog_ext.errors import NoSuchLogicalTableError

    for missing in ("web", "elsewhere.web"):  # unknown table, unknown namespace: the same clear error
        with pytest.raises(NoSuchLogicalTableError, match="omni table create"):
            fresh.state(missing)
    fresh.create_table("web")  # the name is free again, and starts at version 1
    assert [v.version for v in fresh.log("web")] == [1]


def test_a_rest_catalog_named_in_pyiceberg_yaml_behaves_the_same(rest, tmp_path, monkeypatch, capsys):
    from omni_iceberg.cli import main

    (tmp_path / ".pyiceberg.yaml").write_text(f"catalog:\n  lake:\n    type: rest\n    uri: {rest.uri}\n")
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    # pyiceberg reads the yaml once, at import; a user's process starts with it in place
    monkeypatch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())
    write_docs(tmp_path / "a.jsonl", 0, 6)
    base = ["--home", str(tmp_path / "home"), "--catalog", "lake", "--warehouse", rest.warehouse]
    assert main([*base, "table", "create", "web"]) == 0
    assert main([*base, "submit", "web", str(tmp_path / "a.jsonl"), "--batch", "a", "--no-progress"]) == 0
    capsys.readouterr()
    assert main([*base, "--json", "sql", "SELECT count(*) AS n FROM web"]) == 0
    assert '"n": 6' in capsys.readouterr().out
    # the same table through the URI: one catalog, two ways to name it
    assert _omni(rest, tmp_path / "home2").state("web").version == 2
