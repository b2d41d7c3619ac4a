"""A throwaway Iceberg REST catalog server (Apache Iceberg's reference server), for tests.

One JVM from the jars :func:`omni_iceberg.toolchain.iceberg_rest.ensure_rest_jars`
fetches: ``RESTCatalogServer`` is Iceberg's JDBC catalog behind the REST API (views and
the multi-table commit endpoint included), here on a private SQLite file and a private
warehouse folder (or an ``s3://`` bucket, with ``catalog_properties`` naming its
``S3FileIO`` settings). Ready means: ``GET /v1/config`` answers. Start-up ~1-3 s.

The server binds every interface (it has no bind-address setting); the tests only ever
talk to it on 127.0.0.1, on a free port.

Example::

    with RestCatalogServer() as rest:
        omni = Omni(catalog=rest.uri, warehouse=rest.warehouse)
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Self

from catalog_ext.errors import ConfigError
from omni_iceberg.toolchain import iceberg_rest as toolchain
from tests.services import free_port


class RestCatalogServer:
    """A private Iceberg REST catalog on 127.0.0.1. See the module docstring."""

    host = "127.0.0.1"

    def __init__(self, *, warehouse: str | None = None, catalog_properties: dict[str, str] | None = None,
                 extra_env: dict[str, str] | None = None, start_timeout_s: float = 90.0) -> None:
        self.start_timeout_s = start_timeout_s
        self._warehouse = warehouse
        self.catalog_properties = dict(catalog_properties or {})
        self.extra_env = dict(extra_env or {})
        self.port: int | None = None
        self.workdir: Path | None = None
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def uri(self) -> str:
        """The ``OMNI_CATALOG`` value that selects this server."""
        return f"http://{self.host}:{self.port}"

    @property
    def warehouse(self) -> str:
        assert self.workdir is not None or self._warehouse is not None
        return self._warehouse or (self.workdir / "warehouse").as_uri()  # type: ignore[operator]

    def start(self) -> None:
        if shutil.which(os.environ.get("OMNI_JAVA", "java")) is None:
            raise ConfigError("java not found; the REST catalog server needs a JDK 17+ "
                              "(apt-get install -y openjdk-17-jre-headless)")
        jars = toolchain.ensure_rest_jars()
        self.workdir = Path(tempfile.mkdtemp(prefix="omni-rest-"))
        self.port = free_port()
        env = {**os.environ, **self.extra_env, **toolchain.server_environment(
            port=self.port, warehouse=self.warehouse, jdbc_uri=f"jdbc:sqlite:{self.workdir / 'catalog.db'}",
            catalog_properties=self.catalog_properties)}
        atexit.register(self.stop)
        log = open(self.workdir / "server.log", "wb")
        self._proc = subprocess.Popen(toolchain.java_command(jars), stdout=log, stderr=subprocess.STDOUT,
                                      cwd=self.workdir, env=env, start_new_session=True)
        self._wait_ready()

    def _log_tail(self) -> str:
        assert self.workdir is not None
        return (self.workdir / "server.log").read_text(errors="replace")[-3000:]

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self._log_tail()
                self.stop()
                raise ConfigError(f"the REST catalog server exited with code {self._proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=5) as resp:
                    json.loads(resp.read())
                return
            except Exception as e:  # noqa: BLE001 - not up yet
                last = e
                time.sleep(0.3)
        tail = self._log_tail()
        self.stop()
        raise ConfigError(f"the REST catalog server did not answer within {self.start_timeout_s:.0f}s ({last}):\n{tail}")

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
    with RestCatalogServer() as server:
        print(server.uri, server.warehouse)
        input("REST catalog is up; press Enter to stop ")
