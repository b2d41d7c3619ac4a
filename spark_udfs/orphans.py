"""The orphan-file sweep on Spark: Iceberg's ``remove_orphan_files`` procedure finds the files.

What the sweep must find (see :func:`catalog_ext.staging.sweep_orphan_files`, the local
engine): files under a physical table's ``data/`` that no snapshot of the table reaches -
every snapshot, not only ``main``: omni's readers read the snapshots logical versions
pin, and staging branches hold a run's uncommitted work - and that are older than the
grace period (a younger one may belong to a run that has not committed yet).

Iceberg's procedure computes exactly that: the files every snapshot and ref of the table
reaches, and a listing of the location, as Spark jobs. That is the part of the sweep that
grows with the table - its history's manifests and its storage listing - and why a big
family's sweep goes to Spark (``omni maintain --engine spark|auto``). It runs with
``dry_run => true``: the procedure reports no sizes, and the sweep reports the bytes it
frees, so omni sizes the files it was given and deletes them through the catalog's FileIO,
as the local sweep does (deleting a known list is the cheap part).

The procedure refuses an ``older_than`` less than a day before now (Iceberg guards a
concurrent writer's files that way); a shorter grace (``OMNI_ORPHAN_GRACE_S``) is refused
here before Spark is asked, naming the setting, and ``auto`` keeps such a sweep local.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from catalog_ext.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from catalog_ext.family import FamilyState
    from catalog_ext.staging import SweepReport

#: Iceberg's procedure refuses an ``older_than`` closer to now than this
MIN_GRACE_S = 24 * 3600


def spark_grace_blocker(older_than_s: float) -> str | None:
    """Why Spark cannot sweep with this grace period, or None."""
    if older_than_s < MIN_GRACE_S:
        return (f"Iceberg's remove_orphan_files refuses a grace period under 24 hours "
                f"(OMNI_ORPHAN_GRACE_S is {older_than_s:g} s)")
    return None


def orphans_on_spark(spark: "SparkSession", catalog_name: str, identifier: str, data_root: str,
                     older_than_s: float, now_s: float | None = None) -> list[str]:
    """Files under ``data_root`` of physical table ``identifier`` that no snapshot reaches,
    older than ``older_than_s``: Iceberg's procedure in dry-run mode (nothing is deleted)."""
    blocker = spark_grace_blocker(older_than_s)
    if blocker:
        raise ConfigError(f"the orphan sweep cannot run on Spark: {blocker}; use --engine local")
    before = datetime.fromtimestamp((time.time() if now_s is None else now_s) - older_than_s, timezone.utc)
    stamp = before.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    # the identifier and location are omni's own (catalog names, a warehouse path): quoted all the same
    rows = spark.sql(
        f"CALL `{catalog_name}`.system.remove_orphan_files("
        f"table => {_literal(identifier)}, older_than => TIMESTAMP '{stamp}+00:00', "
        f"location => {_literal(data_root)}, dry_run => true)").collect()
    return [row[0] for row in rows]


def sweep_on_spark(spark: "SparkSession", catalog: Any, state: "FamilyState", *, older_than_s: float,
                   dry_run: bool = False) -> "SweepReport":
    """:func:`catalog_ext.staging.sweep_orphan_files` with the files found by Spark."""
    from catalog_ext import iceberg_io
    from catalog_ext.staging import SweepReport

    report = SweepReport()
    for t in state.tables:
        ice = catalog.load_table(t.identifier)
        data_root = f"{ice.location().rstrip('/')}/data"
        paths = [_as_table_path(p, data_root) for p in orphans_on_spark(spark, catalog.name, t.identifier, data_root,
                                                                          older_than_s)]
        doomed = {path: iceberg_io.file_length(ice.io, path) for path in paths}
        report.orphan_files_deleted += len(doomed) if dry_run else iceberg_io.delete_files(catalog, doomed)
        report.orphan_bytes_freed += sum(doomed.values())
    return report


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _as_table_path(path: str, data_root: str) -> str:
    """A path as Hadoop prints it (``file:/w/x``) in the form the table's location uses (``file:///w/x`` or ``/w/x``)."""
    got = urlparse(path)
    if got.scheme != "file":
        return path
    return f"file://{got.path}" if data_root.startswith("file:") else got.path

