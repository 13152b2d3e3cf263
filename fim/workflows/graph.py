"""The shape of a workflow: its edges, and a Mermaid flowchart of them (`fim graph`).

A node's incoming edges are its `needs` plus, for a branch target, the edge from the
node that names it (a condition's `then`/`else`: `NodeType.branches`). The engine uses the
same edges to decide what runs and what is skipped, so the picture and the behaviour
cannot disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fim.config.schema import WorkflowDecl

EdgeLabel = str
"""`needs`, or the branch a node's `branches()` names (`then`, `else`)."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: EdgeLabel = "needs"


def edges(decl: WorkflowDecl) -> list[Edge]:
    """Every edge of the DAG, in declaration order, without duplicates."""
    result: list[Edge] = []
    seen: set[Edge] = set()

    def add(edge: Edge) -> None:
        if edge not in seen:
            seen.add(edge)
            result.append(edge)

    for node_id, node in decl.nodes.items():
        for need in node.needs:
            add(Edge(need, node_id))
        for label, _field, targets in node.branches():
            for target in targets:
                add(Edge(node_id, target, label))
    return result


def incoming(decl: WorkflowDecl) -> dict[str, list[Edge]]:
    """Edges into each node (only edges between declared nodes)."""
    into: dict[str, list[Edge]] = {node_id: [] for node_id in decl.nodes}
    for edge in edges(decl):
        if edge.target in into and edge.source in decl.nodes:
            into[edge.target].append(edge)
    return into


# --------------------------------------------------------------------------- mermaid

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def _mermaid_id(node_id: str) -> str:
    return "n_" + _UNSAFE.sub("_", node_id)


def _escape(text: str) -> str:
    for char, entity in (("&", "#amp;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(char, entity)
    return text


def _label(text: str) -> str:
    return f'"{text}"'


def _shape(decl: WorkflowDecl, node_id: str) -> str:
    """The node's box: its type's bracket pair around its id and `graph_label()`."""
    node = decl.nodes[node_id]
    text = f"{_escape(node_id)}<br/>{_escape(node.graph_label())}"
    return node.shape.format(_label(text))


def mermaid(decl: WorkflowDecl, name: str = "") -> str:
    """A Mermaid flowchart: `inputs` and `outputs` as implicit start and end, condition
    nodes as diamonds with `then`/`else` edges, human nodes as parallelograms."""
    lines = ["flowchart TD"]
    if name:
        lines.insert(0, f"%% workflow {name}")
    lines.append('  inputs(["inputs"])')
    for node_id in decl.nodes:
        lines.append(f"  {_mermaid_id(node_id)}{_shape(decl, node_id)}")
    lines.append('  outputs(["outputs"])')
    into = incoming(decl)
    has_outgoing = {e.source for es in into.values() for e in es}
    for node_id, node_edges in into.items():
        if not node_edges:
            lines.append(f"  inputs --> {_mermaid_id(node_id)}")
    for edge in edges(decl):
        if edge.source not in decl.nodes or edge.target not in decl.nodes:
            continue
        arrow = "-->" if edge.label == "needs" else f"-- {edge.label} -->"
        lines.append(f"  {_mermaid_id(edge.source)} {arrow} {_mermaid_id(edge.target)}")
    for node_id in decl.nodes:
        if node_id not in has_outgoing:
            lines.append(f"  {_mermaid_id(node_id)} --> outputs")
    lines.append("  classDef human fill:#fff4d6,stroke:#d49a00")
    humans = [_mermaid_id(n) for n, node in decl.nodes.items() if node.type == "human"]
    if humans:
        lines.append(f"  class {','.join(humans)} human")
    return "\n".join(lines) + "\n"
