"""The orphan sweep on Spark (spark_udfs/orphans.py): Iceberg's remove_orphan_files finds what the local sweep finds.

Real Spark with the official Iceberg runtime on the PostgreSQL catalog (the ``spark``
fixture). The engine choice itself is also checked on the embedded catalog, where
``auto`` must stay local and say why.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from catalog_ext.errors import ConfigError
from omni_iceberg.api import Omni
from tests.pages import small_family as _family
from tests.pages import sorted_rows

DAY = 24 * 3600


def _local(uri: str) -> Path:
    return Path(urlparse(uri).path if uri.startswith("file:") else uri)


def _plant_orphans(omni: Omni, name: str) -> tuple[list[Path], list[Path]]:
    """Per physical table: a copy of a live data file no snapshot names, 2 days old (an orphan),
    and another written just now (a run that has not committed yet: kept)."""
    old, young = [], []
    for t in omni.state(name).tables:
        ice = omni.catalog.load_table(t.identifier)
        live = next(iter(ice.scan(snapshot_id=t.snapshot_id).plan_files())).file.file_path
        src = _local(live)
        for kept, folder in ((False, old), (True, young)):
            dst = src.with_name(f"orphan-{'young' if kept else 'old'}-{src.name}")
            shutil.copyfile(src, dst)
            if not kept:
                past = time.time() - 2 * DAY
                os.utime(dst, (past, past))
            folder.append(dst)
    return old, young


def test_auto_stays_local_where_spark_cannot_run_and_says_why(omni_home, tmp_path, monkeypatch):
    from governance.maintenance import sweep_orphans

    omni = Omni(config=omni_home)
    _family(omni, tmp_path, "web")
    old, young = _plant_orphans(omni, "web")
    state = omni.state("web")
    report, how = sweep_orphans(omni.store, state, engine="auto", older_than_s=DAY, dry_run=True)
    assert how.startswith("local: auto:") and "below the Spark threshold" in how
    monkeypatch.setenv("OMNI_SPARK_THRESHOLD_BYTES", "0")
    report, how = sweep_orphans(omni.store, state, engine="auto", older_than_s=DAY, dry_run=True)
    assert how.startswith("local:") and "no Spark session" in how
    # a session, but a grace Iceberg's procedure refuses: local, and the reason names the setting
    report, how = sweep_orphans(omni.store, state, engine="auto", spark=lambda: pytest.fail("Spark started"),
                                older_than_s=60, dry_run=True)
    assert how.startswith("local:") and "OMNI_ORPHAN_GRACE_S" in how
    assert report.orphan_files_deleted == len(old) and all(p.exists() for p in old + young)
    with pytest.raises(ConfigError, match="24 hours"):
        from spark_udfs.orphans import orphans_on_spark

        orphans_on_spark(None, "omni", "aidata.web__base", "/nowhere", older_than_s=60)
    report = omni.maintain("web", engine="auto", progress=False)  # the CLI's path: SQLite, so local
    assert report.orphan_engine.startswith("local:") and "SQLite" in report.orphan_engine


@pytest.mark.spark
@pytest.mark.postgres
def test_spark_finds_the_orphans_the_local_sweep_finds_and_nothing_an_old_version_reads(spark, tmp_path):
    from governance.maintenance import maintain, sweep_orphans

    name = "orph_spark"
    omni = Omni(config=spark.config)
    _family(omni, tmp_path, name)
    first = omni.state(name).version
    before = sorted_rows(omni, name)
    omni.compact(name, min_files=1, progress=False)  # the old version's files: reached only by older snapshots
    old, young = _plant_orphans(omni, name)
    state = omni.state(name)
    assert len(old) == len(state.tables) >= 3
    local, how = sweep_orphans(omni.store, state, engine="local", older_than_s=DAY, dry_run=True)
    found, how = sweep_orphans(omni.store, state, engine="spark", spark=lambda: spark.session,
                               older_than_s=DAY, dry_run=True)
    assert how == "spark: requested --engine spark"
    assert found.orphan_files_deleted == local.orphan_files_deleted == len(old)
    assert found.orphan_bytes_freed == local.orphan_bytes_freed == sum(p.stat().st_size for p in old)
    assert all(p.exists() for p in old + young)  # a dry run deletes nothing

    report = maintain(omni.store, name, engine="spark", spark=lambda: spark.session, orphan_grace_s=DAY,
                      progress=False)
    assert report.orphan_engine.startswith("spark:")
    assert report.cleanup.orphans.orphan_files_deleted == len(old)
    assert not any(p.exists() for p in old) and all(p.exists() for p in young)
    # every version still reads, in omni and in Spark
    assert sorted_rows(omni, name) == before and sorted_rows(omni, name, as_of=first) == before
    assert spark.sql(f"SELECT count(*) FROM omni.aidata.{name}")[0][0] == len(before)
