"""Dynamic Conv: DynamicQuantizeLinear → ConvInteger (uint8 × int8, int32) → Cast → Mul by the activation scale
times each output channel's weight scale → Add the float bias — onnxruntime.quantization's dynamic Conv pattern.
ORT's ConvInteger does not saturate on AVX2 (measured: tests/handlers/test_conv.py), so its weights need no pair
limit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.handlers.plan import NodePlan
from onnxq.passes.graph.builder import GraphBuilder, replace_node
from onnxq.passes.forms.registry import RewriteInputs, rewrite_form

__all__ = []


@rewrite_form("conv_integer", stage=0)
def _conv_integer(model: ir.Model, plans: Sequence[NodePlan], inputs: RewriteInputs) -> dict[str, str]:
    builder = GraphBuilder(model.graph, inputs.config.weights)
    quantized_inputs: dict[ir.Value, tuple[ir.Value, ...]] = {}
    for plan in plans:
        node, spec = plan.node, plan.weights[0]
        x = node.inputs[0]
        if x not in quantized_inputs:
            quantize = builder.node("DynamicQuantizeLinear", [x], f"{x.name}_DynamicQuantizeLinear", node,
                                    num_outputs=3)
            quantize.outputs[0].type = ir.TensorType(ir.DataType.UINT8)
            quantized_inputs[x] = tuple(quantize.outputs)
        x_q, x_scale, x_zero_point = quantized_inputs[x]
        weight = builder.quantized_weight(node.inputs[1], spec.axis)
        base = node.name or "Conv"
        integer = builder.node("ConvInteger", [x_q, weight.quantized, x_zero_point], f"{base}_ConvInteger", node,
                               attributes=dict(node.attributes))
        as_float = builder.node("Cast", [integer.outputs[0]], f"{base}_Cast", node,
                                attributes={"to": ir.DataType.FLOAT})
        rank = len(weight.quantized.shape)
        channel_scale = builder.initializer(f"{base}_weight_scale", _per_channel(weight.qparams.scale, rank))
        scale = builder.node("Mul", [x_scale, channel_scale], f"{base}_scale_Mul", node)
        out = builder.node("Mul", [as_float.outputs[0], scale.outputs[0]], f"{base}_output_Mul", node).outputs[0]
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            bias = ir.convenience.get_const_tensor(node.inputs[2])
            if bias is not None:
                bias_value = builder.initializer(f"{base}_bias", _per_channel(bias.numpy(), rank))
            else:
                shape = builder.initializer(f"{base}_bias_shape", np.array([1, -1] + [1] * (rank - 2), np.int64))
                bias_value = builder.node("Reshape", [node.inputs[2], shape], f"{base}_bias_Reshape",
                                          node).outputs[0]
            out = builder.node("Add", [out, bias_value], f"{base}_bias_Add", node).outputs[0]
        replace_node(model.graph, node, out)
    RemoveUnusedNodesPass()(model)
    return {}


def _per_channel(values: np.ndarray, rank: int) -> np.ndarray:
    """A per-output-channel vector (or a scalar) shaped to broadcast over [N, M, *spatial]."""
    values = np.asarray(values, dtype=np.float32)
    return values if values.ndim == 0 else values.reshape(1, -1, *([1] * (rank - 2)))
