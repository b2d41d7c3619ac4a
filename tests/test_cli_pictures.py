"""Lineage text and pictures, and the plan picture: readable, uncut, and calm about planned work."""

import json

import pytest

from omni_iceberg.api import Omni
from omni_iceberg.backfill.plan_picture import plan_graph
from omni_iceberg.ui.graphs import Node, to_mermaid, to_svg


@pytest.fixture
def web(tmp_path):
    api = Omni(home=str(tmp_path))
    api.create_table("web")
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"text": f"<p>page {i} with some words</p>"}) + "\n" for i in range(5)))
    api.submit("web", [str(src)], "cc", field_map=["text=raw_data"], progress=False)
    api.register_builtins("web", ["html_parser", "text_length"])
    return api


def test_lineage_text_wraps_and_shows_batches_with_rows(web):
    web.backfill("web", ["text_length"], isolation="inline", progress=False)
    tree = web.lineage("web", "text_length")
    wide = tree.render(width=200).splitlines()
    assert wide[0].startswith("text_length  <- text_length@")
    assert wide[1].strip("│ ").startswith("cc: 5 rows, 0 errors (run ")
    assert wide[2].startswith("└─ ProcessedData.parsed_text  <- html_parser@")
    narrow = tree.render(width=40).splitlines()
    assert all(len(line) <= 40 for line in narrow) and len(narrow) > len(wide)
    words = lambda lines: " ".join(x.strip("│└├─ ") for x in lines).split()  # noqa: E731
    assert words(narrow) == words(wide)  # wrapped, nothing lost
    nodes, edges = tree.graph()
    label = next(n.label for n in nodes if n.id == "text_length")
    assert "cc: 5 rows, 0 errors" in label
    svg = to_svg(nodes, edges, "lineage")
    for n in nodes:
        for line in n.label.split("\n"):
            assert f">{line.replace('<', '&lt;').replace('>', '&gt;')}</text>" in svg  # whole, never cut


def test_plan_picture_says_will_be_computed_not_error(web):
    plan = web.plan("web", ["text_length"], has_gpu=False)
    nodes, edges = plan_graph(plan)
    status = {n.label.split("@")[0]: n.status for n in nodes}
    assert status == {"html_parser": "missing", "text_length": "requested", "RawData.raw_data": "source",
                      "RawData.content_type": "source"}
    svg = to_svg(nodes, edges, "plan")
    assert svg.count("will be computed") >= 2 and "error" not in svg.lower()
    assert "#c0392b" not in svg and "batches to compute: cc" in svg
    assert "requested: will be computed" in to_mermaid(nodes, edges)


def test_long_labels_get_wide_boxes():
    long = "x" * 120
    svg = to_svg([Node("a", long, "source"), Node("b", "b\nsecond line", "present")], [("a", "b")])
    assert f">{long}</text>" in svg
    boxes, _ = svg_geometry(svg)
    assert boxes[long][2] >= 120 * 7 and not _unfitted(svg)


# ---- geometry of a rendered SVG: what a reader sees, computed from the file ------------------------

SVG_NS = "{http://www.w3.org/2000/svg}"


def _points(d: str) -> list[tuple[float, float]]:
    """An SVG path's M/L/C commands as a polyline (each cubic sampled at 32 points)."""
    import re

    out: list[tuple[float, float]] = []
    for cmd, args in re.findall(r"([MLC])([^MLC]*)", d):
        nums = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", args)]
        pts = list(zip(nums[::2], nums[1::2]))
        if cmd in "ML":
            out += pts
        else:
            (x0, y0), ((x1, y1), (x2, y2), (x3, y3)) = out[-1], pts
            for k in range(1, 33):
                t = k / 32
                a, b, c, e = (1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t ** 2, t ** 3
                out.append((a * x0 + b * x1 + c * x2 + e * x3, a * y0 + b * y1 + c * y2 + e * y3))
    return out


def svg_geometry(svg: str):
    """Node boxes by id (x, y, w, h), found as each ``<g>``'s rect, and every edge as a polyline.

    An edge is a ``<path>`` or a ``<line>``: the test reads what is drawn, whatever element draws it.
    """
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg)
    boxes = {}
    for g in root.iter(f"{SVG_NS}g"):
        rect = g.find(f"{SVG_NS}rect")
        name = g.find(f"{SVG_NS}text").text
        boxes[name] = tuple(float(rect.get(k)) for k in ("x", "y", "width", "height"))
    edges = [_points(p.get("d")) for p in root.iter(f"{SVG_NS}path") if p.get("stroke")]
    edges += [[(float(ln.get("x1")), float(ln.get("y1"))), (float(ln.get("x2")), float(ln.get("y2")))]
              for ln in root.iter(f"{SVG_NS}line")]
    return boxes, edges


def _crosses_inside(p, q, box, margin: float = 0.5) -> bool:
    """Whether segment p-q runs through the inside of ``box`` (Liang-Barsky clipping); touching its edge is not."""
    x, y, w, h = box
    lo_x, hi_x, lo_y, hi_y = x + margin, x + w - margin, y + margin, y + h - margin
    t0, t1 = 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for pk, qk in ((-dx, p[0] - lo_x), (dx, hi_x - p[0]), (-dy, p[1] - lo_y), (dy, hi_y - p[1])):
        if pk == 0:
            if qk < 0:
                return False
        else:
            t = qk / pk
            t0, t1 = (max(t0, t), t1) if pk < 0 else (t0, min(t1, t))
    return t0 < t1


def _ends_at(point, box, side: str) -> bool:
    x, y, w, h = box
    edge_x = x + w if side == "right" else x
    return abs(point[0] - edge_x) <= 1 and y <= point[1] <= y + h


