"""Apache Iceberg's reference REST catalog server, run from Maven Central jars.

No REST catalog server installs from Debian or PyPI here. Iceberg publishes its own
reference server (``org.apache.iceberg.rest.RESTCatalogServer``, a JDBC catalog behind
the REST API) in the ``test-fixtures`` jar of ``iceberg-open-api``. ``iceberg_rest.lock.toml``
beside this module pins its classpath and each jar's SHA-1 (its comments say what is in it
and why).

The server is configured by environment (``CATALOG_WAREHOUSE``, ``CATALOG_URI`` - a JDBC
URL -, ``CATALOG_REST_PORT``; ``REST_PORT`` is ignored): ``CATALOG_X__Y_Z`` becomes the
catalog property ``x-y.z``. See :func:`server_environment`.

Example::

    >>> from tests.toolchain.iceberg_rest import ensure_rest_jars, java_command
    >>> cmd = java_command(ensure_rest_jars())          # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path

from omni_iceberg.jvm.maven_lock import ensure_locked_jars, read_lock
from tests.toolchain import HERE, jvm_command

ICEBERG_VERSION = "1.10.0"
SERVER_MAIN = "org.apache.iceberg.rest.RESTCatalogServer"
LOCK = HERE / "iceberg_rest.lock.toml"
_NAME = f"iceberg-rest-{ICEBERG_VERSION}"
_FIX = ("run `python -m tests.toolchain.iceberg_rest` where Maven Central is reachable, "
        f"or point OMNI_CACHE at a folder whose {_NAME}/jars holds them")


def ensure_rest_jars(cache_dir: str | os.PathLike[str] | None = None, progress: bool | None = None) -> list[Path]:
    """Every jar of the REST server's classpath, downloading (SHA-1-checked) the missing ones."""
    return ensure_locked_jars(_NAME, read_lock(LOCK), _FIX, cache_dir, progress)


def server_environment(*, port: int, warehouse: str, jdbc_uri: str,
                       catalog_properties: dict[str, str] | None = None) -> dict[str, str]:
    """The ``CATALOG_*`` variables that configure the server (property ``a-b.c`` -> ``CATALOG_A__B_C``)."""
    env = {"CATALOG_REST_PORT": str(port), "CATALOG_WAREHOUSE": warehouse, "CATALOG_URI": jdbc_uri,
           # views need the V1 schema of Iceberg's JDBC catalog (it adds iceberg_type)
           "CATALOG_JDBC_SCHEMA__VERSION": "V1"}
    for key, value in (catalog_properties or {}).items():
        env["CATALOG_" + key.upper().replace("-", "__").replace(".", "_")] = value
    return env


def java_command(jars: list[Path], java: str | None = None) -> list[str]:
    """The command line that runs the server with ``jars`` on its classpath."""
    return jvm_command(jars, SERVER_MAIN, java=java)


if __name__ == "__main__":  # pragma: no cover - set-up script (`make rest`)
    jars = ensure_rest_jars(progress=True)
    print(f"Iceberg REST server jars: {len(jars)} in {jars[0].parent}")
