"""Pictures of DAGs (backfill plans, lineage): Mermaid text and self-contained SVG.

No Graphviz needed: nodes are laid out in columns by topological generation.
``status`` colours a node: ``missing`` (will be computed), ``present`` (already
computed), ``source`` (ingested column), ``requested`` (asked for and missing).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import networkx as nx

COLOURS = {
    "missing": ("#fde2e1", "#c0392b"),
    "requested": ("#fcd0a1", "#d35400"),
    "present": ("#dff5e1", "#27ae60"),
    "source": ("#e8eef7", "#34495e"),
}


@dataclass(frozen=True)
class Node:
    id: str
    label: str
    status: str = "present"


def to_mermaid(nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    ids = {n.id: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["flowchart LR"]
    if title:
        lines.insert(0, f"%% {title}")
    for n in nodes:
        label = n.label.replace('"', "'")
        lines.append(f'  {ids[n.id]}["{label}"]:::{n.status}')
    for a, b in edges:
        lines.append(f"  {ids[a]} --> {ids[b]}")
    for status, (fill, stroke) in COLOURS.items():
        lines.append(f"  classDef {status} fill:{fill},stroke:{stroke},stroke-width:2px")
    return "\n".join(lines) + "\n"


def to_svg(nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    graph = nx.DiGraph()
    graph.add_nodes_from(n.id for n in nodes)
    graph.add_edges_from(edges)
    layers = list(nx.topological_generations(graph))
    box_w, box_h, gap_x, gap_y, top = 270, 44, 60, 22, 50
    pos: dict[str, tuple[int, int]] = {}
    for col, layer in enumerate(layers):
        for row, node_id in enumerate(sorted(layer)):
            pos[node_id] = (20 + col * (box_w + gap_x), top + row * (box_h + gap_y))
    width = 40 + len(layers) * (box_w + gap_x)
    height = top + 40 + max((len(layer) for layer in layers), default=1) * (box_h + gap_y) + 30
    by_id = {n.id: n for n in nodes}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Helvetica,Arial,sans-serif" font-size="12">',
           '<defs><marker id="arrow" markerWidth="10" markerHeight="8" refX="9" refY="4" orient="auto">'
           '<path d="M0,0 L10,4 L0,8 z" fill="#555"/></marker></defs>',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="20" y="28" font-size="15" font-weight="bold">{html.escape(title)}</text>']
    for a, b in edges:
        (x1, y1), (x2, y2) = pos[a], pos[b]
        out.append(f'<line x1="{x1 + box_w}" y1="{y1 + box_h // 2}" x2="{x2}" y2="{y2 + box_h // 2}" '
                   f'stroke="#555" stroke-width="1.4" marker-end="url(#arrow)"/>')
    for node_id, (x, y) in pos.items():
        n = by_id[node_id]
        fill, stroke = COLOURS.get(n.status, COLOURS["present"])
        label = n.label if len(n.label) <= 40 else n.label[:39] + "…"
        out.append(f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="7" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="2"/>')
        out.append(f'<text x="{x + 10}" y="{y + 18}">{html.escape(label)}</text>')
        out.append(f'<text x="{x + 10}" y="{y + 34}" fill="{stroke}" font-size="10">{n.status}</text>')
    ly = height - 22
    for i, (status, (fill, stroke)) in enumerate(COLOURS.items()):
        out.append(f'<rect x="{20 + i * 120}" y="{ly}" width="14" height="14" fill="{fill}" stroke="{stroke}"/>')
        out.append(f'<text x="{40 + i * 120}" y="{ly + 12}">{status}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_picture(path: str, nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    """Write ``.svg`` or Mermaid (``.mmd``/``.md``) depending on the file name; return the path."""
    text = to_svg(nodes, edges, title) if path.endswith(".svg") else to_mermaid(nodes, edges, title)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