def edges_through_boxes(svg: str) -> list[str]:
    """Every (edge, box) where the edge passes under a box, and edges that do not start and end on a box."""
    boxes, edges = svg_geometry(svg)
    faults = []
    for line in edges:
        source = [n for n, b in boxes.items() if _ends_at(line[0], b, "right")]
        target = [n for n, b in boxes.items() if _ends_at(line[-1], b, "left")]
        if not source or not target:
            faults.append(f"an edge from {line[0]} to {line[-1]} does not run from a box's right side to a "
                          "box's left side")
            continue
        for name, box in boxes.items():
            if any(_crosses_inside(p, q, box) for p, q in zip(line, line[1:])):
                faults.append(f"{source[0]} -> {target[0]} runs under {name}")
    return faults


def _unfitted(svg: str) -> list[str]:
    """Text lines that a real font (DejaVu Sans, the widest of Helvetica's usual stand-ins) draws past their box."""
    import xml.etree.ElementTree as ET

    from matplotlib import font_manager, ft2font

    fonts = {}
    for bold in (False, True):
        path = font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans",
                                                                 weight="bold" if bold else "normal"))
        fonts[bold] = ft2font.FT2Font(path)
        fonts[bold].set_size(12, 72)
    out = []
    for g in ET.fromstring(svg).iter(f"{SVG_NS}g"):
        x, y, w, h = (float(g.find(f"{SVG_NS}rect").get(k)) for k in ("x", "y", "width", "height"))
        for t in g.iter(f"{SVG_NS}text"):
            font = fonts[t.get("font-weight") == "bold"]
            font.set_text(t.text, 0.0, flags=ft2font.LoadFlags.NO_HINTING)
            width = (font.get_bitmap_offset()[0] + font.get_width_height()[0]) / 64
            tx, ty = float(t.get("x")), float(t.get("y"))
            ascent, descent = 12 * 1901 / 2048, 12 * 483 / 2048
            if not (x < tx and tx + width < x + w and y < ty - ascent and ty + descent < y + h):
                out.append(f"{t.text!r} ({tx:.0f}..{tx + width:.0f}) outside its box ({x:.0f}..{x + w:.0f})")
    return out


def _overlapping(svg: str) -> list[tuple[str, str]]:
    boxes, _ = svg_geometry(svg)
    items = list(boxes.items())
    return [(a, b) for i, (a, (ax, ay, aw, ah)) in enumerate(items) for b, (bx, by, bw, bh) in items[i + 1:]
            if ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah]


def test_tour_lineage_picture_has_no_edge_under_a_box_and_every_label_fits(web, tmp_path):
    """#36: parsed_text -> math_recall ran under the detected_lang box, out of sight."""
    from omni_iceberg.cli import main

    web.register_builtins("web", ["detected_lang", "math_recall"])
    web.backfill("web", ["math_recall"], isolation="inline", progress=False)
    picture = tmp_path / "lineage.svg"
    assert main(["--home", str(tmp_path), "lineage", "web.math_recall", "--picture", str(picture),
                 "--no-progress"]) == 0
    svg = picture.read_text()
    boxes, edges = svg_geometry(svg)
    assert {"math_recall", "detected_lang", "ProcessedData.parsed_text", "RawData.raw_data"} <= set(boxes)
    parsed, lang, math = boxes["ProcessedData.parsed_text"], boxes["detected_lang"], boxes["math_recall"]
    assert parsed[0] + parsed[2] < lang[0] and lang[0] + lang[2] < math[0]  # three columns, left to right
    long_edge = [e for e in edges if _ends_at(e[0], parsed, "right") and _ends_at(e[-1], math, "left")]
    assert len(long_edge) == 1  # the edge that skips a column is drawn, and is seen
    assert not any(_crosses_inside(p, q, lang) for p, q in zip(long_edge[0], long_edge[0][1:]))
    assert len(edges) == len(set(web.lineage("web", "math_recall").graph()[1]))
    assert edges_through_boxes(svg) == [] and _unfitted(svg) == [] and _overlapping(svg) == []


def test_long_edges_wide_labels_and_fan_in_are_laid_out_clear():
    wide = "WWW MMM %%% @@@ " * 4
    nodes = [Node("src", "RawData.raw_data", "source"), Node("a", f"a\n{wide}", "present"),
             Node("b", "b\nsmall", "missing"), Node("c", "c", "missing"), Node("d", "d\nÜber → straße", "missing"),
             Node("e", "e", "requested"), Node("side", "side input", "source")]
    edges = [("src", "a"), ("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("src", "e"), ("src", "d"),
             ("a", "e"), ("side", "c"), ("side", "e"), ("b", "e")]
    svg = to_svg(nodes, edges, "a plan")
    boxes, drawn = svg_geometry(svg)
    assert len(drawn) == len(edges) and set(boxes) == {n.label.split("\n")[0] for n in nodes}
    assert edges_through_boxes(svg) == [] and _unfitted(svg) == [] and _overlapping(svg) == []


def test_mermaid_keeps_its_markup_and_escapes_the_labels():
    text = to_mermaid([Node("p", 'parsed_text\n<- html_parser@1 "v2" #3 & more', "present"),
                       Node("m", "math_recall", "requested")], [("p", "m")], "lineage")
    assert '<i>already computed</i>' in text and "<i>requested: will be computed</i>" in text
    assert "&lt;i&gt;" not in text and "&lt;" not in text
    assert 'n0["parsed_text<br/>#lt;- html_parser@1 #quot;v2#quot; #35;3 #amp; more<br/><i>already computed</i>"]' \
        in text
