"""A small family to run the rules' docstring examples on (no catalog needed).

``aidata.web``: a base table holding ``RawData.raw_data``, feature table ``f1``
holding ``quality`` (double) and ``f2`` holding ``lang`` (string); two batches.
"""

from __future__ import annotations

from catalog_ext.family import (
    Batch, FamilyState, LogicalColumn, LogicalTable, PhysicalColumn, PhysicalTable, PhysicalTableGroup,
)


def example_state() -> FamilyState:
    return FamilyState(
        version=3, operation="ingest", committed_ms=1,
        table=LogicalTable(namespace="aidata", name="web"),
        columns=(
            LogicalColumn(path="_ai_unique_id_", type="string", kind="key"),
            LogicalColumn(path="_ai_append_name_", type="string", kind="key"),
            LogicalColumn(path="RawData.raw_data", type="string", kind="stage"),
            LogicalColumn(path="ProcessedData.parsed_text", type="string", kind="stage"),
            LogicalColumn(path="quality", type="double", kind="feature"),
            LogicalColumn(path="lang", type="string", kind="feature"),
        ),
        groups=(PhysicalTableGroup(name="base"), PhysicalTableGroup(name="cpu")),
        tables=(
            PhysicalTable(key="base", identifier="aidata.web__base", group="base", snapshot_id=10),
            PhysicalTable(key="f1", identifier="aidata.web__f1", group="cpu", snapshot_id=20, role="feature"),
            PhysicalTable(key="f2", identifier="aidata.web__f2", group="cpu", snapshot_id=30, role="feature"),
        ),
        physical_columns=(
            PhysicalColumn(table="base", name="RawData.raw_data", logical="RawData.raw_data"),
            PhysicalColumn(table="f1", name="quality", logical="quality"),
            PhysicalColumn(table="f2", name="lang", logical="lang"),
        ),
        batches=(Batch(name="cc", rows=60, read=60, duplicates=0, rejected=0, version=1, committed_ms=1),
                 Batch(name="wiki", rows=40, read=40, duplicates=0, rejected=0, version=2, committed_ms=1)),
    )


def load_example(namespace: str, name: str, version: int | None = None) -> FamilyState:
    """``FamilyStore.load`` for the one example table: anything else does not exist."""
    from catalog_ext.errors import NoSuchLogicalTableError

    if (namespace, name) != ("aidata", "web"):
        raise NoSuchLogicalTableError(f"no logical table {namespace}.{name}")
    return example_state()


def example_context(sql: str, *, until: str | None = None, through: str | None = None,
                    row_counts: dict[str, int] | None = None):
    """Run the rules on ``sql`` over :func:`example_state`, stopping before rule ``until`` (or after ``through``).

    ``row_counts`` (physical table key -> rows) stands in for snapshot metadata.
    """
    from omni_iceberg.explore.rules import RULES
    from omni_iceberg.explore.rules.context import QueryContext

    counts = row_counts or {}
    ctx = QueryContext(sql=sql, load_state=load_example, known_tables=lambda: ["aidata.web"],
                       row_count=lambda t: counts.get(t.key))
    for rule in RULES:
        if rule.__name__ == until:
            break
        ctx = rule(ctx)
        if rule.__name__ == through:
            break
    return ctx
