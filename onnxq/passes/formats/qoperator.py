"""QDQ → QOperator: a local lowering after the QDQ rewrite (`--format qoperator`).

Each DequantizeLinear(QuantizeLinear(x)) × DequantizeLinear(int8 weight) product becomes one operator that takes
the integers directly:
- MatMul → com.microsoft MatMulIntegerToFloat(x_q, w_q, x_scale, w_scale, x_zp, w_zp): float output, per-column
  weight scales. onnxq keeps MatMul outputs float (no accuracy is spent requantizing them), and ONNX's
  QLinearMatMul can only produce a quantized output, so it cannot express these products.
- Gemm → com.microsoft QGemm(x_q, x_scale, x_zp, w_q, w_scale, w_zp, bias_int32): float output, alpha and transB
  kept, the int32 bias as is.
These are the kernels ORT's CPU optimizer fuses the QDQ groups into, so the two formats compute the same numbers;
a QOperator file states them explicitly (no optimizer needed) and runs on ORT's CPU provider. A product that does
not fit is left in QDQ form, with the reason in the result's `declined`. Registered as output format "qoperator".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.config.formats import OutputFormat, register_format
from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import attribute, producer
from onnxq.passes.graph.builder import replace_node
from onnxq.passes.graph.contract import KeepsOutputNames

__all__ = ["LowerToQOperatorPass", "LoweringResult"]

_MS = "com.microsoft"


def _quantized_input(value: ir.Value) -> tuple[ir.Node | None, str | None]:
    """The DequantizeLinear feeding a product and its per-tensor activation, or why it is not one."""
    dq = producer(value, "DequantizeLinear")
    if dq is None:
        return None, "input is not dequantized (not quantized by onnxq)"
    if producer(dq.inputs[0], "QuantizeLinear") is None and ir.convenience.get_const_tensor(dq.inputs[0]) is None:
        return None, "dequantized input is neither a QuantizeLinear output nor a constant"
    return dq, None


@dataclasses.dataclass
class LoweringResult(ir.passes.PassResult):
    declined: dict[str, str] = dataclasses.field(default_factory=dict)  # node → why it stays in QDQ form
    lowered: dict[str, str] = dataclasses.field(default_factory=dict)  # node → the operator it became


class LowerToQOperatorPass(KeepsOutputNames):
    """requires / ensures: KeepsOutputNames' (a lowered operator's output takes the name of the one it replaces)."""

    def call(self, model: ir.Model) -> LoweringResult:
        result = LoweringResult(model, modified=False)
        for node in list(model.graph):
            if node.op_type not in ("MatMul", "Gemm"):
                continue
            reason = self._lower(model.graph, node, result.lowered)
            if reason is not None:
                result.declined[node.name or ""] = reason
        if result.lowered:
            model.opset_imports.setdefault(_MS, 1)
            RemoveUnusedNodesPass()(model)
        result.modified = bool(result.lowered)
        return result

    def _lower(self, graph: ir.Graph, node: ir.Node, lowered_nodes: dict[str, str]) -> str | None:
        x_dq, reason = _quantized_input(node.inputs[0])
        if reason:
            return f"A: {reason}"
        w_dq, reason = _quantized_input(node.inputs[1])
        if reason:
            return f"B: {reason}"
        x_q, x_scale, x_zp = (x_dq.inputs[i] for i in range(3))
        w_q, w_scale, w_zp = (w_dq.inputs[i] for i in range(3))
        if x_zp is None or w_zp is None:
            return "a zero point is missing"
        if x_scale.shape is not None and x_scale.shape.rank() not in (0, None):
            return "activation scale is not per tensor"
        w_axis = attribute(w_dq, "axis", 1)
        w_per_axis = w_scale.shape is not None and w_scale.shape.rank() == 1
        if node.op_type == "MatMul":
            if w_per_axis and (w_q.shape is None or w_axis not in (1, -1) or w_q.shape.rank() != 2):
                return "weight scales are not per column of a 2-D B"
            lowered = ir.node("MatMulIntegerToFloat", [x_q, w_q, x_scale, w_scale, x_zp, w_zp], domain=_MS,
                              name=node.name)
        else:
            if attribute(node, "transA"):
                return "Gemm with transA = 1 (QGemm lowering keeps A as [M, K])"
            trans_b = attribute(node, "transB")
            if w_per_axis and w_axis != (0 if trans_b else 1):
                return "weight scales are not per output feature"
            bias = node.inputs[2] if len(node.inputs) > 2 else None
            bias_q = None
            if bias is not None:
                bias_dq = producer(bias, "DequantizeLinear")
                if bias_dq is None or bias_dq.inputs[0].dtype != ir.DataType.INT32:
                    return "bias is float (QGemm takes an int32 bias with scale s_x·s_w)"
                bias_q = bias_dq.inputs[0]
            attrs = {"transB": trans_b, "alpha": attribute(node, "alpha", 1.0)}
            lowered = ir.node("QGemm", [x_q, x_scale, x_zp, w_q, w_scale, w_zp, bias_q], attrs, domain=_MS,
                              name=node.name)
        graph.insert_before(node, lowered)
        replace_node(graph, node, lowered.outputs[0])
        lowered_nodes[node.name or ""] = lowered.op_type
        return None


def _lower_planned(model: ir.Model, plans: Sequence[NodePlan]) -> dict[str, str]:
    """The planned products kept in QDQ form, with why (an unplanned MatMul is declined too: it was never QDQ)."""
    declined = LowerToQOperatorPass()(model).declined
    planned = {p.node.name for p in plans if not p.weight_only}
    return {name: reason for name, reason in declined.items() if name in planned}


register_format(OutputFormat(
    "qoperator", "the integer operators themselves (MatMulIntegerToFloat, QGemm), lowered from QDQ", _lower_planned))
