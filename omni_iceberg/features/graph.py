"""The feature dependency graph: an edge producer -> consumer for every input a feature
reads that another feature outputs. Registration checks it for cycles; the planner walks
it for the minimal closure."""

from __future__ import annotations

from typing import Iterable

import networkx as nx

from omni_iceberg.features.spec import FeatureDefinition


def producers_of(definitions: Iterable[FeatureDefinition]) -> dict[str, str]:
    """Output column -> the name of the feature producing it."""
    return {o.name: d.name for d in definitions for o in d.outputs}


def feature_graph(definitions: dict[str, FeatureDefinition]) -> nx.DiGraph:
    producers = producers_of(definitions.values())
    graph = nx.DiGraph()
    for d in definitions.values():
        graph.add_node(d.name)
        for inp in d.inputs:
            if inp in producers:
                graph.add_edge(producers[inp], d.name, column=inp)
    return graph
