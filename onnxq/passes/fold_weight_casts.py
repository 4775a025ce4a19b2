"""Weights reached through Identity or Cast of a constant (exporters write `W → Identity` for a shared weight, and
`W16 → Cast(to=float)` for a float16 checkpoint) made plain float32 initializers before planning, so that every mode
and format sees a constant weight. The folded model is a clone; the model as given stays the reference the
verification compares with (a Cast's rounding is the same numpy cast ONNX specifies)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.irquery import attribute
from onnxq.passes.builder import GraphBuilder

__all__ = ["folded_weight_casts"]


def folded_weight_casts(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone with each Identity / Cast-to-float32 of a constant replaced by a float32 initializer, a note), or
    (the model itself, None) when there is none."""
    if not any(_foldable(node) for node in model.graph):
        return model, None
    folded = model.clone()
    builder = GraphBuilder(folded.graph)
    count = 0
    for node in list(folded.graph):
        if _foldable(node):
            array = np.asarray(ir.convenience.get_const_tensor(node.inputs[0]).numpy()).astype(np.float32)
            value = builder.initializer(f"{node.outputs[0].name or 'weight'}_folded", array)
            node.outputs[0].replace_all_uses_with(value)
            folded.graph.remove(node, safe=True)
            count += 1
    return folded, f"{count} Identity / Cast node(s) of a constant weight folded into float32 initializers"


def _foldable(node: ir.Node) -> bool:
    """An Identity, or a Cast to float32, of a constant (not a graph input) whose output is not a graph output."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Identity", "Cast") or not node.inputs:
        return False
    source = node.inputs[0]
    if source is None or source.is_graph_input() or node.outputs[0].is_graph_output():
        return False
    tensor = ir.convenience.get_const_tensor(source)
    if tensor is None or tensor.size == 0 or len(tensor.shape) == 0:  # a weight or a bias, not a scalar
        return False
    if node.op_type == "Identity":
        return tensor.dtype == ir.DataType.FLOAT
    return attribute(node, "to", 0) == ir.DataType.FLOAT and tensor.dtype in (
        ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE, ir.DataType.FLOAT)
