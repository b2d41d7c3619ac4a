"""What ``make test`` fetches before the tests run, and the recipes ``tests/services`` starts servers with.

Development tooling, never imported by the runtime packages: the Trino server
(:mod:`.trino`), Iceberg's reference REST catalog server (:mod:`.iceberg_rest`),
s3proxy (:mod:`.s3proxy`) and the standalone HBase + Thrift server (:mod:`.hbase`).
Each module fetches its server once into ``$OMNI_CACHE`` when run from the repository
root (``python -m tests.toolchain.trino``; the Makefile's ``trino``, ``hbase`` and
``rest`` targets), each jar checked against the SHA-1 its ``*.lock.toml`` pins.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the folder of this package, where the lock files live
HERE = Path(__file__).resolve().parent


def jvm_command(jars: list[Path], main: str, *args: str, heap: str = "512m", java: str | None = None) -> list[str]:
    """``java -cp JARS MAIN ARGS`` for a test server: it lives seconds to minutes, so a small heap,
    the serial collector and no C2 compiler (``OMNI_JAVA`` picks the java)."""
    return [java or os.environ.get("OMNI_JAVA") or "java", f"-Xmx{heap}", "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true", "-cp", os.pathsep.join(map(str, jars)),
            main, *args]
