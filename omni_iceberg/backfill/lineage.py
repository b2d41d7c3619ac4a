"""Lineage: which features, versions, inputs and runs made a column - as tables and events.

The facts live in ``omni_sys.lineage`` (one row per output column and batch per run)
and ``omni_sys.runs``; this module turns them into the upstream tree of a column, a
picture of it, and OpenLineage run events with the column-lineage facet.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog_ext import system_tables
from catalog_ext.contract import split_qualified
from catalog_ext.redact import redact_mapping
from omni_iceberg.ui.graphs import Node

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

OPENLINEAGE_PRODUCER = "https://omni-iceberg.invalid/omni-iceberg"
OPENLINEAGE_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


@dataclass
class LineageNode:
    column: str
    producer: str | None  # feature@version, None for ingested columns
    code_hash: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)  # per batch: run, rows, errors, snapshots
    inputs: list["LineageNode"] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "producer": self.producer, "code_hash": self.code_hash,
                "runs": self.runs, "inputs": [i.to_dict() for i in self.inputs]}

    def render(self, width: int | None = None) -> str:
        """The tree as text: one line per column, one line per batch under it, wrapped to ``width``.

        Example::

            web.math_recall  <- math_recall@h1a2b
              cc: 120 rows, 0 errors (run bf-1c63, version 7)
            └─ ProcessedData.parsed_text  <- html_parser@b405
                 cc: 120 rows, 0 errors (run bf-1c63, version 7)
               └─ RawData.raw_data  (ingested)
        """
        import shutil

        width = width or max(60, shutil.get_terminal_size((100, 24)).columns)
        lines: list[str] = []
        self._render(lines, "", "", width)
        return "\n".join(lines)

    def _render(self, lines: list[str], first: str, rest: str, width: int) -> None:
        import textwrap

        made = f"  <- {self.producer}" if self.producer else "  (ingested)"
        detail = rest + ("│  " if self.inputs else "   ")
        lines += textwrap.wrap(self.column + made, width, initial_indent=first, subsequent_indent=detail + "    ",
                               break_on_hyphens=False) or [first + self.column]
        for r in self.runs:
            reused = f", {r['reused']} reused" if r.get("reused") else ""
            text = (f"{r['batch']}: {r['rows']} rows, {r['errors']} errors{reused} "
                    f"(run {r['run_id']}, version {r['logical_version']})")
            lines += textwrap.wrap(text, width, initial_indent=detail, subsequent_indent=detail + "    ",
                                   break_on_hyphens=False)
        for i, child in enumerate(self.inputs):
            last = i == len(self.inputs) - 1
            child._render(lines, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), width)

    def graph(self, max_batches: int = 6) -> tuple[list[Node], list[tuple[str, str]]]:
        """Nodes (column, producer, one line per batch with its rows) and edges input -> column."""
        nodes: dict[str, Node] = {}
        edges: list[tuple[str, str]] = []

        def walk(n: LineageNode) -> None:
            lines = [n.column]
            if n.producer:
                lines.append(f"<- {n.producer}")
                lines += [f"{r['batch']}: {r['rows']} rows, {r['errors']} errors (v{r['logical_version']})"
                          for r in n.runs[:max_batches]]
                if len(n.runs) > max_batches:
                    lines.append(f"... and {len(n.runs) - max_batches} more batches")
            nodes[n.column] = Node(n.column, "\n".join(lines), "present" if n.producer else "source")
            for child in n.inputs:
                walk(child)
                edges.append((child.column, n.column))

        walk(self)
        return list(nodes.values()), sorted(set(edges))


def lineage_tree(ctx: OmniContext, name: str, column: str) -> LineageNode:
    ns, table = split_qualified(name)
    state = ctx.state(f"{ns}.{table}")
    if not state.has_column(column):
        from catalog_ext.errors import SchemaConflictError

        raise SchemaConflictError(f"no column {column!r} in {ns}.{table}")
    rows = system_tables.read_rows(ctx.catalog, system_tables.LINEAGE,
                                   f"logical_table == '{ns}.{table}'").to_pylist()

    def node(path: str, seen: frozenset) -> LineageNode:
        producer = state.producer_of(path)
        if producer is None:
            return LineageNode(path, None)
        runs = [r for r in rows if r["output_column"] == path and r["feature"] == producer.name
                and r["version"] == producer.version]
        latest: dict[str, dict[str, Any]] = {}
        for r in sorted(runs, key=lambda r: r["finished_at"]):
            latest[r["batch"]] = {"batch": r["batch"], "run_id": r["run_id"], "rows": r["rows"],
                                  "errors": r["errors"], "reused": r["reused"], "logical_version": r["logical_version"],
                                  "input_snapshots": json.loads(r["input_snapshots"]),
                                  "output_snapshot": r["output_snapshot"], "engine": r["engine"]}
        d = json.loads(producer.definition)
        out = LineageNode(path, producer.key, producer.code_hash, [latest[b] for b in sorted(latest)])
        for inp in d["inputs"]:
            if inp not in seen:
                out.inputs.append(node(inp, seen | {inp}))
        return out

    return node(column, frozenset({column}))


def openlineage_events(ctx: OmniContext, name: str, run_id: str | None = None) -> list[dict[str, Any]]:
    """OpenLineage COMPLETE/FAIL run events with the columnLineage facet, one per backfill run."""
    ns, table = split_qualified(name)
    ident = f"{ns}.{table}"
    runs = system_tables.read_rows(ctx.catalog, system_tables.RUNS, f"logical_table == '{ident}'").to_pylist()
    lineage = system_tables.read_rows(ctx.catalog, system_tables.LINEAGE, f"logical_table == '{ident}'").to_pylist()
    events = []
    for run in runs:
        if run_id and run["run_id"] != run_id:
            continue
        rows = [r for r in lineage if r["run_id"] == run["run_id"]]
        fields: dict[str, Any] = {}
        inputs: dict[str, None] = {}
        for r in rows:
            for inp in json.loads(r["input_columns"]):
                inputs.setdefault(inp["column"], None)
            fields[r["output_column"]] = {
                "inputFields": [{"namespace": "omni", "name": ident, "field": i["column"],
                                 "transformations": [{"type": "DIRECT" if i["producer"] == "ingest" else "INDIRECT",
                                                      "subtype": "TRANSFORMATION",
                                                      "description": f"{r['feature']}@{r['version']}"}]}
                                for i in json.loads(r["input_columns"])]}
        events.append({
            "eventType": "COMPLETE" if run["status"] == "succeeded" else "FAIL",
            "eventTime": run["finished_at"].isoformat(),
            "producer": OPENLINEAGE_PRODUCER, "schemaURL": OPENLINEAGE_SCHEMA,
            "run": {"runId": str(uuid.uuid5(uuid.NAMESPACE_URL, run["run_id"] + str(run["started_at"]))),
                    "facets": {"omni": {"_producer": OPENLINEAGE_PRODUCER, "_schemaURL": OPENLINEAGE_SCHEMA,
                                        "omniRunId": run["run_id"], "rows": run["rows"], "errors": run["errors"],
                                        "logicalVersion": run["logical_version"]}}},
            "job": {"namespace": "omni", "name": f"backfill:{ident}:{run['features']}"},
            "inputs": [{"namespace": "omni", "name": ident}] if inputs else [],
            "outputs": [{"namespace": "omni", "name": ident, "facets": {"columnLineage": {
                "_producer": OPENLINEAGE_PRODUCER,
                "_schemaURL": "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json",
                "fields": fields}}}],
        })
    return events


def emit(events: list[dict[str, Any]], target: str) -> int:
    """Write events as JSON lines to a file, or POST each to an OpenLineage HTTP endpoint."""
    if target.startswith(("http://", "https://")):
        import urllib.request

        for ev in events:
            req = urllib.request.Request(target, data=json.dumps(redact_mapping(ev), default=str).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - user-given endpoint
                resp.read()
        return len(events)
    with open(target, "a", encoding="utf-8") as f:
        for ev in events:
            f.write(json.dumps(redact_mapping(ev), default=str) + "\n")
    return len(events)
