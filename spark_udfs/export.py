"""Export on Spark: the Spark engine's ``export`` capability.

The driver (:func:`omni_iceberg.explore.export.export`) plans the parts exactly as the
local engine does - which files each part reads, per file, never per row - and hands
them here. :class:`SparkExport` runs each part as ONE Spark task (one element per RDD
partition) calling :func:`~omni_iceberg.explore.export.export_part`, the same function
the local engine calls, so a part's files hold the same bytes on either engine. What
every task shares (the query, the scans' table metadata, the destination) is broadcast
once; a part carries only its file tasks. A task returns its files' manifest entries
(name, batch, bucket, rows, SHA-256); the driver lists them in plan order.

A task that dies is retried by Spark: its file names are fixed by the plan and each
file is moved into place whole, so a retry replaces what the failed attempt wrote. An
error of the user's query (DuckDB's) comes back as the core's ``ExportError`` (exit 2)
and the driver removes whatever any task wrote.

Example (what ``omni export web --where "t_len > 0" --out /data/x --engine spark
--spark-master spark://host:7077`` runs)::

    from omni_iceberg.explore.export import export
    export(omni.context, "web", None, "t_len > 0", "parquet", "/data/x", engine="spark",
           spark_master="spark://host:7077")
"""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from catalog_ext.errors import OmniError
from spark_udfs.engine import SparkSessionOwner, check_master_reachable, ship_python_path

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

#: the core's error for the user's query (exit 2), as a Python worker's traceback prints it
_EXPORT_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?(ExportError|RecordTooLargeError): (.*)$", re.MULTILINE)


class SparkExportError(OmniError):
    """A Spark export job failed for a reason other than the user's query."""

    exit_code = 5


class SparkExport(SparkSessionOwner):
    """Runs an export's parts on the session :class:`~spark_udfs.engine.SparkSessionOwner` holds."""

    name = "spark"

    def __init__(self, ctx: OmniContext, *, spark: Any = None, master: str | None = None, **options: Any):
        options.pop("app_name", None)
        super().__init__(ctx.config, spark=spark, master=master, **options)
        self.ctx = ctx
        self.tasks = 0

    def check(self) -> None:
        """Fail before any work when the master does not answer (a ConfigError, exit 2)."""
        check_master_reachable(self.master)

    def run_parts(self, job: Any, parts: list[Any]) -> list[list[dict[str, Any]]]:
        """Each part's manifest entries, in the order of ``parts``; one Spark task per part."""
        if not parts:
            return []
        spark = self.spark
        ship_python_path(spark)
        sc = spark.sparkContext
        shared = sc.broadcast(job)
        self.tasks = len(parts)
        try:
            sc.setJobDescription(f"omni export: {len(parts)} parts to {job.dest}")
            rdd = sc.parallelize(parts, len(parts))  # n elements in n slices: one part a task
            got = rdd.mapPartitions(lambda specs: _run(shared, specs)).collect()
        except Exception as e:  # py4j wraps the Python worker's error in Java's
            raise _translate(e) from e
        finally:
            sc.setJobDescription(None)
            shared.unpersist()
        by_index = dict(got)
        return [by_index.get(p.index, []) for p in parts]


def _run(shared: Any, specs: Any):
    """In a Spark task: the parts of this partition (one), written through the local engine's code."""
    from omni_iceberg.explore.export import export_part

    job = shared.value
    for spec in specs:
        tmp = job.dest.tmp_dir(None)
        try:
            # the writers of one part's pieces; Spark gave the task one core, and pyarrow writes
            # outside the GIL, so the pieces still overlap their compression with the hashing
            with ThreadPoolExecutor(max_workers=max(1, min(job.workers, _task_cpus())),
                                    thread_name_prefix="omni-export") as pool:
                entries, futures = export_part(job, spec, pool, tmp)
                for f in futures:
                    f.result()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        yield spec.index, entries


def _task_cpus() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    try:
        return int(context.cpus()) if context is not None else 1
    except Exception:  # noqa: BLE001 - older Spark: no cpus()
        return 1


def _translate(error: Exception) -> Exception:
    """The core's error a task raised (a bad query, a record too large), else a SparkExportError."""
    from omni_iceberg.explore.export import ExportError
    from omni_iceberg.read.reader import RecordTooLargeError

    text = str(error)
    found = _EXPORT_ERROR.findall(text)
    if found:
        kind, message = found[-1]
        return (ExportError if kind == "ExportError" else RecordTooLargeError)(message.strip())
    first = next((line for line in text.splitlines() if "Error" in line or "Exception" in line), text[:500])
    return SparkExportError(f"the Spark export job failed: {first.strip()[:500]}")


def spark_export(ctx: OmniContext, *, master: str | None = None, spark: Any = None, **options: Any) -> SparkExport:
    """The ``export`` capability: a :class:`SparkExport` on ``master`` (or the session ``spark``)."""
    return SparkExport(ctx, spark=spark, master=master, **options)
