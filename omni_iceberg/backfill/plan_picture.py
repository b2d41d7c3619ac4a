"""The DAG picture of a backfill plan: columns feed features; what will be computed vs what is there.

A built-in producer the backfill registers first is a feature node like any other, with
a line saying so; only columns no feature produces (ingested ones) are source nodes.
"""

from __future__ import annotations

from omni_iceberg.backfill.planner import BackfillPlan
from omni_iceberg.ui.graphs import Node

#: batches named in a box before "and N more"
MAX_BATCHES_SHOWN = 4


def _batches(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_BATCHES_SHOWN])
    more = len(names) - MAX_BATCHES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def plan_graph(plan: BackfillPlan) -> tuple[list[Node], list[tuple[str, str]]]:
    nodes: dict[str, Node] = {}
    edges: list[tuple[str, str]] = []
    produced = {o: f.name for f in plan.features.values() for o in f.outputs}
    for f in plan.features.values():
        status = ("requested" if f.requested else "missing") if f.batches else "present"
        lines = [f"{f.name}@{f.version}", f"-> {', '.join(f.outputs)}"]
        if f.registers:  # a built-in producer this backfill registers first
            lines.append("built-in, registered by this backfill")
        if f.batches:
            lines.append(f"on {f.engine.upper()} ({f.route_reason})")
            lines.append(f"batches to compute: {_batches(f.batches)}")
        if f.present:
            lines.append(f"computed already: {_batches(f.present)}")
        nodes[f"f:{f.name}"] = Node(f"f:{f.name}", "\n".join(lines), status)
        for inp in f.inputs:
            if inp in produced:
                edges.append((f"f:{produced[inp]}", f"f:{f.name}"))
            else:
                nodes.setdefault(f"c:{inp}", Node(f"c:{inp}", inp, "source"))
                edges.append((f"c:{inp}", f"f:{f.name}"))
    return list(nodes.values()), edges
