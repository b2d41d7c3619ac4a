"""Fetch a file from Maven Central (or a mirror) into a cache, checked against its SHA-1.

The expected SHA-1 is the one a lock file pins (see :mod:`omni_iceberg.jvm.maven_lock`),
else the ``.sha1`` the repository publishes beside the file. The download goes to a
temporary file in the cache folder and is renamed into place only after its SHA-1
matches, so a killed download never leaves a file that looks complete.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from catalog_ext.errors import ConfigError

CHUNK = 1 << 20
TIMEOUT_S = 120


def fetch_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
        return resp.read().decode("ascii", errors="replace")


def sha1_of(path: Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download_verified(url: str, target: Path, what: str, fix: str, sha1: str | None = None) -> Path:
    """``target``, downloaded from ``url`` and checked against ``sha1`` (else ``url + '.sha1'``).

    ``what`` names the artifact and ``fix`` says what the user can do, in errors.
    """
    cache = target.parent
    try:
        expected = (sha1 or fetch_text(url + ".sha1").split()[0]).strip().lower()
        if target.is_file() and sha1_of(target) == expected:
            return target  # left complete by an earlier run
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=cache)
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha1()
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
                while chunk := resp.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; the cache may be shared
            if digest.hexdigest() != expected:
                raise ConfigError(f"{what} from {url} has sha1 {digest.hexdigest()}, expected {expected}; "
                                  f"delete {cache} and {fix}")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    except (urllib.error.URLError, OSError, IndexError) as e:
        raise ConfigError(f"{what} is missing from {cache} and could not be fetched from {url} ({e}); {fix}") from e
    return target
