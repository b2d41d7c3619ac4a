"""A throwaway standalone HBase with its Thrift server, for tests: always stopped.

Two JVMs from the jars :func:`omni_iceberg.index.hbase_tools.ensure_hbase_jars` fetches:
``HMaster start`` runs master, region server and ZooKeeper in one JVM (standalone
mode, data in a private temp folder), then ``ThriftServer start`` serves Thrift 1 -
what ``happybase`` speaks - on a free port of 127.0.0.1. Ready means: a happybase
client lists tables through Thrift, which needs the master to be up too.

Start-up is slow (about half a minute per JVM on a busy machine), so tests share one
server per session. Logs stay in the temp folder and their tail is shown when start-up
fails.

Example::

    with HBaseServer() as hb:
        conn = happybase.Connection(hb.host, hb.thrift_port)
"""

from __future__ import annotations

from pathlib import Path

from tests.toolchain import hbase as toolchain
from tests.services import free_port
from tests.services.jvm import JvmServer


class HBaseServer(JvmServer):
    """A private standalone HBase + Thrift 1 server on 127.0.0.1. See the module docstring."""

    name = "HBase"
    slug = "hbase"
    java_package = "openjdk-17-jdk-headless"
    poll_s = 1.0

    def __init__(self, *, start_timeout_s: float = 300.0) -> None:
        super().__init__(start_timeout_s=start_timeout_s)
        self.thrift_port: int | None = None
        self.conf_dir: Path | None = None
        self.jars: list[Path] = []

    @property
    def spec(self) -> str:
        """The ``OMNI_INDEX`` value that selects this server."""
        return f"hbase://{self.host}:{self.thrift_port}"

    def _launch(self) -> None:
        assert self.workdir is not None
        self.jars = toolchain.ensure_hbase_jars()
        self.conf_dir = self.workdir / "conf"
        toolchain.write_hbase_site(self.conf_dir, self.workdir / "data", zookeeper_port=free_port(),
                                   master_port=free_port(), regionserver_port=free_port(), host=self.host)
        self.thrift_port = free_port()
        self._spawn("master", toolchain.java_command(self.conf_dir, self.jars, toolchain.MASTER_MAIN, "start"))
        self._spawn("thrift", toolchain.java_command(self.conf_dir, self.jars, toolchain.THRIFT_MAIN, "-b", self.host,
                                                     "-p", str(self.thrift_port), "--infoport", str(free_port()),
                                                     "start"))

    def _probe(self, attempt: int) -> None:
        import happybase

        # a table create needs master, region server and hbase:meta all up; a fresh
        # name per attempt, since an attempt that timed out may still have created it
        probe = f"omni_ready_probe_{attempt}"
        conn = happybase.Connection(self.host, self.thrift_port, timeout=20000)
        conn.create_table(probe, {"f": {}})
        conn.delete_table(probe, disable=True)
        conn.close()

    def presplit(self, table: str, family: str, regions: int) -> None:
        """Create a pre-split table through RegionSplitter (the HBase backend's hook)."""
        assert self.conf_dir is not None
        toolchain.presplit_table(self.conf_dir, self.jars, table, family, regions)


_SHARED: HBaseServer | None = None


def shared_server() -> HBaseServer:
    """One server for the whole test process (two JVMs take ~1 min to start), stopped at exit."""
    global _SHARED
    if _SHARED is None:
        server = HBaseServer()
        server.start()
        _SHARED = server
    return _SHARED


if __name__ == "__main__":  # pragma: no cover - manual check: start, print, stop on Enter
    with HBaseServer() as server:
        print(server.spec, server.conf_dir)
        input("HBase is up; press Enter to stop ")
