"""com.microsoft EmbedLayerNormalization (onnxruntime's transformer optimizer fuses a BERT's word, position and
segment embedding lookups, their sum and the LayerNormalization after them into one node, the tables its inputs):
the tables, gamma and beta stored as uint8 with one scale and zero point each for ORT's com.microsoft
QEmbedLayerNormalization, which looks up and dequantizes only the rows it reads. No activation is quantized, so it
serves every activation mode. QEmbedLayerNormalization has no position_ids input, no mask_index_type and no
embedding-sum output: a node using one stays float, with that reason."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import (NodePlan, PlanContext, Skip, WeightSpec, constant_float, contrib_kernel_refusal,
                                 unusable_weight)
from onnxq.handlers.registry import register

__all__ = ["plan_embed_layer_norm", "EMBED_WEIGHTS", "SEGMENT", "MASK"]

# Inputs that are constants: word, position and segment tables, gamma, beta.
EMBED_WEIGHTS = (2, 3, 4, 5, 6)
SEGMENT = 4  # the segment table is optional
MASK, _POSITION_IDS = 7, 8


@register("EmbedLayerNormalization", "com.microsoft", product=False)
def plan_embed_layer_norm(node: ir.Node, ctx: PlanContext) -> NodePlan | Skip:
    present = [i for i in EMBED_WEIGHTS if len(node.inputs) > i and node.inputs[i] is not None]
    if set(EMBED_WEIGHTS) - {SEGMENT} - set(present):
        return Skip(node, "a table, gamma or beta input is missing")
    for index in present:
        tensor = constant_float(node.inputs[index])
        if tensor is None:
            return Skip(node, f"input {index} ({node.inputs[index].name}) is not a constant float32 tensor")
        if (reason := unusable_weight(node, node.inputs[index], tensor)) is not None:
            return Skip(node, reason)
    if len(node.inputs) > _POSITION_IDS and node.inputs[_POSITION_IDS] is not None:
        return Skip(node, "ORT's QEmbedLayerNormalization has no position_ids input: kept float")
    if "mask_index_type" in node.attributes:
        return Skip(node, "ORT's QEmbedLayerNormalization has no mask_index_type: kept float")
    embedding_sum = node.outputs[2] if len(node.outputs) > 2 else None
    if embedding_sum is not None and (embedding_sum.uses() or embedding_sum.is_graph_output()):
        return Skip(node, "ORT's QEmbedLayerNormalization has no embedding-sum output, which is read: kept float")
    if (refusal := contrib_kernel_refusal(node, ctx, "QEmbedLayerNormalization", blockwise=False)) is not None:
        return refusal
    return NodePlan(node, weights=tuple(WeightSpec(i, None) for i in present), form="qembed_layer_norm")
