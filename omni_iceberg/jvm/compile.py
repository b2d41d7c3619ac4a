"""Compile the project's own Java sources into a jar, with no JDK and no build tool.

The Spark session extension (:mod:`spark_udfs.extension`) and the Trino event listener
(:mod:`omni_iceberg.trino_listener`) are built the same way: ECJ (the Eclipse compiler,
one jar from Maven Central, checked against a SHA-1 lock) runs on any Java 17+ runtime,
including the one the ``trino`` extra brings in a wheel (a runtime alone has no
``javac``). A jar's name carries a digest of its sources and of what they were compiled
against (:func:`source_digest`), so an edit or an upgrade builds a new jar and an old
one is never loaded.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Iterable, Mapping

from catalog_ext.errors import ConfigError

#: seconds one compile may take
COMPILE_TIMEOUT_S = 300


#: Java sources every jar of omni's includes (:mod:`omni.common`: the listeners' event lines)
SHARED_SOURCES = Path(__file__).resolve().parent / "java"


def java_sources(roots: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(root, file) of every ``.java`` file under ``roots`` and the shared sources, in a stable order."""
    return [(root, src) for root in (*roots, SHARED_SOURCES) for src in sorted(root.rglob("*.java"))]


def source_digest(roots: Iterable[Path], against: str) -> str:
    """12 hex characters naming the sources under ``roots`` (and the shared ones) compiled
    against ``against`` (the versions of the jars on the class path)."""
    digest = hashlib.sha256(against.encode())
    for root, src in java_sources(roots):
        digest.update(src.relative_to(root).as_posix().encode() + b"\0" + src.read_bytes())
    return digest.hexdigest()[:12]


def cached_jar(cache_dir: str | os.PathLike[str] | None, default_dir: Path, name: str,
               build: Callable[[Path], Path]) -> Path:
    """The jar ``name`` in ``cache_dir`` (default ``default_dir``); ``build(target)`` makes it when
    it is missing or empty. The jar's name digests its sources, so one present is current."""
    cache = Path(cache_dir).resolve() if cache_dir is not None else default_dir
    target = cache / name
    if target.is_file() and target.stat().st_size > 0:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    default_dir.mkdir(parents=True, exist_ok=True)  # the compiler lives there, whatever ``cache_dir`` is
    return build(target)


def compile_jar(ecj: Path, roots: Iterable[Path], classpath: Iterable[Path], target: Path, *, what: str,
                services: Mapping[str, str] | None = None) -> Path:
    """Compile the sources under ``roots`` and the shared ones with ``ecj`` against ``classpath``
    into ``target``.

    ``what`` names the jar in errors ("omni's Spark extension"). ``services`` become
    ``META-INF/services/<interface>`` entries (how ``java.util.ServiceLoader`` finds an
    implementation). The jar is written beside ``target`` and renamed into place, so a
    crash never leaves a half jar under the final name. Raises
    :class:`~catalog_ext.errors.ConfigError` with the compiler's output when it fails.
    """
    from omni_iceberg.jvm.java import find_java

    java = find_java((17,), purpose=f"the Java compiler of {what}")
    roots = list(roots)
    with tempfile.TemporaryDirectory(prefix="omni-javac-") as tmp:
        classes = Path(tmp) / "classes"
        cmd = [str(java.java), "-jar", str(ecj), "-17", "-nowarn", "-encoding", "UTF-8",
               "-cp", os.pathsep.join(str(p) for p in classpath), "-d", str(classes),
               *(str(src) for _, src in java_sources(roots))]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"compiling {what} took over {COMPILE_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise ConfigError(f"{what} ({', '.join(map(str, roots))}) did not compile with {java.describe()}:\n"
                              f"{(done.stdout + done.stderr).strip()[-4000:]}")
        fd, part = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        os.close(fd)
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: omni-iceberg\n")
            for interface, implementation in (services or {}).items():
                jar.writestr(f"META-INF/services/{interface}", implementation + "\n")
            for cls in sorted(classes.rglob("*.class")):
                jar.write(cls, cls.relative_to(classes).as_posix())
        os.chmod(part, 0o644)
        os.replace(part, target)
    return target
