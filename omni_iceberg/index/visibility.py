"""Which writer runs a reader at one logical version may see, from the family's pins.

Index entries are written BEFORE the logical commit, so the index always holds some
entries no reader may see yet (a run in progress) or ever (a crashed run, the loser
of a race). They are told apart without any "activation" write after the commit - a
step a crash could skip - by the physical tables themselves:

* every data file an omni writer adds is committed in a snapshot whose summary names
  its run (``omni.submit-id`` for ingest, ``omni.run-id`` for backfill and governance;
  a rebase after a lost race re-commits the same files with the same summary);
* a logical version pins one snapshot per physical table;
* so the runs visible at that version are exactly the runs named along the ancestry of
  the pinned snapshot. A crashed or losing writer's snapshot is never pinned, hence
  never in any pinned ancestry: its entries stay invisible forever. A losing writer
  deletes its own (:mod:`omni_iceberg.index.staged`); a crashed one's are ``pending`` in
  ``verify`` for the staging grace period, then dangling, which a plain ``rebuild`` sweeps.

Retention (:mod:`governance.retention`) expires snapshots, which cuts ancestries: the
oldest kept snapshot loses its parent. Before it does, it records in the table property
:data:`EXPIRED_RUNS_PROPERTY` the runs of the history being cut, keyed by the kept
snapshot where the walk now stops, in the same table commit as the expiry; the walk
continues with that record, so the index stays authoritative after expiry.

Snapshot metadata is immutable, so the answer for (table, snapshot) is cached for the
life of the process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

RUN_PROPERTIES = ("omni.run-id", "omni.submit-id")
#: JSON ``{"<snapshot id>": {"runs": [runs of its expired ancestry, oldest first],
#: "problems": [why that ancestry could not be fully named]}, ...}``
EXPIRED_RUNS_PROPERTY = "omni.index.expired-runs"
_CACHE: dict[tuple[str, int], "TableHistory"] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class TableHistory:
    """The data-changing runs in the ancestry of one pinned snapshot, oldest first."""

    table: str
    snapshot_id: int | None
    runs: tuple[str, ...]
    #: reasons the index cannot describe this snapshot at all (then lookups scan)
    problems: tuple[str, ...] = ()


def run_id_of(snapshot: Any) -> str:
    """The run that made ``snapshot``: its omni run property, else ``snapshot-<id>``.

    Snapshots written by other tools (Spark jobs, maintenance procedures) carry no
    omni property; they are their own run, which only a rebuild can cover.
    """
    props = snapshot.summary.additional_properties if snapshot.summary else {}
    for key in RUN_PROPERTIES:
        if props.get(key):
            return str(props[key])
    return f"snapshot-{snapshot.snapshot_id}"


def _count(props: dict[str, str], key: str) -> int:
    try:
        return int(props.get(key, "0"))
    except ValueError:
        return 0


def changes_data(snapshot: Any) -> bool:
    props = snapshot.summary.additional_properties if snapshot.summary else {}
    return any(_count(props, k) for k in ("added-data-files", "deleted-data-files", "added-delete-files",
                                          "removed-delete-files"))


def expired_runs(table: Any) -> dict[int, dict[str, list[str]]]:
    """The record retention left: kept snapshot id -> runs (and problems) of the ancestry cut below it."""
    import json

    raw = table.metadata.properties.get(EXPIRED_RUNS_PROPERTY)
    if not raw:
        return {}
    try:
        return {int(k): {"runs": list(v.get("runs", [])), "problems": list(v.get("problems", []))}
                for k, v in json.loads(raw).items()}
    except (ValueError, TypeError, AttributeError):
        return {}  # unreadable: a cut parent is then reported as a problem, as without a record


def ancestry_runs(table: Any, snapshot_id: int | None, records: dict[int, dict[str, list[str]]] | None = None,
                  identifier: str | None = None) -> tuple[list[str], list[str]]:
    """(runs oldest first, problems) along the ancestry of ``snapshot_id``, through recorded cuts."""
    records = expired_runs(table) if records is None else records
    runs: list[str] = []
    problems: list[str] = []
    identifier = identifier or ".".join(table.name())
    snap = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    if snapshot_id is not None and snap is None:
        problems.append(f"snapshot {snapshot_id} of {identifier} is gone (expired)")
    while snap is not None:
        props = snap.summary.additional_properties if snap.summary else {}
        if changes_data(snap):
            runs.append(run_id_of(snap))
            if _count(props, "added-delete-files"):
                problems.append(f"snapshot {snap.snapshot_id} of {identifier} added row-level delete files, "
                                "which the index does not model")
        parent = snap.parent_snapshot_id
        below = table.snapshot_by_id(parent) if parent is not None else None
        if below is None and snap.snapshot_id in records:
            runs.extend(reversed(records[snap.snapshot_id]["runs"]))  # runs is newest first until the end
            problems.extend(records[snap.snapshot_id]["problems"])
        elif parent is not None and below is None:
            problems.append(f"the history of {identifier} before snapshot {parent} was expired, so the runs "
                            "that wrote its oldest files cannot be named")
        snap = below
    return list(reversed(runs)), problems


def history(catalog: Any, identifier: str, snapshot_id: int | None, table: Any = None) -> TableHistory:
    """Runs visible in ``identifier`` at ``snapshot_id`` (cached; ``table`` saves a load)."""
    if snapshot_id is None:
        return TableHistory(identifier, None, ())
    key = (identifier, snapshot_id)
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    table = table if table is not None else catalog.load_table(identifier)
    runs, problems = ancestry_runs(table, snapshot_id, identifier=identifier)
    result = TableHistory(identifier, snapshot_id, tuple(dict.fromkeys(runs)), tuple(problems))
    with _LOCK:
        _CACHE[key] = result
    return result
