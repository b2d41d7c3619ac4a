"""A throwaway S3-API server (s3proxy, filesystem backend), for tests: always stopped.

One JVM from the jars :func:`omni_iceberg.toolchain.s3proxy.ensure_s3proxy_jars` fetches,
listening on a free port of 127.0.0.1 and keeping buckets as folders of a private temp
folder. It is a real S3 endpoint (SigV4 auth, multipart uploads), not a mock; each
instance has a random access key and secret, so tests can check the secret never leaks.
Ready means: an authenticated ``ListBuckets`` through pyarrow succeeds; :meth:`create_bucket`
makes a bucket (names need at least 3 characters).

Example::

    with S3ProxyServer() as s3:
        s3.create_bucket("lake")
        props = s3.pyiceberg_properties()
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from catalog_ext.errors import ConfigError
from omni_iceberg.toolchain import s3proxy as toolchain
from tests.services import free_port


class S3ProxyServer:
    """A private S3-API server on 127.0.0.1. See the module docstring."""

    host = "127.0.0.1"
    region = "us-east-1"

    def __init__(self, *, start_timeout_s: float = 120.0) -> None:
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self.workdir: Path | None = None
        self.access_key = "omni" + secrets.token_hex(4)
        self.secret_key = "s3secret-" + secrets.token_hex(12)
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def pyiceberg_properties(self) -> dict[str, str]:
        """The ``s3.*`` FileIO properties pyiceberg needs for this server."""
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": self.access_key,
                "s3.secret-access-key": self.secret_key, "s3.region": self.region,
                "s3.force-virtual-addressing": "false"}

    def environment(self) -> dict[str, str]:
        """The same settings the usual AWS way (environment), plus the checksum settings s3proxy needs."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_ENDPOINT_URL": self.endpoint, **toolchain.CLIENT_ENVIRONMENT}

    def filesystem(self):
        import pyarrow.fs

        return pyarrow.fs.S3FileSystem(access_key=self.access_key, secret_key=self.secret_key, region=self.region,
                                       endpoint_override=self.endpoint, scheme="http", allow_bucket_creation=True,
                                       connect_timeout=5, request_timeout=10)

    def create_bucket(self, name: str) -> None:
        self.filesystem().create_dir(name)

    def start(self) -> None:
        if shutil.which(os.environ.get("OMNI_JAVA", "java")) is None:
            raise ConfigError("java not found; s3proxy needs a JDK 17+ (apt-get install -y openjdk-17-jre-headless)")
        # pyarrow's AWS SDK reads these at first use in this process: set them before any S3 call
        for key, value in toolchain.CLIENT_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
        jars = toolchain.ensure_s3proxy_jars()
        self.workdir = Path(tempfile.mkdtemp(prefix="omni-s3proxy-"))
        self.port = free_port()
        props = toolchain.write_properties(self.workdir / "s3proxy.properties", host=self.host, port=self.port,
                                           basedir=self.workdir / "blobs", identity=self.access_key,
                                           credential=self.secret_key)
        atexit.register(self.stop)
        log = open(self.workdir / "server.log", "wb")
        self._proc = subprocess.Popen(toolchain.java_command(jars, props), stdout=log, stderr=subprocess.STDOUT,
                                      cwd=self.workdir, start_new_session=True)
        self._wait_ready()

    def _log_tail(self) -> str:
        assert self.workdir is not None
        return (self.workdir / "server.log").read_text(errors="replace")[-3000:]

    def _wait_ready(self) -> None:
        import pyarrow.fs

        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self._log_tail()
                self.stop()
                raise ConfigError(f"s3proxy exited with code {self._proc.returncode}:\n{tail}")
            try:
                self.filesystem().get_file_info(pyarrow.fs.FileSelector("", recursive=False))
                return
            except Exception as e:  # noqa: BLE001 - not up yet
                last = e
                time.sleep(0.5)
        tail = self._log_tail()
        self.stop()
        raise ConfigError(f"s3proxy did not answer within {self.start_timeout_s:.0f}s ({last}):\n{tail}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


if __name__ == "__main__":  # pragma: no cover - manual check: start, print, stop on Enter
    with S3ProxyServer() as server:
        server.create_bucket("lake")
        # a throwaway server's random key, shown only to whoever started it by hand
        print("".join(f"export {k}={v}\n" for k, v in server.environment().items()), end="")
        input("s3proxy is up with bucket 'lake'; press Enter to stop ")
