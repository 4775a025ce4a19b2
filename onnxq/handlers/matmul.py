"""MatMul: activation × constant weight [K, N] → per-channel along N; activation × activation optional."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import NodePlan, PlanContext, Skip, WeightSpec, constant_float
from onnxq.handlers.registry import register

__all__ = ["plan_matmul"]


def _is_float(value: ir.Value) -> bool:
    # Unknown dtype (no type info) is assumed float; calibration would reveal otherwise.
    return value.dtype in (None, ir.DataType.FLOAT)


@register("MatMul")
def plan_matmul(node: ir.Node, ctx: PlanContext) -> NodePlan | Skip:
    a, b = node.inputs[0], node.inputs[1]
    a_const, b_const = constant_float(a), constant_float(b)
    if a_const is None and b_const is not None:
        if b_const.shape is None or len(b_const.shape) != 2:
            return Skip(node, f"constant B has rank {len(b_const.shape)}; only 2-D weights [K, N] are quantized")
        if not _is_float(a):
            return Skip(node, f"activation dtype {a.dtype} is not float32")
        axis = 1 if ctx.per_channel else None
        return NodePlan(node, activations=(0,), weights=(WeightSpec(1, axis),))
    if a_const is None and b_const is None and b is not None and ir.convenience.get_const_tensor(b) is None:
        if ctx.mode == "dynamic":
            return Skip(node, "both inputs are activations; dynamic mode quantizes only constant-weight products")
        if not ctx.quantize_activation_matmul:
            return Skip(node, "both inputs are activations (quantize_activation_matmul is off)")
        if not (_is_float(a) and _is_float(b)):
            return Skip(node, "inputs are not float32")
        return NodePlan(node, activations=(0, 1))
    if a_const is not None:
        return Skip(node, "first input is a constant; only activation × weight is supported")
    return Skip(node, "B is a constant that is not float32")
