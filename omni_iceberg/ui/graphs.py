"""Pictures of DAGs (backfill plans, lineage): Mermaid text and self-contained SVG.

The SVG is laid out here, in layers as Sugiyama, Tagawa and Toda drew hierarchies, so a
picture needs nothing outside Python (Graphviz would be one more system package for
``make demo``):

- columns: a node sits one column right of its deepest input, so every edge runs left
  to right;
- an edge that spans columns gets a *dummy* in each column it crosses; a dummy takes a
  slot in its column as a node does, so the edge passes through a slot of its own and
  never under a box (the old drawing ran ``parsed_text -> math_recall`` straight under
  the ``detected_lang`` box);
- order within a column: barycentre sweeps down and up, keeping the order with the
  fewest crossings;
- heights: each node's centre as near the mean of its neighbours' centres as its order
  and the gaps allow (per column a least-squares fit under the order, solved exactly by
  pooling adjacent violators);
- edges: straight inside a column (from a box's side to the column's edge, or through
  a dummy's slot) and a curve across the gap between two columns, whose control points
  lie in the gap, so the curve does too. Only edges are drawn in a gap, so no edge
  crosses a box.

Boxes are sized to their text with DejaVu Sans's advance widths: of the fonts
``Helvetica,Arial,sans-serif`` resolves to (Helvetica and Arial, their metric twins
Nimbus Sans and Liberation Sans, DejaVu Sans where a system has nothing else) it is the
widest, so a label fits its box whatever the viewer has. A label may have several lines
(``\\n``); nothing is cut. ``status`` decides a node's colour and the words under it:
``missing`` (will be computed), ``requested`` (asked for, will be computed),
``present`` (already computed) and ``source`` (ingested). Work still to do is drawn in
calm blues, not in alarm red: it is the plan, not an error.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

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
FONT_SIZE = 12
_LINE_H, _PAD = 15, 10
_GAP_X, _GAP_Y, _GAP_DUMMY = 70, 22, 10  # between columns; between boxes; next to a dummy's slot
_TOP, _LEFT = 50, 20

#: DejaVu Sans advance widths of ASCII 32..126, in thousandths of the font size (regular, bold);
#: italic is regular's. Read from the font files matplotlib ships.
_ADVANCE = {
    False: (318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636, 636,
            636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632, 575, 775,
            752, 295, 295, 656, 557, 863, 748, 787, 603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390,
            337, 390, 838, 500, 500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,
            635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838),
    True: (348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365, 696, 696, 696, 696,
           696, 696, 696, 696, 696, 696, 400, 400, 838, 838, 838, 580, 1000, 774, 762, 734, 830, 683, 683, 821,
           837, 372, 372, 775, 637, 995, 837, 850, 733, 850, 770, 720, 682, 812, 774, 1103, 771, 724, 725, 457,
           365, 457, 838, 500, 500, 675, 716, 593, 716, 678, 435, 716, 712, 343, 343, 665, 343, 1042, 712, 687,
           716, 716, 493, 595, 478, 712, 652, 924, 645, 652, 582, 712, 365, 712, 838),
}


def text_width(text: str, bold: bool = False, size: float = FONT_SIZE) -> float:
    """Pixels ``text`` takes in DejaVu Sans at ``size`` px; a character past ASCII counts one em
    (as wide as a CJK glyph, wider than any accented Latin one)."""
    table = _ADVANCE[bold]
    return size / 1000 * sum(table[ord(c) - 32] if 32 <= ord(c) < 127 else 1000 for c in text)


@dataclass(frozen=True)
class Node:
    id: str
    label: str  # lines separated by "\n"; the first is the node's name
    status: str = "present"

    @property
    def lines(self) -> list[str]:
        return self.label.split("\n")


def _mermaid_text(text: str) -> str:
    """Mermaid's own entity codes (``#lt;``), which it turns back into characters itself; '#' first."""
    for ch, code in (("#", "#35;"), ("&", "#amp;"), ("<", "#lt;"), (">", "#gt;"), ('"', "#quot;")):
        text = text.replace(ch, code)
    return text


