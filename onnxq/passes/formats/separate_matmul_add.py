"""The Add after a QDQ MatMul of a 2-D activation, when its other input is not a constant bias, written as Sum.

ORT's MatMulAddFusion makes a 2-D MatMul and the Add that alone reads it one Gemm, the Add's other input as C,
before its QDQ fusions run; its QDQ Gemm fusion then refuses the float C, and the product runs as DequantizeLinear +
float Gemm. An RNN cell (x·Wx + h·Wh) and a residual Add lost one integer product each that way. Sum of two inputs
is the same arithmetic (multidirectional broadcasting), and no fusion of ORT takes MatMul + Sum, so ORT fuses the
QDQ MatMul into MatMulIntegerToFloat and adds after it. A constant bias never gets here: passes.preparation.fold_matmul_add has
made that MatMul a Gemm whose int32 bias ORT's QGemm takes.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import sole_reader
from onnxq.passes.graph.builder import replace_node

__all__ = ["separate_matmul_adds"]


def separate_matmul_adds(plans: Sequence[NodePlan]) -> list[str]:
    """Rewrite each such Add as Sum (after the quantize pass); the names of the MatMuls kept apart from theirs."""
    separated = []
    for plan in plans:
        add = _add_after(plan)
        if add is None:
            continue
        total = ir.node("Sum", list(add.inputs), name=add.name)
        add.graph.insert_before(add, total)
        replace_node(add.graph, add, total.outputs[0])
        separated.append(plan.node.name or "")
    return separated


def _add_after(plan: NodePlan) -> ir.Node | None:
    """The Add that ORT would fuse with the plan's MatMul, or None."""
    node = plan.node
    if plan.form != "qdq" or node.op_type != "MatMul" or node.graph is None:
        return None
    add = sole_reader(node)
    if add is None or _rank(node) != 2:
        return None
    if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.inputs) != 2:
        return None
    return add


def _rank(matmul: ir.Node) -> int | None:
    """The rank of the MatMul's output, or of its activation before the QuantizeLinear → DequantizeLinear put in
    front of it; None where neither is known (then ORT may not know it either, and the Add stays)."""
    if matmul.outputs[0].shape is not None:
        return matmul.outputs[0].shape.rank()
    value = matmul.inputs[0]
    for op_type in ("DequantizeLinear", "QuantizeLinear"):
        node = value.producer() if value is not None else None
        if node is None or node.op_type != op_type:
            return None
        value = node.inputs[0]
    return value.shape.rank() if value is not None and value.shape is not None else None
