"""A throwaway Spark standalone cluster for tests: one master, one small worker, free ports.

Built on :class:`spark_udfs.cluster.StandaloneCluster` (pyspark's own ``spark-class``,
no Spark download). The worker gets 2 cores and 1 GiB so an application with
``spark.executor.memory=512m`` fits next to the test session's own JVMs.

``fake_gpus=1`` makes the worker offer one GPU address through a discovery script.
This is the one fake here, and only because no GPU exists on these machines: Spark's
resource accounting and stage-level scheduling are real (a task that asks for a GPU
gets address ``0`` and waits for it), but there is no device behind the address -
the UDF still computes on the CPU.

Example::

    with SparkTestCluster(tmp_path, fake_gpus=1) as cluster:
        SparkBackfill(omni, master=cluster.master_url).run("web", ["quality"])
"""

from __future__ import annotations

import atexit
import json
from pathlib import Path

from spark_udfs.cluster import StandaloneCluster

FAKE_GPU_ADDRESSES = ["0"]


class SparkTestCluster:
    """Context manager: start on enter, always stop on exit (and at interpreter exit)."""

    def __init__(self, root: Path, *, fake_gpus: int = 0, cores: int = 2, memory: str = "1g"):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        script = None
        if fake_gpus:
            script = self.root / "fake-gpu-discovery.sh"
            addresses = [str(i) for i in range(fake_gpus)]
            script.write_text("#!/bin/sh\necho '" + json.dumps({"name": "gpu", "addresses": addresses}) + "'\n")
            script.chmod(0o755)
        self.cluster = StandaloneCluster(port=0, webui_port=0, worker_cores=cores, worker_memory=memory,
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
        return "\n".join(f"--- {n} ---\n{self.cluster.log_tail(n)}" for n in ("master", "worker"))
