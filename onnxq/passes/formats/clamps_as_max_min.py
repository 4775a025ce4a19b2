"""The Relu or Clip that alone reads a QDQ MatMul's or Gemm's float output, where nothing quantizes what it makes,
written as Max(x, 0) — a Clip as Max / Min of its bounds.

ORT's QDQ MatMul and Gemm fusions take a Relu or Clip after the product for one they will fold into the
QuantizeLinear that follows; where none follows — a residual Add, a Concat, a product kept float after it (excluded,
by the fallback) — they leave the group alone, and the product runs as DequantizeLinear + float MatMul (a Gemm:
fused with its Relu into a float FusedGemm). Measured on onnxruntime 1.31: MatMul → Relu → Sigmoid and MatMul →
Clip(0, 6) → Sigmoid ran float, MatMul → Relu → QuantizeLinear (and beside it a float reader) ran
MatMulIntegerToFloat, MatMul → Max(x, 0) → Sigmoid ran MatMulIntegerToFloat. Max and Min with the bounds are the
same arithmetic, and no fusion of ORT takes a product with a Max or Min after it. Conv outputs never get here: they
are requantized after their Relu / Clip.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import sole_reader
from onnxq.passes.graph.builder import GraphBuilder, replace_node

__all__ = ["clamps_as_max_min"]


def clamps_as_max_min(plans: Sequence[NodePlan]) -> list[str]:
    """Rewrite each such Relu / Clip (after the quantize pass); the names of the products they follow."""
    rewritten = []
    for plan in plans:
        clamp = _clamp_after(plan)
        if clamp is None:
            continue
        builder = GraphBuilder(clamp.graph)
        value = clamp.inputs[0]
        for op_type, bound in _bounds(clamp, builder):
            base = f"{clamp.name or 'clamp'}_{op_type.lower()}"
            value = builder.node(op_type, [value, bound], base, clamp).outputs[0]
        replace_node(clamp.graph, clamp, value)
        rewritten.append(plan.node.name or "")
    return rewritten


def _bounds(clamp: ir.Node, builder: GraphBuilder) -> list[tuple[str, ir.Value]]:
    """(Max, lower bound) and / or (Min, upper bound): a Relu's 0 (made with the builder), a Clip's min and max."""
    if clamp.op_type == "Relu":
        return [("Max", builder.initializer(f"{clamp.name or 'relu'}_zero", np.zeros((), dtype=np.float32)))]
    lower, upper = (clamp.inputs[i] if len(clamp.inputs) > i else None for i in (1, 2))
    return [(op, bound) for op, bound in (("Max", lower), ("Min", upper)) if bound is not None]


def _clamp_after(plan: NodePlan) -> ir.Node | None:
    """The Relu / Clip (constant bounds) that alone reads the plan's product, when some reader of it and none
    quantizes its output; or None."""
    node = plan.node
    if plan.form != "qdq" or node.op_type not in ("MatMul", "Gemm") or node.graph is None or plan.output is not None:
        return None
    clamp = sole_reader(node)
    while clamp is not None and clamp.op_type == "Identity" and clamp.domain in ("", "ai.onnx"):  # ORT drops them
        clamp = sole_reader(clamp)
    if clamp is None or clamp.domain not in ("", "ai.onnx") or clamp.op_type not in ("Relu", "Clip"):
        return None
    if clamp.op_type == "Clip" and not (_bounds_constant(clamp) and any(b is not None for b in clamp.inputs[1:])):
        return None
    readers = [reader for reader, _ in clamp.outputs[0].uses()]
    if not readers or any(reader.op_type == "QuantizeLinear" for reader in readers):
        return None
    return clamp


def _bounds_constant(clip: ir.Node) -> bool:
    return all(bound is None or ir.convenience.get_const_tensor(bound) is not None for bound in clip.inputs[1:])
