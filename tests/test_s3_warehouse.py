"""A warehouse in an S3-API bucket (s3proxy, a real S3 server on its filesystem backend).

Same behaviour as a local warehouse - submit, ``omni sql``, export, as-of - with
credentials taken from the usual places (the AWS environment, ``.pyiceberg.yaml``) and
never written to output, the catalog, metadata or logs. A wrong endpoint, a missing
bucket or a wrong secret fails at once with a message naming host, port and bucket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catalog_ext.errors import ConfigError
from omni_iceberg.api import Omni
from tests.faults import REPO_ROOT, check_family, write_docs
from tests.services import free_port
from tests.services.s3proxy import AWS_VARS, S3ProxyServer

pytestmark = [pytest.mark.rest, pytest.mark.slow]


@pytest.fixture(scope="module")
def s3():
    with S3ProxyServer() as server:
        server.create_bucket("lake")
        yield server


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path / "no-yaml"))  # no stray ~/.pyiceberg.yaml
    return monkeypatch


def _bucket_files(s3: S3ProxyServer, prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector, FileType

    infos = s3.filesystem().get_file_info(FileSelector(prefix, recursive=True))
    return [i.path for i in infos if i.type == FileType.File]


def _assert_secret_nowhere(secret: str, *roots: Path, s3: S3ProxyServer | None = None, prefix: str = "") -> None:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), f"secret found in {path}"
    if s3 is not None:
        fs = s3.filesystem()
        for key in _bucket_files(s3, prefix):
            try:
                with fs.open_input_stream(key) as f:
                    data = f.read()
            except FileNotFoundError:  # s3proxy's filesystem backend lists folder markers as objects
                continue
            assert secret.encode() not in data, f"secret found in s3://{key}"


def test_submit_sql_export_on_s3_with_credentials_from_the_environment(s3, clean_env, tmp_path):
    for key, value in s3.environment().items():
        clean_env.setenv(key, value)
    home = tmp_path / "home"
    omni = Omni(home=home, warehouse="s3://lake/env")
    omni.create_table("web")
    texts = write_docs(tmp_path / "a.jsonl", 0, 40)
    omni.submit("web", [str(tmp_path / "a.jsonl")], batch="a", progress=False)
    write_docs(tmp_path / "b.jsonl", 40, 10)
    omni.submit("web", [str(tmp_path / "b.jsonl")], batch="b", progress=False)

    # the data really is in the bucket, and nothing of it in the local home
    files = _bucket_files(s3, "lake/env")
    assert any(f.endswith(".parquet") for f in files) and any(f.endswith(".metadata.json") for f in files)
    assert not list((home / "warehouse").rglob("*.parquet")) if (home / "warehouse").exists() else True

    fresh = Omni(home=home, warehouse="s3://lake/env")
    assert fresh.query("SELECT _ai_append_name_ AS b, count(*) AS n FROM web GROUP BY 1 ORDER BY 1").to_pylist() \
        == [{"b": "a", "n": 40}, {"b": "b", "n": 10}]
    assert fresh.query("SELECT count(*) AS n FROM web", as_of=2).to_pylist() == [{"n": 40}]
    assert check_family(fresh, "web").anomalies == []
    result = fresh.export("web", str(tmp_path / "out"), columns=["RawData.raw_data"], where="_ai_append_name_ = 'a'",
                          progress=False)
    import pyarrow.parquet as pq

    exported = pq.read_table(sorted((tmp_path / "out").rglob("*.parquet"))).column(0).to_pylist()
    assert set(exported) == texts, result
    _assert_secret_nowhere(s3.secret_key, home, tmp_path / "out", s3=s3, prefix="lake/env")


def test_cli_with_credentials_from_pyiceberg_yaml_never_prints_them(s3, clean_env, tmp_path):
    yaml_home = tmp_path / "yaml"
    yaml_home.mkdir()
    props = s3.pyiceberg_properties()
    (yaml_home / ".pyiceberg.yaml").write_text(
        "catalog:\n  omni:\n" + "".join(f"    {k}: {json.dumps(v)}\n" for k, v in props.items()))
    env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
    env.update(PYTHONPATH=str(REPO_ROOT), PYICEBERG_HOME=str(yaml_home),
               AWS_REQUEST_CHECKSUM_CALCULATION="WHEN_REQUIRED", AWS_RESPONSE_CHECKSUM_VALIDATION="WHEN_REQUIRED")
    home = tmp_path / "home"
    write_docs(tmp_path / "a.jsonl", 0, 20)
    base = [sys.executable, "-m", "omni_iceberg.cli", "--home", str(home), "--warehouse", "s3://lake/yaml"]
    outputs = []
    for args in (["table", "create", "web"], ["submit", "web", str(tmp_path / "a.jsonl"), "--batch", "a",
                                             "--no-progress"],
                 ["sql", "SELECT count(*) AS n FROM web"], ["log", "web"], ["status", "web"]):
        done = subprocess.run(base + args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    assert "20" in outputs[2]
    assert any(f.endswith(".parquet") for f in _bucket_files(s3, "lake/yaml"))
    for out in outputs:
        assert s3.secret_key not in out
    _assert_secret_nowhere(s3.secret_key, home, s3=s3, prefix="lake/yaml")


def test_unreachable_endpoint_names_host_and_port_within_seconds(clean_env, tmp_path):
    port = free_port()  # nothing listens there
    clean_env.setenv("AWS_ACCESS_KEY_ID", "someone")
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", "never-print-this-secret")
    clean_env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        Omni(home=tmp_path / "home", warehouse="s3://lake/x").list_tables()
    assert time.monotonic() - start < 60  # bounded: the connect timeout, not the SDK's retry budget
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and "never-print-this-secret" not in message


def test_missing_bucket_and_wrong_secret_are_named_without_the_secret(s3, clean_env, tmp_path):
    for key, value in s3.environment().items():
        clean_env.setenv(key, value)
    with pytest.raises(ConfigError, match="bucket 'nobucket' does not exist at 127.0.0.1"):
        Omni(home=tmp_path / "h1", warehouse="s3://nobucket/x").list_tables()
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value-123")
    with pytest.raises(ConfigError) as info:
        Omni(home=tmp_path / "h2", warehouse="s3://lake/x").list_tables()
    message = str(info.value)
    assert f"127.0.0.1:{s3.port}" in message and "'lake'" in message
    assert "wrong-secret-value-123" not in message and s3.secret_key not in message


def _rest_over(s3: S3ProxyServer, warehouse: str):
    """Iceberg's REST server with its warehouse (and so every metadata file it writes) in the bucket."""
    from tests.services.rest_catalog import RestCatalogServer

    server_props = {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "s3.endpoint": s3.endpoint,
                    "s3.path-style-access": "true", "s3.access-key-id": s3.access_key,
                    "s3.secret-access-key": s3.secret_key, "client.region": s3.region}
    return RestCatalogServer(warehouse=warehouse, catalog_properties=server_props, extra_env=s3.environment())


