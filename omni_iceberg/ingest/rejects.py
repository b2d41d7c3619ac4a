"""Which rejected records belong to a batch: those of the attempt that committed it.

Every attempt of ``omni submit`` writes its rejects with its own ``submit_id`` before it
tries to commit (so a refused batch still shows why). A batch committed on a second
attempt must not also count the first attempt's rejects: the committing attempt's id is
in the logical version's summary (``omni.submit-id``), and only its rows are returned
for a committed batch. For a batch that never committed, every attempt's rejects are
returned: they are all there is to explain it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext import system_tables
from catalog_ext.contract import check_batch_name
from catalog_ext.store import FamilyStore

SUBMIT_ID_KEY = "omni.submit-id"


def committed_attempts(store: FamilyStore, namespace: str, name: str) -> dict[str, str]:
    """batch -> submit id of the attempt that committed it (batches committed before ids were recorded are absent)."""
    out: dict[str, str] = {}
    for version in store.log(namespace, name):
        batch, submit_id = version.summary.get("omni.batch"), version.summary.get(SUBMIT_ID_KEY)
        if version.operation == "ingest" and batch and submit_id:
            out[batch] = submit_id
    return out


def batch_rejects(store: FamilyStore, namespace: str, name: str, batch: str | None = None) -> pa.Table:
    """Rejects of ``namespace.name`` (optionally one batch), without those of failed attempts.

    >>> # batch_rejects(store, "aidata", "web", "b1").num_rows == the batch's ``rejected`` count
    """
    if batch:
        check_batch_name(batch)  # it is interpolated into the filter expression below
    flt = f"logical_table == '{namespace}.{name}'" + (f" and batch == '{batch}'" if batch else "")
    rows = system_tables.read_rows(store.catalog, system_tables.REJECTS, flt)
    committed = committed_attempts(store, namespace, name)
    if not committed or rows.num_rows == 0:
        return rows
    pairs = pa.array([f"{b}\x00{s}" for b, s in committed.items()], pa.string())
    key = pc.binary_join_element_wise(rows.column("batch"), rows.column("submit_id"), "\x00")
    committed_batch = pc.is_in(rows.column("batch"), value_set=pa.array(list(committed), pa.string()))
    keep = pc.or_(pc.invert(committed_batch), pc.is_in(key, value_set=pairs))
    return rows.filter(keep)
