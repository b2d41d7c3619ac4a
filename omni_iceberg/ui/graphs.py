"""Pictures of DAGs (backfill plans, lineage): Mermaid text and self-contained SVG.

No Graphviz needed: nodes are laid out in columns by topological generation. A label
may have several lines (``\\n``); boxes grow to fit them, so nothing is cut. ``status``
decides a node's colour and the words under it: ``missing`` (will be computed),
``requested`` (asked for, will be computed), ``present`` (already computed) and
``source`` (ingested). Work still to do is drawn in calm blues, not in alarm red:
it is the plan, not an error.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import networkx as nx

COLOURS = {
    "missing": ("#e3effd", "#2563eb"),
    "requested": ("#ede7fb", "#6d28d9"),
    "present": ("#dff5e1", "#27ae60"),
    "source": ("#eef1f5", "#4b5563"),
}
#: what each status says in a picture
STATUS_TEXT = {
    "missing": "will be computed",
    "requested": "requested: will be computed",
    "present": "already computed",
    "source": "ingested",
}
_CHAR_W, _LINE_H, _PAD = 7, 15, 10  # 12px Helvetica: ~7px per character on average


@dataclass(frozen=True)
class Node:
    id: str
    label: str  # lines separated by "\n"; the first is the node's name
    status: str = "present"

    @property
    def lines(self) -> list[str]:
        return self.label.split("\n")


def to_mermaid(nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    ids = {n.id: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["flowchart LR"]
    if title:
        lines.insert(0, f"%% {title}")
    for n in nodes:
        text = "<br/>".join(html.escape(x, quote=False).replace('"', "'")
                            for x in n.lines + [f"<i>{STATUS_TEXT.get(n.status, n.status)}</i>"])
        lines.append(f'  {ids[n.id]}["{text}"]:::{n.status}')
    for a, b in edges:
        lines.append(f"  {ids[a]} --> {ids[b]}")
    for status, (fill, stroke) in COLOURS.items():
        lines.append(f"  classDef {status} fill:{fill},stroke:{stroke},stroke-width:2px")
    return "\n".join(lines) + "\n"


def _box(n: Node) -> tuple[int, int]:
    text = n.lines + [STATUS_TEXT.get(n.status, n.status)]
    return max(len(x) for x in text) * _CHAR_W + 2 * _PAD, len(text) * _LINE_H + 2 * _PAD - 2


def to_svg(nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    graph = nx.DiGraph()
    graph.add_nodes_from(n.id for n in nodes)
    graph.add_edges_from(edges)
    by_id = {n.id: n for n in nodes}
    layers = [sorted(layer) for layer in nx.topological_generations(graph)]
    gap_x, gap_y, top, left = 60, 22, 50, 20
    size = {i: _box(by_id[i]) for i in by_id}
    pos: dict[str, tuple[int, int]] = {}
    x = left
    height = top
    for layer in layers:
        col_w = max(size[i][0] for i in layer)
        y = top
        for node_id in layer:
            pos[node_id] = (x, y)
            y += size[node_id][1] + gap_y
        height = max(height, y)
        x += col_w + gap_x
    legend_w = sum(30 + len(STATUS_TEXT[s]) * _CHAR_W + 20 for s in COLOURS)
    width = max(x, left + legend_w, left + len(title) * 8 + 20)
    height += 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Helvetica,Arial,sans-serif" font-size="12">',
           '<defs><marker id="arrow" markerWidth="10" markerHeight="8" refX="9" refY="4" orient="auto">'
           '<path d="M0,0 L10,4 L0,8 z" fill="#555"/></marker></defs>',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="28" font-size="15" font-weight="bold">{html.escape(title)}</text>']
    for a, b in edges:
        (x1, y1), (x2, y2) = pos[a], pos[b]
        out.append(f'<line x1="{x1 + size[a][0]}" y1="{y1 + size[a][1] // 2}" x2="{x2}" y2="{y2 + size[b][1] // 2}" '
                   f'stroke="#555" stroke-width="1.4" marker-end="url(#arrow)"/>')
    for node_id, (x, y) in pos.items():
        n = by_id[node_id]
        w, h = size[node_id]
        fill, stroke = COLOURS.get(n.status, COLOURS["present"])
        out.append(f'<g class="{html.escape(n.status)}">')
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="7" fill="{fill}" stroke="{stroke}" '
                   f'stroke-width="2"/>')
        for i, line in enumerate(n.lines):
            weight = ' font-weight="bold"' if i == 0 else ""
            out.append(f'<text x="{x + _PAD}" y="{y + _PAD + 10 + i * _LINE_H}"{weight}>{html.escape(line)}</text>')
        out.append(f'<text x="{x + _PAD}" y="{y + _PAD + 10 + len(n.lines) * _LINE_H}" fill="{stroke}" '
                   f'font-style="italic">{STATUS_TEXT.get(n.status, html.escape(n.status))}</text>')
        out.append("</g>")
    ly, lx = height - 24, left
    for status, (fill, stroke) in COLOURS.items():
        out.append(f'<rect x="{lx}" y="{ly}" width="14" height="14" fill="{fill}" stroke="{stroke}"/>')
        out.append(f'<text x="{lx + 20}" y="{ly + 12}">{STATUS_TEXT[status]}</text>')
        lx += 30 + len(STATUS_TEXT[status]) * _CHAR_W + 20
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_picture(path: str, nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    """Write ``.svg`` or Mermaid (``.mmd``/``.md``) depending on the file name; return the path."""
    text = to_svg(nodes, edges, title) if path.endswith(".svg") else to_mermaid(nodes, edges, title)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
