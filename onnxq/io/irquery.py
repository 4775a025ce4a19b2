"""Small questions about an onnx_ir graph, asked by handlers, passes and verification alike (and the one rule for
a fresh name)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

__all__ = ["producer", "attribute", "constant_array", "sole_reader", "unique_name", "Body", "bodies", "model_names",
           "OUTER_NAMES"]

# graph.meta key: the names a body's own rewrite must not take (every name of the model around it).
OUTER_NAMES = "onnxq.outer_names"


def producer(value: ir.Value | None, op_type: str) -> ir.Node | None:
    """The node of this op type that produces the value, or None."""
    node = None if value is None else value.producer()
    return node if node is not None and node.op_type == op_type else None


def attribute(node: ir.Node, name: str, default: float | int = 0) -> float | int:
    """An attribute's value, or the default when the node does not set it."""
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's constant (initializer or Constant node) as an array, or None."""
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def sole_reader(node: ir.Node) -> ir.Node | None:
    """The one node that reads the node's first output, or None (several readers, none, or a graph output)."""
    output = node.outputs[0]
    uses = list(output.uses())
    return uses[0][0] if len(uses) == 1 and not output.is_graph_output() else None


def unique_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, … — the first not in `taken`, which it joins."""
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


class Body:
    """A subgraph: an If branch, a Loop or Scan body (at any depth), and where it is, in words."""

    def __init__(self, graph: ir.Graph, owner: ir.Node, attribute_name: str) -> None:
        self.graph, self.owner, self.attribute = graph, owner, attribute_name

    @property
    def where(self) -> str:
        return f"{self.owner.op_type} {self.owner.name!r} {self.attribute}"


def bodies(graph: ir.Graph) -> list[Body]:
    """Every subgraph under the graph, outer ones first."""
    found = []
    for node in graph:
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                found.append(Body(attr.value, node, attr.name))
                found += bodies(attr.value)
            elif attr.type == ir.AttributeType.GRAPHS:
                for i, sub in enumerate(attr.value):
                    found.append(Body(sub, node, f"{attr.name}[{i}]"))
                    found += bodies(sub)
    return found


def model_names(model: ir.Model) -> set[str]:
    """Every node, value and initializer name in the model, its subgraphs' included."""
    names = set()
    for graph in (model.graph, *(body.graph for body in bodies(model.graph))):
        names.update(graph.initializers)
        names.update(v.name for v in graph.inputs if v.name)
    for node in model.graph.all_nodes():
        names.add(node.name or "")
        names.update(v.name for v in node.outputs if v.name)
    return names
