"""A throwaway Spark standalone cluster: one master, one small worker, free ports.

:class:`StandaloneCluster` runs ``org.apache.spark.deploy.master.Master`` and
``...worker.Worker`` from pyspark's own ``bin/spark-class`` (no Spark download). It is
a test service - omni itself only connects to a master - and is also handy for trying
``--engine spark --spark-master`` on one machine::

    python -m tests.services.spark_cluster --port 7077 --cores 2 --memory 2g
    # prints spark://127.0.0.1:7077 and runs until Ctrl-C; then, in another shell:
    omni --catalog postgresql+psycopg://... backfill web --features quality --engine spark \\
        --spark-master spark://127.0.0.1:7077

The daemons run in the foreground as children of this process, each in its own
process group, and :meth:`StandaloneCluster.stop` ends exactly those groups (the
worker's executors included). A worker can declare GPUs (``gpus=N`` + a discovery
script printing ``{"name": "gpu", "addresses": ["0", ...]}``).

:class:`SparkTestCluster` is what the tests use: the worker gets 2 cores and 1 GiB so
an application with ``spark.executor.memory=512m`` fits next to the test session's
own JVMs. ``fake_gpus=1`` makes the worker offer one GPU address through a discovery
script. This is the one fake here, and only because no GPU exists on these machines:
Spark's resource accounting and stage-level scheduling are real (a task that asks for
a GPU gets address ``0`` and waits for it), but there is no device behind the address -
the UDF still computes on the CPU.

Example::

    with SparkTestCluster(tmp_path, fake_gpus=1) as cluster:
        run_backfill(omni.context, "web", ["quality"], engine="spark", spark_master=cluster.master_url)
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from catalog_ext.errors import ConfigError
from tests.services import free_port

FAKE_GPU_ADDRESSES = ["0"]


MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The folder of the installed pyspark (it holds ``bin/spark-class`` and ``jars/``)."""
    try:
        import pyspark
    except ImportError as e:
        raise ConfigError("pyspark is not installed; install the extra: pip install 'omni-iceberg[spark]'") from e
    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """One master and one worker on ``host``; ports 0 pick free ones."""

    host: str = "127.0.0.1"
    port: int = 7077
    webui_port: int = 8080
    worker_cores: int = 1
    worker_memory: str = "1g"
    workers: int = 1  # each with worker_cores cores (2 workers: a task can be retried on the other)
    gpus: int = 0
    gpu_discovery_script: str | None = None
    root: Path | None = None  # logs and work dir; a temp folder by default
    daemon_memory: str = "256m"
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)
    _logs: dict[str, Path] = field(default_factory=dict, repr=False)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- life cycle ------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> StandaloneCluster:
        """Start the master, then the worker; return once the worker is ALIVE on the master."""
        if self._procs:
            return self
        self.port = self.port or free_port(self.host)
        self.webui_port = self.webui_port or free_port(self.host)
        self.root = Path(self.root or tempfile.mkdtemp(prefix="omni-spark-cluster-"))
        (self.root / "work").mkdir(parents=True, exist_ok=True)
        try:
            self._spawn("master", [MASTER_CLASS, "--host", self.host, "--port", str(self.port),
                                   "--webui-port", str(self.webui_port)], {})
            self._wait(lambda: self.status().get("status") == "ALIVE", timeout_s, "the master to come up")
            worker_opts = []
            if self.gpus:
                if not self.gpu_discovery_script:
                    raise ConfigError("a worker with gpus needs gpu_discovery_script (prints the GPU addresses as JSON)")
                worker_opts = [f"-Dspark.worker.resource.gpu.amount={self.gpus}",
                               f"-Dspark.worker.resource.gpu.discoveryScript={self.gpu_discovery_script}"]
            for name in self.worker_names():
                self._spawn(name, [WORKER_CLASS, "--host", self.host, "--cores", str(self.worker_cores),
                                   "--memory", self.worker_memory, "--webui-port", str(free_port(self.host)),
                                   "--work-dir", str(self.root / "work"), self.master_url],
                            {"SPARK_WORKER_OPTS": " ".join(worker_opts)})
            alive = lambda: sum(w.get("state") == "ALIVE" for w in self.status().get("workers", []))  # noqa: E731
            self._wait(lambda: alive() >= self.workers, timeout_s, f"{self.workers} worker(s) to register")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End the worker (and its executors), then the master; only the processes this object started."""
        for name in (*self.worker_names(), "master"):
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # its own group: the daemon and what it spawned
                proc.wait(timeout=20)
            except (ProcessLookupError, PermissionError):
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def status(self) -> dict:
        """The master's JSON status page ({} while it is not answering)."""
        try:
            with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=2) as resp:
                return json.loads(resp.read().decode())
        except (OSError, ValueError):
            return {}

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self._logs.get(name)
        return path.read_text(errors="replace")[-chars:] if path and path.exists() else ""

    # ---- helpers -----------------------------------------------------------------------------
    def worker_names(self) -> list[str]:
        return ["worker"] + [f"worker-{k}" for k in range(2, self.workers + 1)]

    def _spawn(self, name: str, args: list[str], extra_env: dict[str, str]) -> None:
        from spark_udfs.session import FAST_JVM_FLAGS

        home = spark_home()
        assert self.root is not None
        env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP=self.host, SPARK_DAEMON_MEMORY=self.daemon_memory,
                   SPARK_DAEMON_JAVA_OPTS=FAST_JVM_FLAGS, SPARK_LOG_DIR=str(self.root),
                   PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable), **extra_env)
        log = self.root / f"{name}.log"
        self._logs[name] = log
        with open(log, "ab") as out:
            self._procs[name] = subprocess.Popen([str(home / "bin" / "spark-class"), *args], stdout=out,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                                 cwd=self.root, start_new_session=True)

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ConfigError(f"the Spark {name} exited with code {proc.returncode} while waiting for "
                                      f"{what}; its log ({self._logs[name]}):\n{self.log_tail(name)}")
            if ready():
                return
            time.sleep(0.3)
        raise ConfigError(f"timed out after {timeout_s:.0f} s waiting for {what}; logs in {self.root}:\n"
                          + "\n".join(self.log_tail(n, 1500) for n in self._procs))


