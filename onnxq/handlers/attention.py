"""com.microsoft Attention (onnxruntime's transformer optimizer fuses a layer's Q, K and V products into one, with
their weights in one [hidden, 3·hidden] tensor): int8 weights with a scale per column (one per tensor with
per_channel off) for ORT's com.microsoft QAttention, its input quantized to uint8 at run time
(DynamicQuantizeLinear) in every activation mode, as ORT's own quantizer does — the kernel takes the input's scale
as a tensor, and a run-time one follows each batch. QAttention has no qkv_hidden_sizes, attention bias, past
sequence length or rotary embedding dimension: an Attention using one stays float, with that reason.

Measured on one MiniLM-sized block (hidden 384, 12 heads, 128 tokens, batch 8, random weights; AMD EPYC family 25
model 17, avx512_vnni, one thread): 0.63x the float Attention's time, output cosine 0.9998
(tests/handlers/test_attention.py checks ≥ 0.999 on a smaller one)."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import (NodePlan, PlanContext, Skip, WeightSpec, constant_float, contrib_kernel_refusal,
                                 not_float32, unusable_weight)
from onnxq.handlers.registry import register

__all__ = ["plan_attention", "QATTENTION_ATTRIBUTES"]

# Attributes QAttention shares with Attention (ORT's contrib schema); any other set on the node keeps it float.
QATTENTION_ATTRIBUTES = frozenset({"num_heads", "unidirectional", "do_rotary", "past_present_share_buffer",
                                   "mask_filter_value", "scale"})
# Attention's inputs QAttention has: input, weights, bias, mask_index, past.
_INPUTS = 5


@register("Attention", "com.microsoft")
def plan_attention(node: ir.Node, ctx: PlanContext) -> NodePlan | Skip:
    weight = constant_float(node.inputs[1]) if len(node.inputs) > 1 else None
    if weight is None:
        why = not_float32(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
        return Skip(node, f"its weights are {why or 'not a constant float32 tensor'}")
    if weight.shape is None or len(weight.shape) != 2:
        return Skip(node, "its weights are not one [hidden, 3·hidden] matrix")
    if len(node.inputs) < 3 or node.inputs[2] is None:
        return Skip(node, "it has no bias, which ORT's QAttention requires")
    extra = [name for name in node.attributes if name not in QATTENTION_ATTRIBUTES]
    if extra or any(v is not None for v in node.inputs[_INPUTS:]):
        what = f"attribute {extra[0]}" if extra else "an attention bias or past sequence length input"
        return Skip(node, f"ORT's QAttention has no {what}: kept float")
    if (reason := unusable_weight(node, node.inputs[1], weight)) is not None:
        return Skip(node, reason)
    if (refusal := contrib_kernel_refusal(node, ctx, "QAttention")) is not None:
        return refusal
    axis = 1 if ctx.per_channel else None
    pair_axis = 0 if ctx.limit_runtime_pairs else None
    return NodePlan(node, activations=(0,), weights=(WeightSpec(1, axis, pair_axis),), form="qattention")
