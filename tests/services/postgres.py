"""A throwaway PostgreSQL server for tests: one fresh cluster per instance, always removed.

PostgreSQL is the catalog database whenever Spark and pyiceberg share a catalog: with
SQLite, Iceberg's Java JdbcCatalog holds a read lock for the whole Spark session and
every pyiceberg commit fails with ``database is locked`` (see :mod:`spark_udfs.session`).

The cluster lives in a private temp folder (data, log and Unix socket), listens on
127.0.0.1 on a free port, trusts every local connection and runs with ``fsync=off``:
fast (~1.5 s to start) and unfit for anything but tests. ``initdb`` refuses to run as
root, so as root the server runs as the ``postgres`` user through ``runuser``.

With ``password=...`` TCP connections must authenticate (scram-sha-256) and the URIs
carry the password: tests that check secrets never leak (a canary password) use it.

Example::

    with PostgresServer() as pg:
        engine = sqlalchemy.create_engine(pg.sqlalchemy_uri)
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from catalog_ext.errors import ConfigError
from tests.services import free_port

_INSTALL_HINT = "`make test` installs it; by hand: `apt-get install -y postgresql`"


def find_pg_bin() -> Path:
    """The folder holding ``initdb``/``pg_ctl``: ``$OMNI_PG_BIN``, else the newest
    ``/usr/lib/postgresql/*/bin``, else wherever ``pg_ctl`` is on ``PATH``."""
    override = os.environ.get("OMNI_PG_BIN")
    candidates: list[Path] = [Path(override)] if override else []
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else -1,
        reverse=True,
    )
    candidates += [Path(p) for p in versions]
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    raise ConfigError(
        f"PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin "
        f"or on PATH; the Spark/catalog tests need a real PostgreSQL - {_INSTALL_HINT}"
    )


class PostgresServer:
    """A private PostgreSQL cluster with one database, started by :meth:`start`.

    Use as a context manager, or call :meth:`start` / :meth:`stop` (idempotent; also
    run at interpreter exit as a safety net). Connection details:
    :attr:`sqlalchemy_uri`, :attr:`jdbc_url`, :attr:`host`, :attr:`port`,
    :attr:`user`, :attr:`database`.
    """

    user = "postgres"
    host = "127.0.0.1"

    def __init__(self, database: str = "omni", *, password: str | None = None, start_timeout_s: float = 60.0) -> None:
        self.database = database
        #: None: trust every connection; else TCP clients must give it (scram-sha-256)
        self.password = password
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self.root: Path | None = None
        self._bin: Path | None = None
        self._run_as: list[str] = []
        self._running = False

    # -- connection details ------------------------------------------------------------

    @property
    def sqlalchemy_uri(self) -> str:
        """``postgresql+psycopg://postgres[:PASSWORD]@127.0.0.1:PORT/omni``."""
        from urllib.parse import quote

        secret = f":{quote(self.password, safe='')}" if self.password is not None else ""
        return f"postgresql+psycopg://{self.user}{secret}@{self.host}:{self._port()}/{self.database}"

    @property
    def jdbc_url(self) -> str:
        """``jdbc:postgresql://127.0.0.1:PORT/omni``; the user goes in a separate property."""
        return f"jdbc:postgresql://{self.host}:{self._port()}/{self.database}"

    @property
    def log_path(self) -> Path:
        """The server log, for failure messages."""
        assert self.root is not None
        return self.root / "server.log"

    def _port(self) -> int:
        if self.port is None:
            raise RuntimeError("PostgresServer is not started; call start() or use it in a with-block")
        return self.port

    # -- life cycle --------------------------------------------------------------------

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "PostgresServer":
        """initdb a fresh cluster, start it, create :attr:`database`; returns ``self``."""
        if self._running:
            return self
        self._bin = find_pg_bin()
        self._run_as = self._runuser_prefix()
        # Own folder directly under the system temp dir: pytest's tmp dirs are 0700 root
        # folders the postgres user cannot traverse, and the socket path must stay short.
        self.root = Path(tempfile.mkdtemp(prefix="omni-pg-"))
        atexit.register(self.stop)
        try:
            if self._run_as:
                pw = pwd.getpwnam(self.user)
                os.chown(self.root, pw.pw_uid, pw.pw_gid)
            auth = ["-A", "trust"]
            if self.password is not None:
                # the Unix socket stays trusted (pg_ctl's readiness probe); TCP needs the password
                pwfile = self.root / "pwfile"
                pwfile.write_text(self.password + "\n")
                if self._run_as:
                    os.chown(pwfile, pw.pw_uid, pw.pw_gid)
                auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
            try:
                self._run(
                    [str(self._bin / "initdb"), "-D", str(self.root / "data"), "-U", self.user,
                     *auth, "--no-sync", "-E", "UTF8", "--locale=C"],
                    what="initdb",
                )
            finally:
                (self.root / "pwfile").unlink(missing_ok=True)
            self._start_server()
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_server(self) -> None:
        assert self._bin is not None and self.root is not None
        last_error: Exception | None = None
        for _ in range(3):  # a free port can be taken between probe and bind
            self.port = free_port()
            opts = (
                f"-c listen_addresses={self.host} -p {self.port} -k {self.root} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200"
            )
            try:
                self._run(
                    [str(self._bin / "pg_ctl"), "start", "-w", "-t", str(int(self.start_timeout_s)),
                     "-D", str(self.root / "data"), "-l", str(self.log_path), "-o", opts],
                    what="pg_ctl start",
                )
                self._running = True
                return
            except ConfigError as e:
                last_error = e
        assert last_error is not None
        raise last_error

    def _create_database(self) -> None:
        import psycopg

        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                with psycopg.connect(
                    host=self.host, port=self.port, user=self.user, dbname="postgres", autocommit=True,
                    password=self.password,
                ) as conn:
                    conn.execute(f'CREATE DATABASE "{self.database}"')
                return
            except psycopg.OperationalError as e:
                if time.monotonic() > deadline:
                    raise ConfigError(
                        f"PostgreSQL on {self.host}:{self.port} did not accept connections: {e}; "
                        f"see {self.log_path}"
                    ) from e
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (immediate mode: the data is thrown away) and delete its folder."""
        if self._running and self._bin is not None and self.root is not None:
            subprocess.run(
                [*self._run_as, str(self._bin / "pg_ctl"), "stop", "-m", "immediate", "-w",
                 "-D", str(self.root / "data")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
            )
            self._running = False
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        self.port = None
        atexit.unregister(self.stop)

    # -- helpers -----------------------------------------------------------------------

    def _runuser_prefix(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            pwd.getpwnam(self.user)
        except KeyError as e:
            raise ConfigError(
                f"running as root, the test PostgreSQL must run as user {self.user!r}, which does "
                f"not exist; {_INSTALL_HINT} (the package creates the user)"
            ) from e
        runuser = shutil.which("runuser")
        if runuser is None:
            raise ConfigError("running as root, `runuser` (util-linux) is needed to start PostgreSQL as user postgres")
        return [runuser, "-u", self.user, "--"]

    def _run(self, argv: list[str], *, what: str) -> None:
        proc = subprocess.run(
            [*self._run_as, *argv], capture_output=True, text=True, check=False,
            cwd=self.root, timeout=self.start_timeout_s + 30,
        )
        if proc.returncode != 0:
            log = ""
            if self.root is not None and self.log_path.exists():
                log = self.log_path.read_text(errors="replace")[-2000:]
            raise ConfigError(
                f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}"
                + (f"\nserver log tail:\n{log}" if log else "")
            )
