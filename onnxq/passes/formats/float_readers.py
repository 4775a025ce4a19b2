"""A Conv / ConvTranspose / Gemm kept float (excluded, by the fallback, unplanned) after a requantized output reads
its own DequantizeLinear of it, per channel.

Behind the shared per-tensor DequantizeLinear, ORT's WeightBiasQuantization quantizes such a node's weight (per
tensor) and bias itself, and with a quantized reader after it runs it as QLinearConv / QGemm: a node the report
says is float ran int8 (tests/passes/test_float_readers.py: three QLinearConv for two quantized Convs). The same
scale repeated along the channels computes the same values, and ORT leaves the node float. ORT moves a
DequantizeLinear past MaxPool, Reshape, Transpose, … (its QDQ propagation), so a float product behind those counts
too. Used by passes.forms.qdq for each requantized output.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import attribute
from onnxq.numerics import QParams
from onnxq.passes.graph.builder import GraphBuilder

__all__ = ["reaches_float_product", "channelwise_dequantized"]

# ORT's WeightBiasQuantization quantizes these when their input is a per-tensor DequantizeLinear's output, and its
# QDQ propagation moves a DequantizeLinear past the others (onnxruntime/core/optimizer/qdq_transformer).
_WEIGHT_BIAS_QUANTIZED = frozenset({"Conv", "ConvTranspose", "Gemm"})
_DEQUANTIZE_MOVES_PAST = frozenset({"MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice"})


def reaches_float_product(node: ir.Node, planned: frozenset[ir.Node]) -> bool:
    """Whether node, reading a DequantizeLinear's output at input 0, is — or passes it on to — a float Conv /
    ConvTranspose / Gemm with a constant weight, which ORT would quantize itself."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in _WEIGHT_BIAS_QUANTIZED:
        weight = node.inputs[1] if len(node.inputs) > 1 else None
        return node not in planned and weight is not None and ir.convenience.get_const_tensor(weight) is not None
    if node.op_type in _DEQUANTIZE_MOVES_PAST:
        return any(index == 0 and reaches_float_product(user, planned)
                   for output in node.outputs for user, index in output.uses())
    return False


def channelwise_dequantized(builder: GraphBuilder, quantized: ir.Value, qparams: QParams, plan: NodePlan,
                             after: ir.Node) -> ir.Value | None:
    """A DequantizeLinear of `quantized` (the plan's requantized output) whose scale and zero point repeat the
    per-tensor ones along its channel axis, or None where neither its shape nor the product's weight gives it."""
    found = _output_channels(plan)
    if found is None:
        return None
    axis, channels = found
    base = plan.output.name or "activation"
    scale = builder.initializer(f"{base}_channel_scale", np.full(channels, qparams.scale, dtype=np.float32))
    zero_point = builder.initializer(f"{base}_channel_zero_point",
                                     np.full(channels, qparams.zero_point, dtype=qparams.dtype))
    node = builder.node("DequantizeLinear", [quantized, scale, zero_point], f"{base}_DequantizeLinear_per_channel",
                        None, attributes={"axis": axis})
    node.outputs[0].type, node.outputs[0].shape = ir.TensorType(ir.DataType.FLOAT), plan.output.shape
    builder.graph.insert_after(after, node)
    return node.outputs[0]


def _output_channels(plan: NodePlan) -> tuple[int, int] | None:
    """(axis, size) of the channels of a product's output (the same after the Relu / Clip it may be read through):
    axis 1 of a Conv's, the last of a MatMul's or Gemm's; the size from the output's shape, else the weight's."""
    node = plan.node
    axis = 1 if node.op_type in ("Conv", "ConvTranspose") else -1
    shape = plan.output.shape
    if shape is not None and len(shape) > 1 and isinstance(shape[axis], int):
        return axis, shape[axis]
    weight = node.inputs[1].shape if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if weight is None or not all(isinstance(d, int) for d in weight) or len(weight) < 2:
        return None
    if node.op_type == "Conv":
        return axis, weight[0]
    if node.op_type == "ConvTranspose":
        return axis, weight[1] * attribute(node, "group", 1)
    transposed = node.op_type == "Gemm" and attribute(node, "transB", 0)
    return axis, weight[0] if transposed else weight[-1]
