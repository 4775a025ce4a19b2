"""A static product's weights as int8 behind DequantizeLinear, the weight's scale widened where its int32 bias
would not hold at the input's scale.

A bias holds int32 codes b / (s_x·s_w) only while the weight's scale s_w is at least |b| / (s_x · INT32_MAX): below
that (a tiny input scale: activations near zero beside a bias of ordinary size) the scale is widened to it, as ONNX
Runtime's own quantizer and TFLite do; the products lose resolution where the bias outweighs them anyway. Leaving the
bias float instead is no way out: ORT's WeightBiasQuantization quantizes a float bias beside a DequantizeLinear
weight itself, without a range check, and its codes wrap (torchvision's LR-ASPP, random init: cosine 0.87 on the
deployed kernels against 1.0000 exact; tests/passes/test_bias_scale.py: 0.63 and 0.52). Used by passes.forms.qdq.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.handlers.plan import NodePlan
from onnxq.numerics import QParams
from onnxq.passes.graph.builder import GraphBuilder

__all__ = ["quantized_weights", "bias_codes", "fits_int32"]

_INT32_MAX = 2**31 - 1
_BIAS_MARGIN = 1.0001  # ONNX Runtime's quantizer's: a floored scale's codes stay inside int32 after rounding


def quantized_weights(builder: GraphBuilder, plan: NodePlan,
                      act: QParams | None) -> tuple[QParams | None, str | None]:
    """Each planned weight as int8 behind a DequantizeLinear, in the node's place: (the last one's qparams, how its
    scale was widened for the bias, or None). act: the quantized input's qparams (None: no floor)."""
    node, qparams, widened = plan.node, None, None
    for spec in plan.weights:
        value = node.inputs[spec.input_index]
        weight = builder.dequantized_weight(value, spec.axis, before=node, pair_limit_axis=spec.pair_limit_axis)
        floor = None if plan.bias_index is None or act is None else \
            _bias_scale_floor(node.inputs[plan.bias_index], act, weight.qparams)
        if floor is not None:  # the first DequantizeLinear, read by nothing, goes with the unused nodes
            plain = weight.qparams.scale
            weight = builder.dequantized_weight(value, spec.axis, before=node, pair_limit_axis=spec.pair_limit_axis,
                                                scale_floor=floor)
            ratio = weight.qparams.scale.astype(np.float64) / plain.astype(np.float64)
            widened = (f"bias int32, the weight's scale widened on {int(np.count_nonzero(ratio > 1))} channel(s) "
                       f"(up to {float(ratio.max()):.3g}x) so that the bias holds at this input's scale")
        node.replace_input_with(spec.input_index, weight.dequantized)
        qparams = weight.qparams
    return qparams, widened


def _bias_scale_floor(bias_value: ir.Value, act: QParams, weight: QParams) -> np.ndarray | None:
    """The least weight scale (per channel, or one) at which every int32 bias code fits, or None where the weight's
    own scale already does. The margin is ONNX Runtime's quantizer's (1.0001)."""
    bias = np.abs(ir.convenience.get_const_tensor(bias_value).numpy().astype(np.float64).reshape(-1))
    if weight.scale.ndim and weight.scale.size != bias.size:
        return None
    if fits_int32(bias_codes(bias_value, act, weight)[0]):
        return None
    floor = _BIAS_MARGIN * bias / (float(act.scale) * _INT32_MAX)
    return (floor if weight.scale.ndim else np.max(floor, initial=0.0)).astype(np.float32)


def bias_codes(bias_value: ir.Value, act: QParams, weight: QParams) -> tuple[np.ndarray, np.ndarray]:
    """The bias's codes (float64, not yet checked against int32) at the scale s_x·s_w they are stored at (float32:
    the codes are what the stored scale reads back), and that scale, per channel or one."""
    bias = ir.convenience.get_const_tensor(bias_value).numpy().astype(np.float64).reshape(-1)
    scale = (act.scale.astype(np.float64) * weight.scale.astype(np.float64)).astype(np.float32)
    scale = np.broadcast_to(scale, bias.shape) if scale.ndim else scale
    return np.rint(bias / scale.astype(np.float64)), scale


def fits_int32(codes: np.ndarray) -> bool:
    return not np.any(np.abs(codes) > _INT32_MAX)
