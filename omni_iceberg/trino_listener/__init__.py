"""omni's Trino event listener: Java sources in ``java/``, compiled here into a plugin jar.

Trino queries on omni's logical views feed the query log (``omni_sys.query_log``) like
``omni sql`` and Spark SQL do. Trino's convention for "tell something outside about every
query" is an event listener (its ``EventListener`` SPI); of its choices this one fits best:

- a small listener plugin (this one): ``QueryCompletedEvent`` names the view the statement
  read and the view columns it referenced (Trino's ``TableInfo``), the physical tables it
  scanned, its rows and wall time. It appends one JSON line per table to the query-log
  spool's events file (:attr:`catalog_ext.log_spool.LogSpool.events_path`), a local file
  append on Trino's event thread, off the query's path, bounded and never failing a query;
- Trino's bundled HTTP listener would need an HTTP server beside Trino, up whenever Trino
  is, and posts the whole event (the plan, the statistics) as JSON; the OpenLineage one
  reports datasets, not a view's columns;
- its system tables (``system.runtime.queries``) keep a bounded, in-memory window of recent
  queries' text only, lost on restart and without the columns read.

Built like the Spark extension (:mod:`spark_udfs.extension`): ECJ (Maven Central, SHA-1
pinned in ``jars.lock.toml``) compiles the sources against the locked ``trino-spi`` jar on
any Java 17+, no JDK needed; the jar's name carries a digest of the sources and the SPI
version. :func:`install_plugin` puts it in a Trino's ``plugin/omni-query-log/`` and
:func:`write_listener_config` writes ``etc/event-listener.properties`` for a catalog.

    python -m omni_iceberg.trino_listener PLUGIN_DIR   # build it and install it there
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from catalog_ext.config import OmniConfig
from omni_iceberg.jvm.compile import cached_jar, compile_jar, source_digest
from omni_iceberg.jvm.maven_lock import cache_root, maven_repo, read_lock

LOCK = Path(__file__).resolve().parent / "jars.lock.toml"
SPI, = read_lock(LOCK)
ECJ, = read_lock(LOCK, "compiler")
SOURCES = Path(__file__).resolve().parent / "java"
#: the listener's name in ``event-listener.properties`` and its plugin folder's name
NAME = "omni-query-log"
PLUGIN_CLASS = "omni.trino.OmniQueryLogPlugin"
#: unflushed events past this many bytes are dropped (and counted) instead of appended
MAX_EVENT_BYTES = 64 << 20
_FIX = "run `python -m omni_iceberg.trino_listener` where Maven Central is reachable"


def jar_name() -> str:
    """``omni-trino-listener-<digest>.jar``: the digest of the sources and the SPI version."""
    return f"omni-trino-listener-{source_digest([SOURCES], SPI.coordinates)}.jar"


def default_cache_dir() -> Path:
    """``$OMNI_CACHE/jars``, beside the Spark engine's jars (ECJ is shared)."""
    return cache_root() / "jars"


def ensure_listener_jar(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The listener jar in ``cache_dir``, compiled if missing.

    Raises :class:`~catalog_ext.errors.ConfigError` naming what failed (no Java, a jar not
    downloadable, a compile error with the compiler's output).
    """
    def build(target: Path) -> Path:
        tools, repo = default_cache_dir(), maven_repo()
        ecj = ECJ.fetch(tools / ECJ.filename, _FIX, repo)
        spi = SPI.fetch(tools / SPI.filename, _FIX, repo)
        # how Trino's plugin loader finds the plugin class (java.util.ServiceLoader)
        return compile_jar(ecj, [SOURCES], [spi], target, what="omni's Trino event listener",
                           services={"io.trino.spi.Plugin": PLUGIN_CLASS})

    return cached_jar(cache_dir, default_cache_dir(), jar_name(), build)


def install_plugin(plugin_dir: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Put the listener jar in ``<plugin_dir>/omni-query-log/`` (replacing an older build); returns that folder."""
    jar = ensure_listener_jar(cache_dir)
    folder = Path(plugin_dir) / NAME
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("omni-trino-listener-*.jar"):
        if old.name != jar.name:
            old.unlink()
    if not (folder / jar.name).is_file():
        fd, part = tempfile.mkstemp(prefix=f".{jar.name}.", suffix=".part", dir=folder)
        os.close(fd)
        shutil.copyfile(jar, part)
        os.replace(part, folder / jar.name)
    return folder


def events_file(config: OmniConfig) -> Path:
    """The query-log spool's events file of ``config``'s catalog (its folder created)."""
    from catalog_ext import system_tables
    from catalog_ext.log_spool import spool_for

    spool = spool_for(config, system_tables.QUERY_LOG)
    spool.dir.mkdir(parents=True, exist_ok=True)
    return spool.events_path


def listener_properties(config: OmniConfig, catalogs: list[str] | None = None) -> str:
    """``etc/event-listener.properties`` recording queries on ``catalogs`` (default: ``config``'s catalog name)."""
    names = ",".join(catalogs or [config.catalog_name])
    return (f"event-listener.name={NAME}\n"
            f"omni.events-file={events_file(config)}\n"
            f"omni.catalogs={names}\n"
            f"omni.max-bytes={MAX_EVENT_BYTES}\n")


def write_listener_config(config: OmniConfig, etc_dir: str | os.PathLike[str], catalogs: list[str] | None = None) -> Path:
    """Write ``<etc_dir>/event-listener.properties`` (see :func:`listener_properties`); returns the file."""
    target = Path(etc_dir) / "event-listener.properties"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(listener_properties(config, catalogs), encoding="utf-8")
    return target


if __name__ == "__main__":  # pragma: no cover - set-up scripts
    import sys

    print(install_plugin(sys.argv[1]) if len(sys.argv) > 1 else ensure_listener_jar())
