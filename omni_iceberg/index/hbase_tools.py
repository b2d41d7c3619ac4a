"""HBase's own Java tools, run from omni: the locked HBase jars and ``RegionSplitter``.

Thrift 1 (what ``happybase`` speaks) cannot pass split keys to ``createTable``, so the
id index creates a new entries table pre-split by running HBase's ``RegionSplitter``
locally (:func:`presplit_table`, used when ``OMNI_HBASE_CONF`` names the cluster's conf
folder; see :mod:`omni_iceberg.index.select`). No HBase installs from Debian or PyPI,
so its jars come from Maven Central: ``hbase.lock.toml`` beside this module pins the
``hbase-thrift`` artifact's dependency tree and each jar's SHA-1 (its comments say how
it was resolved and which jars are left out, and why). :func:`ensure_hbase_jars` fetches
the missing ones into ``$OMNI_CACHE/hbase-<version>/jars``; no Maven install is needed,
and a second call does no network I/O. The tests' standalone HBase server runs from the
same jars (``tests/toolchain/hbase.py``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from catalog_ext import settings
from catalog_ext.errors import ConfigError
from omni_iceberg.jvm.maven_lock import ensure_locked_jars, read_lock

#: the lock of HBase's jars (package data)
LOCK = Path(__file__).resolve().parent / "hbase.lock.toml"
HBASE_VERSION = "2.6.1"
_FIX = ("run where Maven Central is reachable (the jars are fetched on first use), set OMNI_MAVEN_REPO to a "
        f"mirror, or point OMNI_CACHE at a folder whose hbase-{HBASE_VERSION}/jars holds them")

REGION_SPLITTER_MAIN = "org.apache.hadoop.hbase.util.RegionSplitter"

#: JVM flags for HBase's JVMs: a small heap, the serial collector and C1 only, since start-up
#: dominates a short-lived JVM's life; the --add-opens let HBase 2.6 reach JDK internals on 17+.
JVM_FLAGS: tuple[str, ...] = (
    "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
    "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED", "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true",
)


def ensure_hbase_jars(cache_dir: str | os.PathLike[str] | None = None, progress: bool | None = None) -> list[Path]:
    """Paths of every jar in :data:`LOCK` under ``$OMNI_CACHE/hbase-<version>/jars``, downloading
    (and SHA-1-checking) the missing ones."""
    return ensure_locked_jars(f"hbase-{HBASE_VERSION}", read_lock(LOCK), _FIX, cache_dir, progress)


def classpath(conf_dir: str | os.PathLike[str], jars: list[Path]) -> str:
    """The conf folder first (HBase reads ``hbase-site.xml`` from the classpath), then the jars."""
    return os.pathsep.join([str(Path(conf_dir).resolve())] + [str(j) for j in jars])


def java_command(conf_dir: str | os.PathLike[str], jars: list[Path], main: str, *args: str,
                 java: str | None = None) -> list[str]:
    """The command line that runs ``main`` with the HBase classpath (``OMNI_JAVA`` picks the java)."""
    java = java or settings.value("OMNI_JAVA") or "java"
    return [java, *JVM_FLAGS, "-cp", classpath(conf_dir, jars), main, *args]


def presplit_table(conf_dir: str | os.PathLike[str], jars: list[Path], table: str, family: str, regions: int,
                   *, timeout_s: float = 180.0) -> None:
    """Create ``table`` with ``regions`` regions splitting the raw key space evenly.

    Runs HBase's own ``RegionSplitter`` with ``UniformSplit`` (even splits of the byte
    space, right for keys that start with 16 raw md5/uuid bytes) against the cluster
    whose ``hbase-site.xml`` is in ``conf_dir``.
    """
    cmd = java_command(conf_dir, jars, REGION_SPLITTER_MAIN, table, "UniformSplit", "-c", str(regions), "-f", family)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise ConfigError(f"creating pre-split HBase table {table} took over {timeout_s:.0f}s; is HBase up?") from e
    if done.returncode != 0:
        raise ConfigError(f"creating pre-split HBase table {table} failed (exit {done.returncode}): "
                          f"{done.stderr.strip()[-800:]}")
