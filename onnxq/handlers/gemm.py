"""Gemm: per-channel weights along the output-feature axis (honours transB); bias as int32 by default."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import (NodePlan, PlanContext, Skip, WeightSpec, constant_float, constant_weight,
                                 unusable_weight)
from onnxq.handlers.registry import register
from onnxq.io.irquery import attribute

__all__ = ["plan_gemm"]


@register("Gemm")
def plan_gemm(node: ir.Node, ctx: PlanContext) -> NodePlan | Skip:
    b, c = node.inputs[1], node.inputs[2] if len(node.inputs) > 2 else None
    b_const = constant_weight(node, ("A", "B"))
    if isinstance(b_const, Skip):
        return b_const
    if b_const.shape is None or len(b_const.shape) != 2:
        return Skip(node, "B is not 2-D")
    if (reason := unusable_weight(node, b, b_const)) is not None:
        return Skip(node, reason)
    trans_a, trans_b = attribute(node, "transA"), attribute(node, "transB")
    alpha, beta = attribute(node, "alpha", 1.0), attribute(node, "beta", 1.0)
    if ctx.mode in ("dynamic", "weight-only") and (trans_a or alpha != 1.0 or beta != 1.0):
        return Skip(node, f"{ctx.mode} mode supports Gemm with transA=0, alpha=beta=1 only")
    n_out = b_const.shape[0] if trans_b else b_const.shape[1]
    if ctx.weight_only:  # block-wise along K; C is added in float after the product
        return NodePlan(node, weights=(WeightSpec(1, 0 if trans_b else 1),))
    # B is [K, N], or [N, K] with transB: the output features lie on axis 1, or 0.
    axis = (0 if trans_b else 1) if ctx.per_channel else None
    k_axis = 1 if trans_b else 0
    # Per token runs as MatMulInteger, which has no transA, alpha or beta: such a Gemm stays per tensor.
    per_token = ctx.per_token and not trans_a and alpha == 1.0 and beta == 1.0
    plan = NodePlan(node, activations=(0,), weights=(WeightSpec(1, axis, k_axis if ctx.limit_pairs else None),),
                    per_token=per_token)
    if c is None:
        return plan
    c_const = constant_float(c)
    if ctx.gemm_bias == "float":
        note = "float bias requested (gemm_bias = float)"
    elif ctx.mode == "dynamic" or per_token:
        note = "dynamic activations: the bias is added in float"
    elif c_const is None:
        note = "C is not a constant float32"
    elif alpha != 1.0 or beta != 1.0:
        note = f"alpha={alpha}, beta={beta} (an int32 bias needs alpha = beta = 1)"
    elif c_const.shape is None or tuple(c_const.shape) not in ((n_out,), (1, n_out)):
        note = f"C of shape {c_const.shape} is not one value per output feature"
    else:
        note = None
    return NodePlan(node, activations=plan.activations, weights=plan.weights,
                    bias_index=None if note else 2, bias_note=note, per_token=per_token)
