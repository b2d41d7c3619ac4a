"""``omni export --out s3://...``: an export to an S3-API bucket (s3proxy, a real S3 server) holds the
bytes a folder export holds, its manifest replays from the bucket, and a non-empty prefix is refused.

Written through the catalog's FileIO, with the credentials the warehouse uses (here: the
AWS environment). The Spark engine writes through the same destination code (its cluster
test, tests/test_spark_export.py, writes to a folder).
"""

from __future__ import annotations

import json

import pytest

from omni_iceberg.api import Omni
from omni_iceberg.explore.export import MANIFEST, ExportError
from tests.faults import write_docs
from tests.services.s3proxy import AWS_VARS, S3ProxyServer

pytestmark = [pytest.mark.rest, pytest.mark.slow]


@pytest.fixture(scope="module")
def s3():
    with S3ProxyServer() as server:
        server.create_bucket("lake")
        yield server


def test_an_s3_export_holds_the_folder_exports_bytes_and_replays_from_the_bucket(s3, monkeypatch, tmp_path):
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path / "no-yaml"))
    for key, value in s3.environment().items():
        monkeypatch.setenv(key, value)
    omni = Omni(home=tmp_path / "home", warehouse="s3://lake/wh")
    omni.create_table("web")
    for k, batch in enumerate(["a", "b"]):
        write_docs(tmp_path / f"{batch}.jsonl", 30 * k, 30)
        omni.submit("web", [str(tmp_path / f"{batch}.jsonl")], batch=batch, progress=False)
    cols, where = ["_ai_unique_id_", "RawData.raw_data"], "RawData.raw_data LIKE '%1%'"
    folder = omni.export("web", str(tmp_path / "folder"), columns=cols, where=where, progress=False).manifest
    on_s3 = omni.export("web", "s3://lake/exports/one/", columns=cols, where=where, progress=False)
    assert on_s3.out_dir == "s3://lake/exports/one"
    assert [(f["file"], f["sha256"]) for f in on_s3.manifest["files"]] == \
        [(f["file"], f["sha256"]) for f in folder["files"]] and folder["rows"] > 0
    fs = s3.filesystem()
    for f in folder["files"]:
        with fs.open_input_stream(f"lake/exports/one/{f['file']}") as got:
            assert got.read() == (tmp_path / "folder" / f["file"]).read_bytes()
    with fs.open_input_stream(f"lake/exports/one/{MANIFEST}") as got:
        assert json.loads(got.read())["rows"] == folder["rows"]
    again = omni.export_from_manifest("s3://lake/exports/one", "s3://lake/exports/two", progress=False)
    assert [f["sha256"] for f in again.manifest["files"]] == [f["sha256"] for f in folder["files"]]
    with pytest.raises(ExportError, match="s3://lake/exports/one is not empty"):
        omni.export("web", "s3://lake/exports/one", columns=cols, progress=False)
    # a bad --where fails before anything is written to the bucket
    with pytest.raises(ExportError):
        omni.export("web", "s3://lake/exports/bad", where="count(*) > 1", progress=False)
    from pyarrow.fs import FileSelector

    assert fs.get_file_info(FileSelector("lake/exports/bad", allow_not_found=True)) == []
