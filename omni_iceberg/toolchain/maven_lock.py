"""Fetch a locked set of Maven Central jars into the cache (sha1-checked), for Java test servers.

A lock is the exact ``group:artifact:version[:classifier]`` list a Maven resolution
produced once (see each server module for the command); :func:`ensure_locked_jars`
fetches the jars missing from ``$OMNI_CACHE/<name>/jars`` with
:func:`~omni_iceberg.toolchain.downloads.download_verified` (checked against the ``.sha1``
Maven Central publishes, renamed into place only when it matches). No Maven install is
needed at run time, and a second call does no network I/O.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from catalog_ext.errors import ConfigError
from omni_iceberg.toolchain.downloads import download_verified

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


@dataclass(frozen=True)
class MavenArtifact:
    """One jar on a Maven repository: ``group:artifact:version[:classifier]``."""

    group: str
    artifact: str
    version: str
    classifier: str = ""

    @classmethod
    def parse(cls, coordinates: str) -> "MavenArtifact":
        parts = coordinates.strip().split(":")
        if len(parts) not in (3, 4):
            raise ConfigError(f"bad Maven coordinates {coordinates!r}: use group:artifact:version[:classifier]")
        return cls(*parts)

    @property
    def filename(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.jar"

    def url(self, repo: str) -> str:
        return f"{repo.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.filename}"

    @property
    def coordinates(self) -> str:
        return ":".join(p for p in (self.group, self.artifact, self.version, self.classifier) if p)


def parse_lock(lock: str) -> list[MavenArtifact]:
    """One artifact per non-blank line of ``lock``."""
    return [MavenArtifact.parse(line) for line in lock.split() if line.strip()]


def cache_root() -> Path:
    """``$OMNI_CACHE`` when set, else ``./.cache``."""
    root = os.environ.get("OMNI_CACHE")
    return (Path(root) if root else Path(".cache")).resolve()


def ensure_locked_jars(name: str, lock: str, fix: str, cache_dir: str | os.PathLike[str] | None = None,
                       progress: bool | None = None) -> list[Path]:
    """Paths of every jar in ``lock`` under ``<cache>/<name>/jars``, downloading the missing ones.

    ``fix`` tells the user what to do when a download fails (it ends up in the error).
    """
    cache = (Path(cache_dir).resolve() if cache_dir is not None else cache_root() / name) / "jars"
    repo = os.environ.get("OMNI_MAVEN_REPO", MAVEN_CENTRAL)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the jar cache {cache}: {e}; set OMNI_CACHE to a writable folder") from e
    artifacts = parse_lock(lock)
    missing = [a for a in artifacts if not (cache / a.filename).is_file()]
    if missing:
        from omni_iceberg.ui.progress import progress_bar

        bar = progress_bar(progress, f"{name} jars", "jar", total=len(missing))
        for a in missing:
            download_verified(a.url(repo), cache / a.filename, f"jar {a.coordinates}", fix)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    return [cache / a.filename for a in artifacts]


def jvm_command(jars: list[Path], main: str, *args: str, heap: str = "512m", java: str | None = None) -> list[str]:
    """``java -cp JARS MAIN ARGS`` for a test server: it lives seconds to minutes on 2 shared
    cores, so a small heap, the serial collector and no C2 compiler (``OMNI_JAVA`` picks java)."""
    return [java or os.environ.get("OMNI_JAVA", "java"), f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.net.preferIPv4Stack=true", "-cp", os.pathsep.join(map(str, jars)), main, *args]
