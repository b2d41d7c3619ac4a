"""Pick the index backend from configuration.

``OMNI_INDEX``, the ``spec`` argument of the Python API, or ``.pyiceberg.yaml``::

    omni:
      index: hbase://hbase-thrift.example:9090
      index-timeout-ms: 3000

Values:

* ``lmdb`` (default): embedded LMDB under ``$OMNI_HOME/index/<namespace>.<name>``;
* ``lmdb:///some/folder``: embedded LMDB under that folder instead;
* ``hbase://host:port``: a real HBase through its Thrift 1 server;
* ``off``: writers do not maintain the index (ingest dedup and lookups then scan the
  tables); for comparisons, or tables never looked up by id. Lookups read the LMDB
  default, which then lags and says so.

``OMNI_INDEX_TIMEOUT_MS`` (default 5000) bounds every HBase connect and call.
``OMNI_HBASE_CONF``, a folder holding the cluster's ``hbase-site.xml``, lets a new
entries table be created pre-split (HBase's RegionSplitter runs locally with the jars
from :mod:`omni_iceberg.index.hbase_tools`); without it the table starts as one region.
Opened indexes are kept per (backend, table) for the life of the process: they hold
caches of immutable records and, for HBase, a connection.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

from catalog_ext import settings
from catalog_ext.config import OmniConfig
from catalog_ext.errors import ConfigError
from omni_iceberg.index.core import IdIndex

#: opened indexes, least recently used first; beyond MAX_OPEN the oldest is closed (an LMDB
#: environment holds file descriptors and address space; a process touching many tables -
#: a service, the test suite - would otherwise keep every one it ever opened)
_OPEN: "OrderedDict[tuple[str, str], IdIndex]" = OrderedDict()
MAX_OPEN = 64
_LOCK = threading.Lock()


def index_spec(spec: str | None = None) -> str:
    """Argument, else the ``OMNI_INDEX`` setting (environment, ``omni.index`` in ``.pyiceberg.yaml``), else lmdb."""
    return (spec or settings.value("OMNI_INDEX")).strip()


def index_timeout_ms(timeout_ms: int | None = None) -> int:
    """Argument, else the ``OMNI_INDEX_TIMEOUT_MS`` setting (default 5000)."""
    value = int(timeout_ms) if timeout_ms is not None else settings.value("OMNI_INDEX_TIMEOUT_MS")
    if value <= 0:
        raise ConfigError(f"index timeout must be positive, got {value} ms")
    return value


def indexing_enabled(spec: str | None = None) -> bool:
    """False when the configured index is ``off`` (see the module docstring)."""
    return index_spec(spec).lower() not in ("off", "none")


def open_index(config: OmniConfig, logical_identifier: str, spec: str | None = None, *,
               timeout_ms: int | None = None, presplit: Callable[[str, str, int], None] | None = None) -> IdIndex:
    """The index of ``logical_identifier`` (``namespace.name``) on the configured backend."""
    spec = index_spec(spec)
    parsed = urlparse(spec if "://" in spec else f"{spec}://")  # bare "lmdb" names no folder
    scheme = parsed.scheme
    if scheme in ("off", "none"):
        scheme, parsed = "lmdb", urlparse("lmdb://")
    if scheme == "lmdb":
        folder = Path(parsed.path) if parsed.path else Path(config.home) / "index"
        cache_key = (f"lmdb:{folder.resolve()}", logical_identifier)
        factory: Callable[[], Any] = lambda: _lmdb(folder / logical_identifier)  # noqa: E731
    elif scheme == "hbase":
        if not parsed.hostname or not parsed.port:
            raise ConfigError(f"OMNI_INDEX={spec!r}: an HBase index is hbase://HOST:PORT (its Thrift server)")
        timeout = index_timeout_ms(timeout_ms)
        presplit = presplit or _presplit_from_env()
        cache_key = (f"hbase:{parsed.hostname}:{parsed.port}", logical_identifier)
        factory = lambda: _hbase(parsed.hostname, parsed.port, logical_identifier, timeout, presplit)  # noqa: E731
    else:
        raise ConfigError(f"OMNI_INDEX={spec!r}: use lmdb, lmdb:///FOLDER, hbase://HOST:PORT or off")
    with _LOCK:
        hit = _OPEN.get(cache_key)
        if hit is not None:
            _OPEN.move_to_end(cache_key)
            return hit
    index = IdIndex(factory(), logical_identifier)
    evicted = []
    with _LOCK:
        index = _OPEN.setdefault(cache_key, index)
        while len(_OPEN) > MAX_OPEN:
            evicted.append(_OPEN.popitem(last=False)[1])
    for old in evicted:
        try:
            old.close()
        except Exception:  # noqa: BLE001 - closing a stale handle must not fail the caller
            pass
    return index


def forget(index: IdIndex) -> None:
    """Drop an index from the process cache (after it was dropped or its server went away)."""
    with _LOCK:
        for k, v in list(_OPEN.items()):
            if v is index:
                del _OPEN[k]


def _presplit_from_env() -> Callable[[str, str, int], None] | None:
    conf = settings.value("OMNI_HBASE_CONF")
    if not conf:
        return None
    if not (Path(conf) / "hbase-site.xml").is_file():
        raise ConfigError(f"OMNI_HBASE_CONF={conf!r} has no hbase-site.xml; point it at the cluster's conf folder")

    def presplit(table: str, family: str, regions: int) -> None:
        from omni_iceberg.index.hbase_tools import ensure_hbase_jars, presplit_table

        presplit_table(conf, ensure_hbase_jars(), table, family, regions)

    return presplit


def _lmdb(path: Path):
    from omni_iceberg.index.lmdb_backend import LmdbBackend

    return LmdbBackend(path)


def _hbase(host: str, port: int, ident: str, timeout_ms: int, presplit):
    from omni_iceberg.index.hbase_backend import HBaseBackend

    return HBaseBackend(host, port, ident, timeout_ms=timeout_ms, presplit=presplit)
