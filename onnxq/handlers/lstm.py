"""LSTM: int8 input and recurrent weights (W [D, 4H, I], R [D, 4H, H]), one scale per gate row and direction, for
ORT's com.microsoft DynamicQuantizeLSTM, which quantizes X and each step's hidden state to uint8 at run time —
ORT's only integer LSTM kernel, so an LSTM takes it in every activation mode (a static run calibrates nothing for it).

Measured on an AVX2 EPYC (one thread, onnxruntime 1.31): 0.34-0.82x the float LSTM's time, output cosine 0.9998.
Its GEMMs are U8S8: on AVX2 they saturate K pairs like MatMul's (an all-0.01 W read as 0.104 where float gives
0.228, tests/handlers/test_lstm.py), so on a saturating target both weights keep their K pairs (I, then H) within
the limit. ONNX has no integer LSTM, so format qlinear keeps LSTM float; weight-only mode has no block-wise one.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import (NodePlan, PlanContext, Skip, WeightSpec, constant_float, contrib_kernel_refusal,
                                 not_float32, unusable_weight)
from onnxq.handlers.registry import register
from onnxq.io.irquery import attribute

__all__ = ["plan_lstm", "LSTM_CHANNEL_AXIS", "LSTM_K_AXIS"]

# In W [D, 4H, I] and R [D, 4H, H]: the gate rows (one scale each, per direction) and the K axis the GEMM reduces.
LSTM_CHANNEL_AXIS, LSTM_K_AXIS = 1, 2


@register("LSTM")
def plan_lstm(node: ir.Node, ctx: PlanContext) -> NodePlan | Skip:
    for index, name in ((1, "W"), (2, "R")):
        tensor = constant_float(node.inputs[index]) if len(node.inputs) > index else None
        if tensor is None:
            why = not_float32(node.inputs[index]) if len(node.inputs) > index else None
            return Skip(node, f"{name} is {why or 'not a constant float32 weight'}")
        if tensor.shape is None or len(tensor.shape) != 3:
            return Skip(node, f"{name} is not [num_directions, 4·hidden, K]")
        if (reason := unusable_weight(node, node.inputs[index], tensor)) is not None:
            return Skip(node, reason)
    if attribute(node, "layout", 0) != 0:
        return Skip(node, "layout = 1 (batch first): ORT's DynamicQuantizeLSTM reads [seq, batch, features] only")
    if (refusal := contrib_kernel_refusal(node, ctx, "DynamicQuantizeLSTM")) is not None:
        return refusal
    axis = LSTM_CHANNEL_AXIS if ctx.per_channel else None
    pair_axis = LSTM_K_AXIS if ctx.limit_runtime_pairs else None
    return NodePlan(node, activations=(0,), weights=(WeightSpec(1, axis, pair_axis), WeightSpec(2, axis, pair_axis)),
                    form="dynamic_lstm")
