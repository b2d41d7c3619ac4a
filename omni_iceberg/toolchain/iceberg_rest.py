"""Apache Iceberg's reference REST catalog server, run from Maven Central jars.

No REST catalog server installs from Debian or PyPI here. Iceberg publishes its own
reference server (``org.apache.iceberg.rest.RESTCatalogServer``, a JDBC catalog behind
the REST API) in the ``test-fixtures`` jar of ``iceberg-open-api``. :data:`_LOCK` is the
classpath TOOLCHAIN.md verified, resolved with ``mvn dependency:list`` on 2026-11-30:

- ``iceberg-core`` 1.10.0 with its dependencies, plus its ``tests`` jar;
- Jetty 11.0.24 (server, servlet, security, http, io, util) without their transitive
  dependencies - jetty-servlet's pom names a test artifact Maven Central does not
  serve - plus ``jetty-jakarta-servlet-api`` 5.0.2;
- ``hadoop-client-api`` / ``hadoop-client-runtime`` 3.4.1, ``sqlite-jdbc``, ``slf4j-simple``;
- ``iceberg-aws`` + ``iceberg-aws-bundle`` 1.10.0 and ``failsafe`` 3.3.2 (iceberg-aws's one
  runtime dependency outside iceberg-core's tree), so the server can keep table metadata
  in an S3-API bucket (``S3FileIO``) when the warehouse is ``s3://``.

The server is configured by environment (``CATALOG_WAREHOUSE``, ``CATALOG_URI`` - a JDBC
URL -, ``CATALOG_REST_PORT``; ``REST_PORT`` is ignored): ``CATALOG_X__Y_Z`` becomes the
catalog property ``x-y.z``. See :func:`server_environment`.

Example::

    >>> from omni_iceberg.toolchain.iceberg_rest import ensure_rest_jars, java_command
    >>> cmd = java_command(ensure_rest_jars())          # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path

from omni_iceberg.toolchain.maven_lock import ensure_locked_jars, jvm_command

ICEBERG_VERSION = "1.10.0"
SERVER_MAIN = "org.apache.iceberg.rest.RESTCatalogServer"
_NAME = f"iceberg-rest-{ICEBERG_VERSION}"
_FIX = ("run `python -m omni_iceberg.toolchain.iceberg_rest` where Maven Central is reachable, "
        f"or point OMNI_CACHE at a folder whose {_NAME}/jars holds them")

_LOCK = """
com.fasterxml.jackson.core:jackson-annotations:2.19.2
com.fasterxml.jackson.core:jackson-core:2.19.2
com.fasterxml.jackson.core:jackson-databind:2.19.2
com.github.ben-manes.caffeine:caffeine:2.9.3
com.google.errorprone:error_prone_annotations:2.10.0
commons-codec:commons-codec:1.17.0
commons-io:commons-io:2.16.1
dev.failsafe:failsafe:3.3.2
io.airlift:aircompressor:0.27
org.apache.avro:avro:1.12.0
org.apache.commons:commons-compress:1.26.2
org.apache.commons:commons-lang3:3.14.0
org.apache.hadoop:hadoop-client-api:3.4.1
org.apache.hadoop:hadoop-client-runtime:3.4.1
org.apache.httpcomponents.client5:httpclient5:5.5
org.apache.httpcomponents.core5:httpcore5-h2:5.3.4
org.apache.httpcomponents.core5:httpcore5:5.3.4
org.apache.iceberg:iceberg-api:1.10.0
org.apache.iceberg:iceberg-aws-bundle:1.10.0
org.apache.iceberg:iceberg-aws:1.10.0
org.apache.iceberg:iceberg-bundled-guava:1.10.0
org.apache.iceberg:iceberg-common:1.10.0
org.apache.iceberg:iceberg-core:1.10.0
org.apache.iceberg:iceberg-core:1.10.0:tests
org.apache.iceberg:iceberg-open-api:1.10.0:test-fixtures
org.checkerframework:checker-qual:3.19.0
org.eclipse.jetty.toolchain:jetty-jakarta-servlet-api:5.0.2
org.eclipse.jetty:jetty-http:11.0.24
org.eclipse.jetty:jetty-io:11.0.24
org.eclipse.jetty:jetty-security:11.0.24
org.eclipse.jetty:jetty-server:11.0.24
org.eclipse.jetty:jetty-servlet:11.0.24
org.eclipse.jetty:jetty-util:11.0.24
org.roaringbitmap:RoaringBitmap:1.3.0
org.slf4j:slf4j-api:2.0.17
org.slf4j:slf4j-simple:2.0.16
org.xerial:sqlite-jdbc:3.46.1.3
"""


def ensure_rest_jars(cache_dir: str | os.PathLike[str] | None = None, progress: bool | None = None) -> list[Path]:
    """Every jar of the REST server's classpath, downloading (sha1-checked) the missing ones."""
    return ensure_locked_jars(_NAME, _LOCK, _FIX, cache_dir, progress)


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


if __name__ == "__main__":  # pragma: no cover - set-up script
    jars = ensure_rest_jars(progress=True)
    print(f"Iceberg REST server jars: {len(jars)} in {jars[0].parent}")
