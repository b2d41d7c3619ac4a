"""s3proxy: a real S3-API server from Maven Central, on the local filesystem.

No MinIO installs here and moto's server is a mock, so the S3 warehouse tests use
``org.gaul:s3proxy`` 2.4.1 with its jclouds ``filesystem`` backend: buckets are folders,
objects are files, and the wire protocol is real S3 (SigV2/SigV4 auth, multipart
uploads). ``s3proxy.lock.toml`` beside this module pins its dependency tree and each
jar's SHA-1 (its comments say how it was resolved).

It runs as ``java -cp JARS org.gaul.s3proxy.Main --properties FILE`` where
FILE sets the endpoint, ``aws-v2-or-v4`` authorization, an identity/credential pair and
``jclouds.provider=filesystem`` with its ``basedir`` (:func:`write_properties`). Current
AWS SDKs (pyarrow's included) must send checksums only when required
(``AWS_REQUEST_CHECKSUM_CALCULATION=WHEN_REQUIRED``, ``AWS_RESPONSE_CHECKSUM_VALIDATION=
WHEN_REQUIRED``), or uploads fail with ``XAmzContentSHA256Mismatch``; see
:data:`CLIENT_ENVIRONMENT`.
"""

from __future__ import annotations

import os
from pathlib import Path

from omni_iceberg.jvm.maven_lock import ensure_locked_jars, read_lock
from tests.toolchain import HERE, jvm_command

S3PROXY_VERSION = "2.4.1"
MAIN = "org.gaul.s3proxy.Main"
LOCK = HERE / "s3proxy.lock.toml"
_NAME = f"s3proxy-{S3PROXY_VERSION}"
_FIX = ("run `python -m tests.toolchain.s3proxy` where Maven Central is reachable, "
        f"or point OMNI_CACHE at a folder whose {_NAME}/jars holds them")

#: What an AWS-SDK client (pyarrow's S3FileSystem) needs in its environment for s3proxy.
CLIENT_ENVIRONMENT = {"AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
                      "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED"}


def ensure_s3proxy_jars(cache_dir: str | os.PathLike[str] | None = None, progress: bool | None = None) -> list[Path]:
    """Every jar of s3proxy's classpath, downloading (SHA-1-checked) the missing ones."""
    return ensure_locked_jars(_NAME, read_lock(LOCK), _FIX, cache_dir, progress)


def write_properties(path: str | os.PathLike[str], *, host: str, port: int, basedir: str | os.PathLike[str],
                     identity: str, credential: str) -> Path:
    """Write s3proxy's properties file (it holds the credential: the caller keeps it private)."""
    out = Path(path)
    Path(basedir).mkdir(parents=True, exist_ok=True)
    props = {
        "s3proxy.endpoint": f"http://{host}:{port}",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": identity,
        "s3proxy.credential": credential,
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(Path(basedir).resolve()),
    }
    out.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    os.chmod(out, 0o600)
    return out


def java_command(jars: list[Path], properties_file: str | os.PathLike[str], java: str | None = None) -> list[str]:
    """The command line that runs s3proxy with ``jars`` and ``properties_file``."""
    return jvm_command(jars, MAIN, "--properties", str(properties_file), heap="384m", java=java)


if __name__ == "__main__":  # pragma: no cover - set-up script (`make rest`)
    jars = ensure_s3proxy_jars(progress=True)
    print(f"s3proxy jars: {len(jars)} in {jars[0].parent}")
