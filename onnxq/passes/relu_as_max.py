"""The Relu that alone reads a QDQ MatMul's or Gemm's float output, where nothing quantizes what it makes, written as
Max(x, 0).

ORT's QDQ MatMul and Gemm fusions take a Relu after the product for one they will fold into the QuantizeLinear that
follows; where none follows — a residual Add, a Concat, a product kept float after it (excluded, by the fallback) —
they leave the group alone, and the product runs as DequantizeLinear + float MatMul (a Gemm: fused with its Relu into
a float FusedGemm). Measured on onnxruntime 1.31: MatMul → Relu → Sigmoid ran float, MatMul → Relu → QuantizeLinear
(and beside it a float reader) ran MatMulIntegerToFloat, MatMul → Max(x, 0) → Sigmoid ran MatMulIntegerToFloat. Max
with 0 is Relu's arithmetic, and no fusion of ORT takes a product with a Max after it. A Clip after a product is left
as it is (ReLU6 follows Convs, whose outputs are requantized).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxq.handlers.plan import NodePlan
from onnxq.passes.builder import GraphBuilder, replace_node

__all__ = ["relus_as_max"]


def relus_as_max(plans: Sequence[NodePlan]) -> list[str]:
    """Rewrite each such Relu as Max (after the quantize pass); the names of the products it follows."""
    rewritten = []
    for plan in plans:
        relu = _relu_after(plan)
        if relu is None:
            continue
        zero = GraphBuilder(relu.graph).initializer(f"{relu.name or 'relu'}_zero", np.zeros((), dtype=np.float32))
        maximum = ir.node("Max", [relu.inputs[0], zero], name=relu.name)
        relu.graph.insert_before(relu, maximum)
        replace_node(relu.graph, relu, maximum.outputs[0])
        rewritten.append(plan.node.name or "")
    return rewritten


def _relu_after(plan: NodePlan) -> ir.Node | None:
    """The Relu that alone reads the plan's product, when some reader of it and none quantizes its output; or None."""
    node = plan.node
    if plan.form != "qdq" or node.op_type not in ("MatMul", "Gemm") or node.graph is None or plan.output is not None:
        return None
    relu = _sole_reader(node)
    while relu is not None and relu.op_type == "Identity" and relu.domain in ("", "ai.onnx"):  # ORT drops them
        relu = _sole_reader(relu)
    if relu is None or relu.op_type != "Relu" or relu.domain not in ("", "ai.onnx"):
        return None
    readers = [reader for reader, _ in relu.outputs[0].uses()]
    if not readers or any(reader.op_type == "QuantizeLinear" for reader in readers):
        return None
    return relu


def _sole_reader(node: ir.Node) -> ir.Node | None:
    output = node.outputs[0]
    uses = list(output.uses())
    return uses[0][0] if len(uses) == 1 and not output.is_graph_output() else None