def test_rest_catalog_in_front_of_the_bucket(s3, clean_env, tmp_path):
    """The usual deployment: a REST catalog whose server keeps metadata in S3, omni writing data there."""
    for key, value in s3.environment().items():
        clean_env.setenv(key, value)
    with _rest_over(s3, "s3://lake/rest") as rest:
        home = tmp_path / "home"
        omni = Omni(catalog=rest.uri, warehouse="s3://lake/rest", home=home)
        omni.create_table("web")
        texts = write_docs(tmp_path / "a.jsonl", 0, 25)
        omni.submit("web", [str(tmp_path / "a.jsonl")], batch="a", progress=False)
        write_docs(tmp_path / "b.jsonl", 25, 5)
        omni.submit("web", [str(tmp_path / "b.jsonl")], batch="b", progress=False)
        fresh = Omni(catalog=rest.uri, warehouse="s3://lake/rest", home=tmp_path / "home2")
        assert fresh.query("SELECT count(*) AS n FROM web").to_pylist() == [{"n": 30}]
        assert fresh.query("SELECT count(*) AS n FROM web", as_of=2).to_pylist() == [{"n": 25}]
        assert {r["raw_data"] for r in fresh.read("web", columns=["RawData"], batches=["a"])
                .column("RawData").to_pylist()} == texts
        assert check_family(fresh, "web").anomalies == []
        files = _bucket_files(s3, "lake/rest")
        # table metadata (written by the Java server), view metadata, family documents and data: all in S3
        assert any("web__omni_versions/metadata/" in f and f.endswith(".metadata.json") for f in files)
        assert any("/web/metadata/" in f for f in files) and any("/web/omni/family-v" in f for f in files)
        assert any(f.endswith(".parquet") for f in files)
        _assert_secret_nowhere(s3.secret_key, home, s3=s3, prefix="lake/rest")


