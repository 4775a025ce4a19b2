"""MatMul: activation × constant weight [K, N] → per-channel along N; activation × activation optional."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import (NodePlan, PlanContext, Skip, WeightSpec, constant_float, not_float32,
                                 quantized_output, unusable_weight)
from onnxq.handlers.registry import product_op_types, register

__all__ = ["plan_matmul"]


def _is_float(value: ir.Value) -> bool:
    # Unknown dtype (no type info) is assumed float; calibration would reveal otherwise.
    return value.dtype in (None, ir.DataType.FLOAT)


@register("MatMul")
def plan_matmul(node: ir.Node, ctx: PlanContext) -> NodePlan | Skip:
    a, b = node.inputs[0], node.inputs[1]
    if constant_float(a) is not None:
        return Skip(node, "first input is a constant; only activation × weight is supported")
    b_const = constant_float(b)
    if b_const is not None:
        if b_const.shape is None or len(b_const.shape) != 2:
            return Skip(node, f"constant B has rank {len(b_const.shape)}; only 2-D weights [K, N] are quantized")
        if not _is_float(a):
            return Skip(node, f"activation dtype {a.dtype} is not float32")
        if (reason := unusable_weight(node, b, b_const)) is not None:
            return Skip(node, reason)
        if ctx.weight_only:  # block-wise along K; the output features are axis 1
            return NodePlan(node, weights=(WeightSpec(1, 1),))
        # B is [K, N]: K pairs lie along axis 0.
        spec = WeightSpec(1, 1 if ctx.per_channel else None, 0 if ctx.limit_pairs else None)
        return NodePlan(node, activations=(0,), weights=(spec,), per_token=ctx.per_token,
                        output=_requantized_output(node, ctx) if not ctx.per_token else None)
    if b.is_graph_input() and b.const_value is not None:
        return Skip(node, "B is an initializer that is also a graph input, so it may change at run time")
    if (reason := not_float32(b)) is not None:
        return Skip(node, f"B is {reason}")
    if ctx.mode in ("dynamic", "weight-only"):
        return Skip(node, f"both inputs are activations; {ctx.mode} mode quantizes only constant-weight products")
    if not ctx.quantize_activation_matmul:
        return Skip(node, "both inputs are activations (--quantize-attention quantizes them)")
    if not (_is_float(a) and _is_float(b)):
        return Skip(node, "inputs are not float32")
    return NodePlan(node, activations=(0, 1), output=_requantized_output(node, ctx))


def _requantized_output(node: ir.Node, ctx: PlanContext) -> ir.Value | None:
    """Where the output format takes a requantized product (QLinearMatMul), the value whose calibrated range sets
    it, as for Conv (a Relu that alone reads the MatMul folded in) — but only where every reader is a product that
    quantizes that value anyway as its activation: elsewhere (a bias Add, a residual, attention) requantizing costs a
    rounding the float output does not have (all-MiniLM-L6-v2: cosine 0.934 with every MatMul output requantized,
    0.993 without), and the product keeps a float output. None: float."""
    value = quantized_output(node, ctx.fold_relu) if ctx.requantize_products else None
    readers = [] if value is None else list(value.uses())
    if readers and all(user.op_type in product_op_types() and index == 0 for user, index in readers):
        return value
    return None
