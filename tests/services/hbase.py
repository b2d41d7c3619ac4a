"""A throwaway standalone HBase with its Thrift server, for tests: always stopped.

Two JVMs from the jars :func:`omni_iceberg.toolchain.hbase.ensure_hbase_jars` fetches:
``HMaster start`` runs master, region server and ZooKeeper in one JVM (standalone
mode, data in a private temp folder), then ``ThriftServer start`` serves Thrift 1 -
what ``happybase`` speaks - on a free port of 127.0.0.1. Ready means: a happybase
client lists tables through Thrift, which needs the master to be up too.

Start-up is slow (~30 s per JVM on 2 busy cores, per TOOLCHAIN.md), so tests share one
server per session. Logs stay in the temp folder and their tail is shown when start-up
fails.

Example::

    with HBaseServer() as hb:
        conn = happybase.Connection(hb.host, hb.thrift_port)
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from catalog_ext.errors import ConfigError
from omni_iceberg.toolchain import hbase as toolchain
from tests.services import free_port


class HBaseServer:
    """A private standalone HBase + Thrift 1 server on 127.0.0.1. See the module docstring."""

    host = "127.0.0.1"

    def __init__(self, *, start_timeout_s: float = 300.0) -> None:
        self.start_timeout_s = start_timeout_s
        self.thrift_port: int | None = None
        self.workdir: Path | None = None
        self.conf_dir: Path | None = None
        self.jars: list[Path] = []
        self._procs: list[subprocess.Popen] = []

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def spec(self) -> str:
        """The ``OMNI_INDEX`` value that selects this server."""
        return f"hbase://{self.host}:{self.thrift_port}"

    def start(self) -> None:
        if shutil.which(os.environ.get("OMNI_JAVA", "java")) is None:
            raise ConfigError("java not found; HBase needs a JDK 17+ (apt-get install -y openjdk-17-jdk-headless)")
        self.jars = toolchain.ensure_hbase_jars()
        self.workdir = Path(tempfile.mkdtemp(prefix="omni-hbase-"))
        self.conf_dir = self.workdir / "conf"
        toolchain.write_hbase_site(self.conf_dir, self.workdir / "data", zookeeper_port=free_port(),
                                   master_port=free_port(), regionserver_port=free_port(), host=self.host)
        atexit.register(self.stop)
        self.thrift_port = free_port()
        self._spawn("master", toolchain.MASTER_MAIN, "start")
        self._spawn("thrift", toolchain.THRIFT_MAIN, "-b", self.host, "-p", str(self.thrift_port),
                    "--infoport", str(free_port()), "start")
        self._wait_ready()

    def _spawn(self, name: str, main: str, *args: str) -> None:
        assert self.conf_dir is not None and self.workdir is not None
        log = open(self.workdir / f"{name}.log", "wb")
        cmd = toolchain.java_command(self.conf_dir, self.jars, main, *args)
        self._procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                            start_new_session=True))

    def _log_tail(self) -> str:
        assert self.workdir is not None
        out = []
        for f in sorted(self.workdir.glob("*.log")):
            out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def _wait_ready(self) -> None:
        import happybase

        deadline = time.monotonic() + self.start_timeout_s
        last: Exception | None = None
        attempt = 0
        while time.monotonic() < deadline:
            for p in self._procs:
                if p.poll() is not None:
                    tail = self._log_tail()
                    self.stop()
                    raise ConfigError(f"HBase exited with code {p.returncode} during start-up:\n{tail}")
            # a table create needs master, region server and hbase:meta all up; a fresh
            # name per attempt, since an attempt that timed out may still have created it
            probe = f"omni_ready_probe_{attempt}"
            attempt += 1
            try:
                conn = happybase.Connection(self.host, self.thrift_port, timeout=20000)
                conn.create_table(probe, {"f": {}})
                conn.delete_table(probe, disable=True)
                conn.close()
                return
            except Exception as e:  # noqa: BLE001 - not up yet
                last = e
                time.sleep(1.0)
        tail = self._log_tail()
        self.stop()
        raise ConfigError(f"HBase did not become ready within {self.start_timeout_s:.0f}s ({last}):\n{tail}")

    def presplit(self, table: str, family: str, regions: int) -> None:
        """Create a pre-split table through RegionSplitter (the HBase backend's hook)."""
        assert self.conf_dir is not None
        toolchain.presplit_table(self.conf_dir, self.jars, table, family, regions)

    def stop(self) -> None:
        for p in reversed(self._procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self._procs = []
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


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
