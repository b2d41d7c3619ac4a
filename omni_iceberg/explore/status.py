"""``omni status``: what a logical table holds and where, at one version."""

from __future__ import annotations

from typing import Any

from catalog_ext.family import FamilyState


def table_status(catalog: Any, state: FamilyState) -> dict[str, Any]:
    tables = []
    for t in state.tables:
        snap = catalog.load_table(t.identifier).snapshot_by_id(t.snapshot_id) if t.snapshot_id else None
        summary = snap.summary.additional_properties if snap is not None and snap.summary else {}
        tables.append({
            "identifier": t.identifier, "key": t.key, "group": t.group, "role": t.role,
            "snapshot_id": t.snapshot_id,
            "columns": [pc.name for pc in state.columns_of_table(t.key)],
            "files": int(summary.get("total-data-files", 0)),
            "bytes": int(summary.get("total-files-size", 0)),
            "records": int(summary.get("total-records", 0)),
        })
    return {
        "logical_table": state.table.identifier,
        "logical_version": state.version,
        "operation": state.operation,
        "committed_ms": state.committed_ms,
        "id_mode": state.table.id_mode,
        "bucket_count": state.table.bucket_count,
        "rows": sum(b.rows for b in state.batches),
        "batches": [b.model_dump() for b in state.batches],
        "columns": [
            {"path": c.path, "type": c.type, "kind": c.kind, "stage": c.stage, "producer": c.producer,
             "physical": [f"{state.physical_table(p.table).identifier}.{p.name}" for p in state.physical_columns_of(c.path)]}
            for c in state.columns
        ],
        "physical_tables": tables,
    }