# Runs in a fresh interpreter: a JVM that an earlier Spark test started keeps its class
# path, and the AWS SDK bundle must be on it from the start.
SPARK_CHILD = r"""
import json, sys
from catalog_ext.config import OmniConfig
from omni_iceberg import engine_config
from tests.toolchain.iceberg_rest import ensure_rest_jars
from spark_udfs.jars import ensure_jars
from spark_udfs.session import build_spark_session

uri, warehouse, home, jar_cache = sys.argv[1:5]
config = OmniConfig.resolve(catalog=uri, warehouse=warehouse, home=home)
settings = engine_config.spark_properties(config)
# no Ivy download in tests: the AWS SDK bundle comes from the REST server's verified jars
settings.pop("spark.jars.packages")
bundle = next(j for j in ensure_rest_jars() if j.name.startswith("iceberg-aws-bundle"))
settings["spark.jars"] = ",".join([*(str(j) for j in ensure_jars(jar_cache)), str(bundle),
                                   *filter(None, [settings.get("spark.jars")])])  # omni's extension
session = build_spark_session(config, app_name="omni-s3-tests", jar_cache_dir=jar_cache, overrides=settings)
try:
    rows = session.sql("SELECT _ai_append_name_, count(*) FROM omni.aidata.web GROUP BY 1").collect()
    print(json.dumps({"rows": [list(r) for r in rows], "settings": settings}))
finally:
    session.stop()
"""


@pytest.mark.spark
def test_spark_reads_the_view_from_the_bucket_with_omni_spark_config(s3, clean_env, tmp_path):
    """Spark, configured only by what ``omni spark-config`` emits, reads omni's view from S3 via REST."""
    from tests.conftest import _jar_cache

    for key, value in s3.environment().items():  # Spark's S3 client reads the same AWS_* environment
        clean_env.setenv(key, value)
    with _rest_over(s3, "s3://lake/spark") as rest:
        home = tmp_path / "home"
        omni = Omni(catalog=rest.uri, warehouse="s3://lake/spark", home=home)
        omni.create_table("web")
        write_docs(tmp_path / "a.jsonl", 0, 9)
        omni.submit("web", [str(tmp_path / "a.jsonl")], batch="a", progress=False)
        done = subprocess.run([sys.executable, "-c", SPARK_CHILD, rest.uri, "s3://lake/spark", str(home),
                               str(_jar_cache())], cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["rows"] == [["a", 9]]
        assert not any(s3.secret_key in v or s3.access_key in v for v in result["settings"].values())
        assert s3.secret_key not in done.stdout + done.stderr


@pytest.mark.trino
def test_trino_reads_the_view_from_the_bucket_with_omni_trino_config(s3, clean_env, tmp_path):
    """Trino's native S3 file system, configured by ``omni trino-config`` (REST + S3), reads omni's view."""
    from catalog_ext.config import OmniConfig
    from tests.services.trino import TrinoServer

    for key, value in s3.environment().items():  # Trino's S3 client reads the same AWS_* environment
        clean_env.setenv(key, value)
    with _rest_over(s3, "s3://lake/trino") as rest:
        home = tmp_path / "home"
        omni = Omni(catalog=rest.uri, warehouse="s3://lake/trino", home=home)
        omni.create_table("web")
        write_docs(tmp_path / "a.jsonl", 0, 7)
        omni.submit("web", [str(tmp_path / "a.jsonl")], batch="a", progress=False)
        write_docs(tmp_path / "b.jsonl", 7, 2)
        omni.submit("web", [str(tmp_path / "b.jsonl")], batch="b", progress=False)
        config = OmniConfig.resolve(catalog=rest.uri, warehouse="s3://lake/trino", home=home)
        with TrinoServer(config) as trino:
            props = (trino.root / "etc" / "catalog" / "omni.properties").read_text()
            assert s3.secret_key not in props and "iceberg.catalog.type=rest" in props
            rows = trino.query("SELECT _ai_append_name_, count(*) FROM omni.aidata.web GROUP BY 1 ORDER BY 1")
            assert rows == [("a", 7), ("b", 2)]
