"""Every node gets a unique name at load: sensitivity, fallback, recipes, placement and the exclude options all key
nodes by name, and hand-built or older exported graphs leave names empty or repeat them. Named nodes keep their
names (the first of a repeated name keeps it); the rest are named after their op type and position, and each
rename is recorded so that the report can map a generated name back to the node in the input file."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import onnx_ir as ir

from onnxq.io.irquery import unique_name

__all__ = ["RenamedNode", "name_nodes", "name_body_values"]


@dataclasses.dataclass(frozen=True)
class RenamedNode:
    name: str  # the name onnxq gave it
    original: str | None  # None: it had none; else the repeated name it had
    op_type: str
    graph: str  # "main", or the body's place: "<node name>.<attribute>"
    position: int  # index of the node in that graph, as in the input file

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def name_nodes(model: ir.Model) -> tuple[RenamedNode, ...]:
    """Give unnamed and repeated nodes unique names, across the main graph, its bodies and functions."""
    taken = {node.name for _, graph in _all_graphs(model) for node in graph if node.name}
    seen: set[str] = set()
    renamed = []
    for label, graph in _all_graphs(model):
        for position, node in enumerate(graph):
            if node.name and node.name not in seen:
                seen.add(node.name)
                continue
            original = node.name or None
            node.name = unique_name(original or f"{node.op_type}_{position}", taken)
            seen.add(node.name)
            renamed.append(RenamedNode(node.name, original, node.op_type, label, position))
    return tuple(renamed)


def name_body_values(model: ir.Model) -> tuple[str, ...]:
    """Give each value a subgraph defines a name no other graph of the model uses: sibling bodies may repeat a name
    (an If's two branches each computing "act"), and calibration, ranges and plans key values by name — the
    branch the data ran would lend its range to the other. The main graph's names, and the first body's, stay;
    a body's values are positional to the node around it, so renaming changes nothing it computes. Returns the
    repeated names."""
    taken: set[str] = set()
    for _, graph in _all_graphs(model, functions=False):
        taken.update(v.name for v in (*graph.inputs, *(o for node in graph for o in node.outputs)) if v.name)
        taken.update(graph.initializers)
    seen: set[str] = set()
    repeated = []
    for _, graph in _all_graphs(model, functions=False):
        for value in (*graph.inputs, *(o for node in graph for o in node.outputs), *graph.initializers.values()):
            if not value.name:
                continue
            if value.name in seen and not value.is_initializer():
                repeated.append(value.name)
                value.name = unique_name(value.name, taken)
            seen.add(value.name)
    return tuple(repeated)


def _all_graphs(model: ir.Model, functions: bool = True) -> Iterator[tuple[str, ir.Graph | ir.Function]]:
    """(label, graph) for the main graph, each body inside it (breadth first) and each function."""
    pending: list[tuple[str, ir.Graph]] = [("main", model.graph)]
    while pending:
        label, graph = pending.pop(0)
        yield label, graph
        for node in graph:
            for attribute in node.attributes.values():
                if attribute.type == ir.AttributeType.GRAPH:
                    pending.append((f"{node.name or node.op_type}.{attribute.name}", attribute.value))
                elif attribute.type == ir.AttributeType.GRAPHS:
                    pending.extend((f"{node.name or node.op_type}.{attribute.name}[{i}]", g)
                                   for i, g in enumerate(attribute.value))
    for key, function in model.functions.items() if functions else ():
        yield f"function {key[1]}", function