def to_mermaid(nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    ids = {n.id: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["flowchart LR"]
    if title:
        lines.insert(0, f"%% {title}")
    for n in nodes:
        # the label's own text is escaped; the markup around it (<br/>, <i>) is Mermaid's to render
        status = f"<i>{_mermaid_text(STATUS_TEXT.get(n.status, n.status))}</i>"
        text = "<br/>".join([_mermaid_text(x) for x in n.lines] + [status])
        lines.append(f'  {ids[n.id]}["{text}"]:::{n.status}')
    for a, b in edges:
        lines.append(f"  {ids[a]} --> {ids[b]}")
    for status, (fill, stroke) in COLOURS.items():
        lines.append(f"  classDef {status} fill:{fill},stroke:{stroke},stroke-width:2px")
    return "\n".join(lines) + "\n"


def _box(n: Node) -> tuple[int, int]:
    widths = [text_width(line, bold=i == 0) for i, line in enumerate(n.lines)]
    widths.append(text_width(STATUS_TEXT.get(n.status, n.status)))
    return math.ceil(max(widths)) + 2 * _PAD, (len(n.lines) + 1) * _LINE_H + 2 * _PAD - 2


# ---- layout ------------------------------------------------------------------------------------
@dataclass
class Layout:
    """Boxes (x, y, w, h) by node id; each edge's path as SVG commands; the drawing's size."""

    boxes: dict[str, tuple[int, int, int, int]]
    paths: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, SVG path data)
    width: int = 0
    height: int = 0


def _crossings(upper: list, lower: list, down: dict) -> int:
    at = {v: i for i, v in enumerate(upper)}
    ends = [(at[u], j) for j, v in enumerate(lower) for u in down[v]]
    return sum(1 for i, (a, b) in enumerate(ends) for c, d in ends[i + 1:] if (a - c) * (b - d) < 0)


def _order(layers: list[list], down: dict, up: dict) -> list[list]:
    """Barycentre sweeps; the order with the fewest crossings seen wins."""
    def total(ls: list[list]) -> int:
        return sum(_crossings(ls[i], ls[i + 1], down) for i in range(len(ls) - 1))

    best, best_n = [list(x) for x in layers], total(layers)
    current = [list(x) for x in layers]
    for _ in range(6):
        for rng, nbrs, step in ((range(1, len(current)), down, -1), (range(len(current) - 2, -1, -1), up, 1)):
            for i in rng:
                pos = {v: k for k, v in enumerate(current[i + step])}
                keyed = [(sum(pos[u] for u in nbrs[v]) / len(nbrs[v]) if nbrs[v] else k, k, v)
                         for k, v in enumerate(current[i])]
                current[i] = [v for _, _, v in sorted(keyed, key=lambda t: (t[0], t[1]))]
            n = total(current)
            if n < best_n:
                best, best_n = [list(x) for x in current], n
    return best


def _fit(desired: list[float], weights: list[float], seps: list[float]) -> list[float]:
    """Centres nearest ``desired`` (weighted least squares) keeping order and ``seps`` between neighbours.

    With offsets o (o[0] = 0, o[i] = o[i-1] + seps[i-1]) the centres are z + o for the
    non-decreasing z nearest ``desired - o``: isotonic regression, solved exactly by pooling
    adjacent violators.
    """
    offsets = [0.0]
    for s in seps:
        offsets.append(offsets[-1] + s)
    blocks: list[list[float]] = []  # [weighted sum, weight, count]
    for d, o, w in zip(desired, offsets, weights):
        blocks.append([(d - o) * w, w, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, w2, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += w2
            blocks[-1][2] += c
    z: list[float] = []
    for s, w, c in blocks:
        z += [s / w] * int(c)
    return [a + o for a, o in zip(z, offsets)]


def layout(nodes: list[Node], edges: list[tuple[str, str]]) -> Layout:
    """Where each box and edge goes (module docstring); coordinates in pixels, title space above."""
    graph = nx.DiGraph()
    graph.add_nodes_from(n.id for n in nodes)
    graph.add_edges_from(edges)
    first_seen = {n.id: i for i, n in enumerate(nodes)}
    size = {n.id: _box(n) for n in nodes}
    column: dict[str, int] = {}
    for v in nx.topological_sort(graph):  # the column after the deepest input
        column[v] = max((column[u] + 1 for u in graph.predecessors(v)), default=0)
    layers: list[list] = [[] for _ in range(max(column.values(), default=-1) + 1)]
    for v in sorted(column, key=lambda v: first_seen[v]):
        layers[column[v]].append(v)
    down: dict = {v: [] for v in column}
    up: dict = {v: [] for v in column}
    chains: dict[tuple[str, str], list] = {}
    for a, b in dict.fromkeys(edges):
        chain = [a] + [("dummy", a, b, c) for c in range(column[a] + 1, column[b])] + [b]
        for d in chain[1:-1]:
            layers[d[3]].append(d)
            down[d], up[d] = [], []
        for u, v in zip(chain, chain[1:]):
            down[v].append(u)
            up[u].append(v)
        chains[(a, b)] = chain
    layers = _order(layers, down, up)
    for v in column:  # a box meeting many edges is tall enough to keep their arrowheads apart
        w, h = size[v]
        size[v] = (w, max(h, 12 * max(len(down[v]), len(up[v])) + 12))

    def height(v) -> int:
        return 0 if isinstance(v, tuple) else size[v][1]

    def sep(a, b) -> float:
        gap = _GAP_Y if not isinstance(a, tuple) and not isinstance(b, tuple) else _GAP_DUMMY
        return (height(a) + height(b)) / 2 + gap

    centre: dict = {}
    for layer in layers:
        y = 0.0
        for k, v in enumerate(layer):
            y += 0 if k == 0 else sep(layer[k - 1], v)
            centre[v] = y
    for _ in range(8):  # alternate: pulled by inputs, then by outputs
        for nbrs, order in ((down, layers), (up, layers[::-1])):
            for layer in order:
                desired = [sum(centre[u] for u in nbrs[v]) / len(nbrs[v]) if nbrs[v] else centre[v] for v in layer]
                weights = [4.0 if isinstance(v, tuple) else 1.0 for v in layer]  # long edges stay straight
                seps = [sep(a, b) for a, b in zip(layer, layer[1:])]
                for v, c in zip(layer, _fit(desired, weights, seps)):
                    centre[v] = c
    shift = _TOP - min((centre[v] - height(v) / 2 for v in centre), default=0)
    col_w = [max([size[v][0] for v in layer if not isinstance(v, tuple)] or [40]) for layer in layers]
    col_x = [_LEFT + sum(col_w[:i]) + _GAP_X * i for i in range(len(layers))]
    boxes: dict[str, tuple[int, int, int, int]] = {}
    for v in column:
        w, h = size[v]
        x = col_x[column[v]] + (col_w[column[v]] - w) // 2
        boxes[v] = (x, round(centre[v] + shift - h / 2), w, h)

    def ports(v, others: list) -> dict:
        """Where the edges to ``others`` meet box ``v``: spread down its side in their order."""
        _, y, _, h = boxes[v]
        ranked = sorted(others, key=lambda o: centre[o])
        return {o: y + 6 + (h - 12) * (k + 1) / (len(ranked) + 1) for k, o in enumerate(ranked)}

    out_port = {v: ports(v, up[v]) for v in graph.nodes}
    in_port = {v: ports(v, down[v]) for v in graph.nodes}
    paths = []
    for (a, b), chain in chains.items():
        ax, _, aw, _ = boxes[a]
        y = out_port[a][chain[1]]
        i = column[a]
        d = [f"M{ax + aw:.1f},{y:.1f}"] + ([f"L{col_x[i] + col_w[i]:.1f},{y:.1f}"] if ax + aw < col_x[i] + col_w[i] else [])
        for v in chain[1:]:
            x0, x1 = col_x[i] + col_w[i], col_x[i + 1]
            ny = in_port[v][chain[chain.index(v) - 1]] if v == b else centre[v] + shift
            mid = (x0 + x1) / 2
            d.append(f"C{mid:.1f},{y:.1f} {mid:.1f},{ny:.1f} {x1:.1f},{ny:.1f}")
            i += 1
            end = boxes[b][0] if v == b else col_x[i] + col_w[i]
            if end > x1:
                d.append(f"L{end:.1f},{ny:.1f}")
            y = ny
        paths.append((a, b, " ".join(d)))
    width = (col_x[-1] + col_w[-1] + _LEFT) if layers else 2 * _LEFT
    height_px = max((y + h for _, y, _, h in boxes.values()), default=_TOP)
    return Layout(boxes, paths, width, height_px)


def to_svg(nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    by_id = {n.id: n for n in nodes}
    lay = layout(nodes, edges)
    legend_w = sum(34 + math.ceil(text_width(STATUS_TEXT[s])) + 16 for s in COLOURS)
    width = max(lay.width, _LEFT + legend_w, _LEFT + math.ceil(text_width(title, bold=True, size=15)) + _LEFT)
    height = lay.height + 22 + 40
    esc = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Helvetica,Arial,sans-serif" font-size="{FONT_SIZE}">',
           '<defs><marker id="arrow" markerWidth="10" markerHeight="8" refX="10" refY="4" orient="auto">'
           '<path d="M0,0 L10,4 L0,8 z" fill="#555"/></marker></defs>',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{_LEFT}" y="28" font-size="15" font-weight="bold">{esc(title)}</text>']
    for a, b, d in lay.paths:
        out.append(f'<path class="edge" data-source="{esc(a)}" data-target="{esc(b)}" d="{d}" fill="none" '
                   f'stroke="#555" stroke-width="1.4" marker-end="url(#arrow)"/>')
    for node_id, (x, y, w, h) in lay.boxes.items():
        n = by_id[node_id]
        fill, stroke = COLOURS.get(n.status, COLOURS["present"])
        out.append(f'<g class="{esc(n.status)}">')
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="7" fill="{fill}" stroke="{stroke}" '
                   f'stroke-width="2"/>')
        for i, line in enumerate(n.lines):
            weight = ' font-weight="bold"' if i == 0 else ""
            out.append(f'<text x="{x + _PAD}" y="{y + _PAD + 10 + i * _LINE_H}"{weight}>{esc(line)}</text>')
        out.append(f'<text x="{x + _PAD}" y="{y + _PAD + 10 + len(n.lines) * _LINE_H}" fill="{stroke}" '
                   f'font-style="italic">{esc(STATUS_TEXT.get(n.status, n.status))}</text>')
        out.append("</g>")
    ly, lx = height - 24, _LEFT
    for status, (fill, stroke) in COLOURS.items():
        out.append(f'<rect x="{lx}" y="{ly}" width="14" height="14" fill="{fill}" stroke="{stroke}"/>')
        out.append(f'<text x="{lx + 20}" y="{ly + 12}">{STATUS_TEXT[status]}</text>')
        lx += 34 + math.ceil(text_width(STATUS_TEXT[status])) + 16
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_picture(path: str, nodes: list[Node], edges: list[tuple[str, str]], title: str = "") -> str:
    """Write ``.svg`` or Mermaid (``.mmd``/``.md``) depending on the file name; return the path."""
    text = to_svg(nodes, edges, title) if path.endswith(".svg") else to_mermaid(nodes, edges, title)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path
