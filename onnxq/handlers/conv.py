"""Conv (1-D, 2-D, 3-D; grouped, depthwise, dilated): per-output-channel weights (axis 0), int32 bias, and in static
mode a quantized output, so that ORT fuses DequantizeLinear → Conv → QuantizeLinear into QLinearConv.

The quantized output is the Conv's own, or that of a Relu / Clip(min 0) that alone reads it: its calibrated range
then starts at 0, its uint8 zero point is 0, and ORT drops the activation into the QLinearConv (ReluQuantFusion,
ClipQuantFusion) — as onnxruntime.quantization does. Dynamic mode leaves Conv float unless asked (dynamic_conv:
ConvInteger, passes/insert_conv_integer.py, measured 5.6-7.7x slower than float Conv on an AVX2 EPYC); weight-only
mode has no Conv kernel to block-quantize for, so Conv stays float there too.

A Conv whose output is squared through layout ops only (an STFT as Conv, then re² + im²: silero-vad's front end)
stays float: QLinearConv's uint8 output rounds the quiet bins of the spectrum away before the square, and a Conv
without a quantized output runs no integer kernel (measured on silero-vad: that output's requantization alone cost
2.3 of its 2.9 % flipped decisions).

AVX2's QLinearConv runs its im2col GEMM on the U8S8 kernel with K ordered (kernel taps, input channels), input
channels fastest, and it saturates K pairs like MatMul's (measured: tests/handlers/test_conv.py); its depthwise
kernel and ConvInteger do not.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import (NodePlan, PlanContext, Skip, WeightSpec, constant_float, constant_weight,
                                 quantized_output, unusable_weight, weight_only_refusal)
from onnxq.handlers.registry import register
from onnxq.io.irquery import attribute, constant_array

__all__ = ["plan_conv", "CONV_PAIR_AXIS", "is_depthwise", "output_is_squared"]

# WeightSpec.pair_limit_axis of a Conv weight [Cout, Cin/group, *kernel]: its input channels, read by the kernel in
# (taps, channels) order (numerics.pairs.gemm_view).
CONV_PAIR_AXIS = 1


@register("Conv")
def plan_conv(node: ir.Node, ctx: PlanContext) -> NodePlan | Skip:
    w_const = constant_weight(node, ("X", "W"))
    if isinstance(w_const, Skip):
        return w_const
    if w_const.shape is None or len(w_const.shape) < 3:
        return Skip(node, "W is not [M, C/group, k1, ...]")
    if ctx.weight_only:
        return weight_only_refusal(node, ctx, "use static mode for Conv: QLinearConv")
    if (reason := unusable_weight(node, node.inputs[1], w_const)) is not None:
        return Skip(node, reason)
    axis = 0 if ctx.per_channel else None
    if ctx.mode == "dynamic" and not ctx.dynamic_conv:
        return Skip(node, "dynamic mode leaves Conv float: ORT's ConvInteger ran 5.6-7.7x slower than float Conv "
                          "(measured, AVX2) — quantize it statically (--calib DATA: QLinearConv), or set "
                          "dynamic_conv = true")
    if ctx.mode == "dynamic":  # ConvInteger: no saturation (measured), the bias is added in float
        has_bias = len(node.inputs) > 2 and node.inputs[2] is not None
        return NodePlan(node, activations=(0,), weights=(WeightSpec(1, axis),), form="conv_integer",
                        bias_note="dynamic activations: the bias is added in float" if has_bias else None)
    if output_is_squared(node):
        return Skip(node, "its output is squared (a power spectrum: an STFT as Conv, then re² + im²) — the uint8 "
                          "output QLinearConv needs rounds the quiet bins away (silero-vad: 2.9 % of its decisions "
                          "flipped, 0.7 % with this Conv float), and without it no integer kernel runs")
    pair_axis = CONV_PAIR_AXIS if ctx.limit_pairs and not is_depthwise(node, w_const.shape) else None
    bias_index, bias_note = _bias(node)
    return NodePlan(node, activations=(0,), weights=(WeightSpec(1, axis, pair_axis),), bias_index=bias_index,
                    bias_note=bias_note, output=quantized_output(node, ctx.fold_relu))


def is_depthwise(node: ir.Node, weight_shape) -> bool:
    """One input channel per group and one output channel per group: ORT runs it on MLAS's depthwise kernel (which
    does not saturate) instead of the im2col GEMM."""
    return weight_shape[1] == 1 and weight_shape[0] == attribute(node, "group", 1)


# Ops that move, select or retype elements without changing their values: what comes out is still the Conv's output.
_LAYOUT_OPS = frozenset({"Slice", "Split", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Cast",
                         "Gather", "Flatten"})


def output_is_squared(node: ir.Node, depth: int = 6) -> bool:
    """Whether the node's output reaches a square (Pow by 2, or Mul of a value by itself) through layout ops only
    (silero's STFT: Conv → Slice → Slice → Slice → Cast → Pow)."""
    frontier = [node.outputs[0]]
    for _ in range(depth):
        readers = [use.node for value in frontier for use in value.uses()]
        if any(_squares(reader) for reader in readers):
            return True
        frontier = [out for reader in readers if reader.op_type in _LAYOUT_OPS for out in reader.outputs]
    return False


def _squares(node: ir.Node) -> bool:
    if node.op_type == "Pow":
        exponent = constant_array(node.inputs[1])
        return exponent is not None and exponent.size == 1 and float(exponent.reshape(-1)[0]) == 2.0
    return node.op_type == "Mul" and node.inputs[0] is node.inputs[1]


def _bias(node: ir.Node) -> tuple[int | None, str | None]:
    if len(node.inputs) < 3 or node.inputs[2] is None:
        return None, None
    if constant_float(node.inputs[2]) is None:
        return None, "B is not a constant float32"
    return 2, None
