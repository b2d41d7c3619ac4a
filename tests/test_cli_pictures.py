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
    width = int(svg.split('<rect x="20" y="50" width="')[1].split('"')[0])
    assert width >= 120 * 7
