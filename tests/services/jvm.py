"""The start/stop skeleton every JVM server the tests run shares (HBase, REST catalog, s3proxy).

A subclass names itself, launches its JVM(s) with :meth:`JvmServer._spawn` in
``_launch`` and says what "ready" means in ``_probe`` (raise until it is). This class
does the rest the same way for all of them: a private temp folder, one log per JVM
whose tail is shown when start-up fails, a bounded wait that notices a JVM dying,
and a stop that always runs (``with``, or at interpreter exit).
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


class JvmServer:
    """Base of the test servers; see the module docstring."""

    host = "127.0.0.1"
    #: shown in errors ("the REST catalog server", "s3proxy", "HBase")
    name = "server"
    #: names the temp folder (omni-<slug>-...)
    slug = "server"
    #: the Debian package named when no java is found
    java_package = "openjdk-17-jre-headless"
    #: seconds between two readiness probes
    poll_s = 0.5

    def __init__(self, *, start_timeout_s: float) -> None:
        self.start_timeout_s = start_timeout_s
        self.workdir: Path | None = None
        self._procs: list[subprocess.Popen] = []

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what a subclass provides ------------------------------------------------------
    def _launch(self) -> None:
        """Start the JVM(s) with :meth:`_spawn`; ``self.workdir`` exists."""
        raise NotImplementedError

    def _probe(self, attempt: int) -> None:
        """Return when the server answers; raise while it does not (``attempt`` counts from 0)."""
        raise NotImplementedError

    # ---- shared ------------------------------------------------------------------------
    def start(self) -> None:
        if shutil.which(os.environ.get("OMNI_JAVA", "java")) is None:
            raise ConfigError(f"java not found; {self.name} needs a JDK 17+ (apt-get install -y {self.java_package})")
        self.workdir = Path(tempfile.mkdtemp(prefix=f"omni-{self.slug}-"))
        atexit.register(self.stop)
        self._launch()
        self._wait_ready()

    def _spawn(self, log_name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        assert self.workdir is not None
        log = open(self.workdir / f"{log_name}.log", "wb")
        self._procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, env=env,
                                            start_new_session=True))

    def _log_tail(self) -> str:
        assert self.workdir is not None
        logs = sorted(self.workdir.glob("*.log"))
        if len(logs) == 1:
            return logs[0].read_text(errors="replace")[-3000:]
        return "\n".join(f"--- {f.name}\n" + f.read_text(errors="replace")[-3000:] for f in logs)

    def _fail(self, message: str) -> None:
        tail = self._log_tail()
        self.stop()
        raise ConfigError(f"{message}:\n{tail}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        last: Exception | None = None
        attempt = 0
        while time.monotonic() < deadline:
            for p in self._procs:
                if p.poll() is not None:
                    self._fail(f"{self.name} exited with code {p.returncode} during start-up")
            try:
                self._probe(attempt)
                return
            except Exception as e:  # noqa: BLE001 - not up yet
                last = e
                attempt += 1
                time.sleep(self.poll_s)
        self._fail(f"{self.name} did not become ready within {self.start_timeout_s:.0f}s ({last})")

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
