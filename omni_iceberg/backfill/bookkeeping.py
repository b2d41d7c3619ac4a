"""The records every engine writes for one (feature, batch) unit of work.

A unit ends with a checkpoint - one snapshot on the run's staging branch labelled
with :data:`UNIT_PROPERTY` and the unit's counts - and its failed records become rows
of ``omni_sys.errors``. Both engines build these records here, so a run resumed or
audited later reads the same labels and columns whichever engine wrote them.

>>> class S: feature, batch, rows, errors, reused, started_ms, finished_ms, attempt = "f", "b", 3, 1, 0, 10, 20, 1
>>> checkpoint_properties(S())["omni.unit"]
'f/b'
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from catalog_ext.contract import ID_COLUMN

#: snapshot property naming the unit a checkpoint finished: ``<feature>/<batch>``
UNIT_PROPERTY = "omni.unit"
#: snapshot property with the attempt of the run that computed the unit (a rerun resuming it keeps it)
UNIT_ATTEMPT_PROPERTY = "omni.unit-attempt"


def unit_label(feature: str, batch: str) -> str:
    return f"{feature}/{batch}"


def checkpoint_properties(stats: Any) -> dict[str, str]:
    """Snapshot properties of the checkpoint that finishes one unit (``stats``: a ``UnitStats``)."""
    return {
        UNIT_PROPERTY: unit_label(stats.feature, stats.batch), "omni.unit-rows": str(stats.rows),
        "omni.unit-errors": str(stats.errors), "omni.unit-reused": str(stats.reused),
        "omni.unit-started": str(stats.started_ms), "omni.unit-finished": str(stats.finished_ms),
        UNIT_ATTEMPT_PROPERTY: str(stats.attempt)}


def error_row(*, run_id: str, logical_table: str, feature: str, version: str, record_id: str, batch: str,
              exception_class: str, message: str, traceback_digest: str, attempt: int,
              failed_at: datetime) -> dict[str, Any]:
    """One row of ``omni_sys.errors``: a record a feature failed on."""
    return {"run_id": run_id, "logical_table": logical_table, "feature": feature, "version": version,
            ID_COLUMN: record_id, "batch": batch, "exception_class": exception_class, "message": message,
            "traceback_digest": traceback_digest, "attempt": attempt, "failed_at": failed_at}
