"""A subgraph rewritten as a model of its own: the same passes, planned and applied per graph.

The body is wrapped, for the rewrite only, in a model with the outer model's opsets (a GraphProto has none of its
own) and with every name of the outer model reserved, so that what the body's rewrite adds never takes an outer
name (ONNX forbids a subgraph to shadow one)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import onnx_ir as ir

from onnxq.io.irquery import OUTER_NAMES, bodies, model_names

__all__ = ["body_as_model", "drop_unread_initializers"]


@contextlib.contextmanager
def body_as_model(model: ir.Model, graph: ir.Graph) -> Iterator[ir.Model]:
    """The body as a model while the block runs; its opsets and meta are restored after."""
    saved = dict(graph.opset_imports)
    graph.opset_imports.update(model.opset_imports)
    graph.meta[OUTER_NAMES] = model_names(model)
    try:
        yield ir.Model(graph, ir_version=model.ir_version)
    finally:
        graph.opset_imports.clear()
        graph.opset_imports.update(saved)
        graph.meta.pop(OUTER_NAMES, None)


def drop_unread_initializers(model: ir.Model) -> None:
    """Initializers no node reads any more, in every graph: a body's rewrite replaces the outer graph's float
    weights it read, which the body's pass cannot remove (they are not its own), and which would stay in the file."""
    for graph in (model.graph, *(body.graph for body in bodies(model.graph))):
        for name, value in list(graph.initializers.items()):
            if not value.uses() and not value.is_graph_output() and not value.is_graph_input():
                del graph.initializers[name]
