"""Fetch a locked set of Maven jars into the cache, each checked against the SHA-1 its lock pins.

A lock is a TOML file holding the exact artifacts a Maven resolution produced once (the
file's comments say which command), one ``"coordinates" = "sha1"`` line per artifact in
a table (``[jars]`` unless the reader names another)::

    [jars]
    "org.apache.hbase:hbase-client:2.6.1" = "0fe1f6..."
    "io.netty:netty-transport-native-epoll:4.1.100.Final:linux-x86_64" = "b1e2..."
    "io.trino:trino-server-core:476@tar.gz" = "6bae..."

Coordinates are ``group:artifact:version[:classifier][@extension]`` (the extension is
``jar`` unless named). :func:`ensure_locked_jars` fetches the jars missing from
``$OMNI_CACHE/<name>/jars`` with :func:`~omni_iceberg.jvm.downloads.download_verified`
(renamed into place only when the SHA-1 matches). No Maven install is needed, and a
second call does no network I/O.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from catalog_ext import settings
from catalog_ext.errors import ConfigError
from omni_iceberg.jvm.downloads import download_verified


@dataclass(frozen=True)
class MavenArtifact:
    """One file on a Maven repository: ``group:artifact:version[:classifier][@extension]``."""

    group: str
    artifact: str
    version: str
    classifier: str = ""
    extension: str = "jar"
    #: the SHA-1 the lock pins; empty: the repository's published ``.sha1`` is trusted
    sha1: str = ""

    @classmethod
    def parse(cls, coordinates: str, sha1: str = "") -> "MavenArtifact":
        text, at, extension = coordinates.strip().partition("@")
        parts = text.split(":")
        if len(parts) not in (3, 4) or not all(parts) or (at and not extension):
            raise ConfigError(f"bad Maven coordinates {coordinates!r}: use group:artifact:version[:classifier][@ext]")
        return cls(*parts, **({"extension": extension} if extension else {}), sha1=sha1.strip().lower())

    @property
    def filename(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.{self.extension}"

    def url(self, repo: str) -> str:
        return f"{repo.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.filename}"

    @property
    def coordinates(self) -> str:
        text = ":".join(p for p in (self.group, self.artifact, self.version, self.classifier) if p)
        return text if self.extension == "jar" else f"{text}@{self.extension}"

    def fetch(self, target: Path, fix: str, repo: str | None = None) -> Path:
        """``target``, downloaded from ``repo`` (default :func:`maven_repo`) unless already there.

        A file already at ``target`` is trusted: it was verified before the rename that
        put it there.
        """
        if target.is_file() and target.stat().st_size > 0:
            return target
        return download_verified(self.url(repo or maven_repo()), target, f"{self.extension} {self.coordinates}", fix,
                                 sha1=self.sha1 or None)


def read_lock(path: str | os.PathLike[str], table: str = "jars") -> list[MavenArtifact]:
    """The artifacts of ``table`` in the lock file ``path``, in file order."""
    try:
        with open(path, "rb") as f:
            entries = tomllib.load(f).get(table)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read the Maven lock {path}: {e}; reinstall omni-iceberg") from e
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"the Maven lock {path} has no [{table}] table of \"coordinates\" = \"sha1\" lines")
    return [MavenArtifact.parse(coordinates, str(sha1)) for coordinates, sha1 in entries.items()]


def maven_repo() -> str:
    """The Maven repository artifacts come from (``OMNI_MAVEN_REPO``, a mirror, or Maven Central)."""
    return settings.value("OMNI_MAVEN_REPO") or settings.SETTINGS["OMNI_MAVEN_REPO"].default


def cache_root() -> Path:
    """``$OMNI_CACHE`` (default ``./.cache``), absolute."""
    return Path(settings.value("OMNI_CACHE") or ".cache").resolve()


def ensure_locked_jars(name: str, lock: list[MavenArtifact], fix: str, cache_dir: str | os.PathLike[str] | None = None,
                       progress: bool | None = None) -> list[Path]:
    """Paths of every artifact in ``lock`` under ``<cache>/<name>/jars``, downloading the missing ones.

    ``fix`` tells the user what to do when a download fails (it ends up in the error).
    """
    cache = (Path(cache_dir).resolve() if cache_dir is not None else cache_root() / name) / "jars"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the jar cache {cache}: {e}; set OMNI_CACHE to a writable folder") from e
    missing = [a for a in lock if not (cache / a.filename).is_file()]
    if missing:
        from omni_iceberg.ui.progress import progress_bar

        repo = maven_repo()
        bar = progress_bar(progress, f"{name} jars", "jar", total=len(missing))
        for a in missing:
            a.fetch(cache / a.filename, fix, repo)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    return [cache / a.filename for a in lock]