class SparkTestCluster:
    """Context manager: start on enter, always stop on exit (and at interpreter exit)."""

    def __init__(self, root: Path, *, fake_gpus: int = 0, cores: int = 2, memory: str = "1g", workers: int = 1):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        script = None
        if fake_gpus:
            script = self.root / "fake-gpu-discovery.sh"
            addresses = [str(i) for i in range(fake_gpus)]
            script.write_text("#!/bin/sh\necho '" + json.dumps({"name": "gpu", "addresses": addresses}) + "'\n")
            script.chmod(0o755)
        self.cluster = StandaloneCluster(port=0, webui_port=0, worker_cores=cores, worker_memory=memory,
                                         workers=workers,
                                         gpus=fake_gpus, gpu_discovery_script=str(script) if script else None,
                                         root=self.root / "cluster")

    @property
    def master_url(self) -> str:
        return self.cluster.master_url

    def __enter__(self) -> SparkTestCluster:
        atexit.register(self.cluster.stop)
        self.cluster.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.stop()
        atexit.unregister(self.cluster.stop)

    def logs(self) -> str:
        """Master and worker log tails, for assertion messages."""
        return "\n".join(f"--- {n} ---\n{self.cluster.log_tail(n)}"
                         for n in ("master", *self.cluster.worker_names()))


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m tests.services.spark_cluster",
                                description="run a Spark standalone master and one worker until Ctrl-C")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7077, help="master port (0: any free port)")
    p.add_argument("--webui-port", type=int, default=8080, help="master web UI port (0: any free port)")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="worker cores")
    p.add_argument("--memory", default="2g", help="worker memory, e.g. 2g")
    p.add_argument("--gpus", type=int, default=0, help="GPUs the worker offers")
    p.add_argument("--gpu-discovery-script", help="script printing {\"name\": \"gpu\", \"addresses\": [...]}")
    args = p.parse_args(argv)
    cluster = StandaloneCluster(args.host, args.port, args.webui_port, args.cores, args.memory, args.gpus,
                                args.gpu_discovery_script)
    with cluster:
        print(f"{cluster.master_url}  (web UI {cluster.webui_url}, logs {cluster.root}); Ctrl-C stops it", flush=True)
        try:
            while all(proc.poll() is None for proc in cluster._procs.values()):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
