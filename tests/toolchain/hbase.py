"""A standalone HBase (master, region server and ZooKeeper in one JVM) and its Thrift server.

The jars are the runtime's (:func:`omni_iceberg.index.hbase_tools.ensure_hbase_jars`, the
``hbase-thrift`` artifact's dependency tree pinned in ``omni_iceberg/index/hbase.lock.toml``),
so the server the tests start and the ``RegionSplitter`` the index runs share one cache.
This module adds what only a server needs: its ``hbase-site.xml`` and its main classes.

Example::

    >>> from tests.toolchain.hbase import ensure_hbase_jars, write_hbase_site
    >>> jars = ensure_hbase_jars()                      # doctest: +SKIP
    >>> conf = write_hbase_site("/tmp/hb/conf", "/tmp/hb/data", zookeeper_port=2181)  # doctest: +SKIP

From a shell (the Makefile's set-up step): ``python -m tests.toolchain.hbase``.
"""

from __future__ import annotations

import os
from pathlib import Path
from xml.sax.saxutils import escape

from omni_iceberg.index.hbase_tools import HBASE_VERSION, ensure_hbase_jars, java_command, presplit_table

__all__ = ["HBASE_VERSION", "MASTER_MAIN", "THRIFT_MAIN", "ensure_hbase_jars", "java_command", "presplit_table",
           "write_hbase_site"]

#: The Thrift server's main class (Thrift 1: the protocol ``happybase`` speaks).
THRIFT_MAIN = "org.apache.hadoop.hbase.thrift.ThriftServer"
MASTER_MAIN = "org.apache.hadoop.hbase.master.HMaster"


def write_hbase_site(conf_dir: str | os.PathLike[str], data_dir: str | os.PathLike[str], *, zookeeper_port: int,
                     master_port: int = 0, regionserver_port: int = 0, host: str = "127.0.0.1") -> Path:
    """Write ``hbase-site.xml`` for a standalone HBase whose data lives under ``data_dir``.

    Why each setting: ``cluster.distributed=false`` runs master, region server and
    ZooKeeper in one JVM; ``rootdir`` is a local ``file://`` folder, which has no
    hflush/hsync, hence ``unsafe.stream.capability.enforce=false`` (else the WAL refuses
    to start); info (web UI) ports are -1 so parallel test servers never collide; all
    other ports are the caller's free ports on 127.0.0.1 (0 lets HBase pick). No
    ``hbase.master.hostname``: in standalone mode master and region server are one
    process, and a forced ``127.0.0.1`` makes the region server abort when the master's
    reverse lookup calls it ``localhost`` ("Master passed us a different hostname").
    """
    conf = Path(conf_dir)
    data = Path(data_dir).resolve()
    conf.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    props = {
        "hbase.cluster.distributed": "false",
        "hbase.rootdir": (data / "hbase").as_uri(),
        "hbase.tmp.dir": str(data / "tmp"),
        "hbase.zookeeper.property.dataDir": str(data / "zookeeper"),
        "hbase.zookeeper.quorum": host,
        "hbase.zookeeper.property.clientPort": str(zookeeper_port),
        "hbase.unsafe.stream.capability.enforce": "false",
        "hbase.master.info.port": "-1",
        "hbase.regionserver.info.port": "-1",
        "hbase.master.port": str(master_port),
        "hbase.regionserver.port": str(regionserver_port),
        "hbase.zookeeper.property.maxClientCnxns": "200",
    }
    body = "\n".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
                     for k, v in props.items())
    path = conf / "hbase-site.xml"
    path.write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}\n</configuration>\n')
    (conf / "log4j2.properties").write_text(
        "status = warn\nappender.console.type = Console\nappender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %d %p %c{1}: %m%n\n"
        "rootLogger = warn,STDOUT\n"
    )
    return path


if __name__ == "__main__":  # pragma: no cover - set-up script (`make hbase`)
    jars = ensure_hbase_jars(progress=True)
    print(f"HBase jars: {len(jars)} in {jars[0].parent if jars else '-'}")
