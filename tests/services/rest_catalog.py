"""A throwaway Iceberg REST catalog server (Apache Iceberg's reference server), for tests.

One JVM from the jars :func:`tests.toolchain.iceberg_rest.ensure_rest_jars`
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

import json
import os
import urllib.request

from tests.toolchain import iceberg_rest as toolchain
from tests.services import free_port
from tests.services.jvm import JvmServer


class RestCatalogServer(JvmServer):
    """A private Iceberg REST catalog on 127.0.0.1. See the module docstring."""

    name = "the REST catalog server"
    slug = "rest"
    poll_s = 0.3

    def __init__(self, *, warehouse: str | None = None, catalog_properties: dict[str, str] | None = None,
                 extra_env: dict[str, str] | None = None, start_timeout_s: float = 90.0) -> None:
        super().__init__(start_timeout_s=start_timeout_s)
        self._warehouse = warehouse
        self.catalog_properties = dict(catalog_properties or {})
        self.extra_env = dict(extra_env or {})
        self.port: int | None = None

    @property
    def uri(self) -> str:
        """The ``OMNI_CATALOG`` value that selects this server."""
        return f"http://{self.host}:{self.port}"

    @property
    def warehouse(self) -> str:
        assert self.workdir is not None or self._warehouse is not None
        return self._warehouse or (self.workdir / "warehouse").as_uri()  # type: ignore[operator]

    def _launch(self) -> None:
        assert self.workdir is not None
        jars = toolchain.ensure_rest_jars()
        self.port = free_port()
        env = {**os.environ, **self.extra_env, **toolchain.server_environment(
            port=self.port, warehouse=self.warehouse, jdbc_uri=f"jdbc:sqlite:{self.workdir / 'catalog.db'}",
            catalog_properties=self.catalog_properties)}
        self._spawn("server", toolchain.java_command(jars), env)

    def _probe(self, attempt: int) -> None:
        with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=5) as resp:
            json.loads(resp.read())


if __name__ == "__main__":  # pragma: no cover - manual check: start, print, stop on Enter
    with RestCatalogServer() as server:
        print(server.uri, server.warehouse)
        input("REST catalog is up; press Enter to stop ")
