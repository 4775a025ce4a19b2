"""A float16 model's arithmetic as a float32 model that rounds every float16 value explicitly: what a machine
without the GPU runs to check a model written for one (targets.cuda).

ORT's CPU cannot stand in by itself: it runs a float16 operator it has no kernel for by casting to float32 and back,
and then removes the casts it inserted between two such operators, so intermediate values are never rounded (a
product of 1e5 stays finite where CUDA stores inf; tests/passes/test_float16.py). Here every value the model holds
in float16 is made float32 and followed by Cast(float16) → Cast(float32), casts ORT keeps; float16 constants become
their exact float32 values. The arithmetic between is float32, as CUDA's kernels accumulate (cuBLAS products, the
reductions of Softmax and the norms); each node's output is rounded as CUDA stores it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.passes.graph.builder import GraphBuilder

__all__ = ["holds_float16", "float16_emulation"]

_HALF, _FLOAT = ir.DataType.FLOAT16, ir.DataType.FLOAT


def holds_float16(model: ir.Model) -> bool:
    """Whether the main graph computes anything in float16."""
    return any(v.dtype == _HALF for node in model.graph for v in node.outputs)


def float16_emulation(model: ir.Model) -> ir.Model:
    """A float32 copy of the model that rounds each of its float16 values to float16 where it is made."""
    emulation = model.clone()
    graph = emulation.graph
    builder = GraphBuilder(graph)
    for name, value in list(graph.initializers.items()):
        if value.const_value is not None and value.const_value.dtype == _HALF:
            wide = value.const_value.numpy().astype(np.float32)
            value.const_value = ir.tensor(wide, name=name)
            value.type = ir.TensorType(_FLOAT)
    for node in list(graph):
        if node.op_type == "Cast" and node.attributes["to"].as_int() == _HALF.value:
            node.attributes["to"] = ir.AttrInt64("to", _FLOAT.value)
        for value in node.outputs:
            if value.dtype == _HALF:
                _round_after(graph, builder, node, value)
    return emulation


def _round_after(graph: ir.Graph, builder: GraphBuilder, node: ir.Node, value: ir.Value) -> None:
    """The value becomes float32, rounded to float16 and back before anything reads it."""
    value.type = ir.TensorType(_FLOAT)
    uses = list(value.uses())
    narrow = builder.node("Cast", [value], f"{value.name}_round", None, attributes={"to": _HALF.value})
    wide = builder.node("Cast", [narrow.outputs[0]], f"{value.name}_rounded", None, attributes={"to": _FLOAT.value})
    graph.insert_after(node, [narrow, wide])
    narrow.outputs[0].type = ir.TensorType(_HALF)
    wide.outputs[0].type, wide.outputs[0].shape = ir.TensorType(_FLOAT), value.shape
    for user, index in uses:
        user.replace_input_with(index, wide.outputs[0])
    if value.is_graph_output():
        outputs = graph.outputs
        outputs[outputs.index(value)] = wide.outputs[0]
        name = value.name
        value.name = builder.unique(f"{name}_unrounded")
        wide.outputs[0].name = name
