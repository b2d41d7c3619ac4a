"""A throwaway S3-API server (s3proxy, filesystem backend), for tests: always stopped.

One JVM from the jars :func:`tests.toolchain.s3proxy.ensure_s3proxy_jars` fetches,
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

import os
import secrets

from tests.toolchain import s3proxy as toolchain
from tests.services import free_port
from tests.services.jvm import JvmServer

#: the environment that would point boto/pyiceberg at another S3 than the test server's
#: (tests clear them, so only the catalog's own properties reach the server)
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
            "AWS_DEFAULT_REGION", "AWS_PROFILE", "PYICEBERG_HOME")


class S3ProxyServer(JvmServer):
    """A private S3-API server on 127.0.0.1. See the module docstring."""

    name = "s3proxy"
    slug = "s3proxy"
    region = "us-east-1"

    def __init__(self, *, start_timeout_s: float = 120.0) -> None:
        super().__init__(start_timeout_s=start_timeout_s)
        self.port: int | None = None
        self.access_key = "omni" + secrets.token_hex(4)
        self.secret_key = "s3secret-" + secrets.token_hex(12)

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

    def _launch(self) -> None:
        assert self.workdir is not None
        # pyarrow's AWS SDK reads these at first use in this process: set them before any S3 call
        for key, value in toolchain.CLIENT_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
        jars = toolchain.ensure_s3proxy_jars()
        self.port = free_port()
        props = toolchain.write_properties(self.workdir / "s3proxy.properties", host=self.host, port=self.port,
                                           basedir=self.workdir / "blobs", identity=self.access_key,
                                           credential=self.secret_key)
        self._spawn("server", toolchain.java_command(jars, props))

    def _probe(self, attempt: int) -> None:
        import pyarrow.fs

        self.filesystem().get_file_info(pyarrow.fs.FileSelector("", recursive=False))


if __name__ == "__main__":  # pragma: no cover - manual check: start, print, stop on Enter
    with S3ProxyServer() as server:
        server.create_bucket("lake")
        # a throwaway server's random key, shown only to whoever started it by hand
        print("".join(f"export {k}={v}\n" for k, v in server.environment().items()), end="")
        input("s3proxy is up with bucket 'lake'; press Enter to stop ")
