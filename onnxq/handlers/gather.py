"""Gather on a constant table (token embeddings): weight-only int8, one scale per row."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.handlers.plan import NodePlan, PlanContext, Skip, WeightSpec, constant_float, unusable_weight
from onnxq.handlers.registry import register

__all__ = ["plan_gather"]

# Small tables (position or token-type embeddings) gain little and cost a node; leave them float.
MIN_TABLE_ELEMENTS = 65536


@register("Gather", product=False)
def plan_gather(node: ir.Node, ctx: PlanContext) -> NodePlan | Skip | None:
    table = constant_float(node.inputs[0])
    if table is None:
        return None  # gathers from activations or shapes: data movement, not a candidate
    axis_attr = node.attributes.get("axis")
    if (axis_attr.value if axis_attr is not None else 0) != 0:
        return Skip(node, "gathers along an axis other than 0")
    if table.shape is None or len(table.shape) != 2:
        return Skip(node, "table is not 2-D")
    if table.size < MIN_TABLE_ELEMENTS:
        return Skip(node, f"table of {table.size} values is too small to be worth quantizing")
    if (reason := unusable_weight(node, node.inputs[0], table)) is not None:
        return Skip(node, reason)
    if ctx.weight_only and table.shape[1] % 2:
        return Skip(node, f"rows of {table.shape[1]} values: 4-bit rows are packed two values a byte (even width)")
    return NodePlan(node, weights=(WeightSpec(0, 0 if ctx.per_channel else None),))
