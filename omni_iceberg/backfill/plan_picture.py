"""The DAG picture of a backfill plan: columns feed features; missing vs present nodes."""

from __future__ import annotations

from omni_iceberg.backfill.planner import BackfillPlan
from omni_iceberg.ui.graphs import Node


def plan_graph(plan: BackfillPlan) -> tuple[list[Node], list[tuple[str, str]]]:
    nodes: dict[str, Node] = {}
    edges: list[tuple[str, str]] = []
    produced = {o: f.name for f in plan.features.values() for o in f.outputs}
    for f in plan.features.values():
        status = ("requested" if f.requested else "missing") if f.batches else "present"
        label = f"{f.name}@{f.version}" + (f" [{f.engine}]" if f.batches else "")
        nodes[f"f:{f.name}"] = Node(f"f:{f.name}", label, status)
        for inp in f.inputs:
            if inp in produced:
                edges.append((f"f:{produced[inp]}", f"f:{f.name}"))
            else:
                nodes.setdefault(f"c:{inp}", Node(f"c:{inp}", inp, "source"))
                edges.append((f"c:{inp}", f"f:{f.name}"))
    return list(nodes.values()), edges
