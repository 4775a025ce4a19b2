"""QDQ → the standard QOperator form (`--format qlinear`): ONNX's own integer operators, readable by any runtime
that implements the ONNX standard (onnx.reference included), with no com.microsoft operator.

- MatMul whose output the plan requantized (QuantizeLinear after it, or after the Relu / Clip that alone reads it)
  → QLinearMatMul(a_q, a_scale, a_zp, b_q, b_scale, b_zp, y_scale, y_zp); a folded Relu is the uint8 zero point 0.
- Conv requantized the same way → QLinearConv with the int32 bias (scale s_x·s_w, as the spec asks).
- Gemm (ONNX has no QLinearGemm), and a MatMul writing a model output → MatMulInteger → Cast → Mul(a_scale·b_scale)
  [→ Add bias]: float output, the same integers. ORT runs MatMulInteger on its U8S8 kernel and the rest elementwise
  (its MatMulIntegerToFloat fusion does not fire: it folds the constant scales' Mul first, and matches Mul up to
  opset 13 only).
- com.microsoft MatMulIntegerToFloat of per-token dynamic activations → the same standard chain.
- DequantizeLinear → an op that only moves values (MaxPool, Reshape, …) → QuantizeLinear with the same scale and
  zero point → the op on the integers, so activations stay 8-bit between QLinearConvs.

A product that fits none of these stays in QDQ form (standard too), with the reason. A Conv whose output is not
requantized is one: ConvInteger ran 5.6-7.7x slower than float Conv (handlers/conv.py), and ORT runs the QDQ form as
DequantizeLinear + float Conv. Registered as output format "qlinear"; it lowers static and dynamic models.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.config.formats import OutputFormat, register_format
from onnxq.handlers.plan import NodePlan, is_relu_like
from onnxq.io.irquery import attribute, constant_array, producer
from onnxq.passes.graph.builder import GraphBuilder, replace_node
from onnxq.passes.graph.contract import KeepsOutputNames
from onnxq.passes.formats.qoperator import LoweringResult

__all__ = ["LowerToQLinearPass"]

_MS = "com.microsoft"
# Ops that only move values of their first input, with their integer types in the standard (MaxPool since opset 12).
_MOVING = {"MaxPool": 12, "Reshape": 5, "Flatten": 1, "Transpose": 1, "Squeeze": 1, "Unsqueeze": 1, "Identity": 1,
           "Slice": 1, "Gather": 1, "Expand": 8, "Tile": 6, "SpaceToDepth": 1, "DepthToSpace": 1, "Resize": 11}
_CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@dataclasses.dataclass(frozen=True)
class _Quantized:
    """An integer tensor and its (scale, zero point): what a DequantizeLinear reads."""

    values: ir.Value
    scale: ir.Value
    zero_point: ir.Value
    axis: int

    @property
    def per_tensor(self) -> bool:
        return self.scale.shape is None or self.scale.shape.rank() == 0


def _dequantized(value: ir.Value) -> _Quantized | None:
    dq = producer(value, "DequantizeLinear")
    if dq is None or len(dq.inputs) < 3 or dq.inputs[2] is None:
        return None
    return _Quantized(dq.inputs[0], dq.inputs[1], dq.inputs[2], int(attribute(dq, "axis", 1)))


def _requantizing(node: ir.Node) -> tuple[ir.Node, ir.Node | None] | None:
    """(the QuantizeLinear that alone requantizes the node's output, the Relu / Clip folded on the way or None)."""
    value, folded = node.outputs[0], None
    uses = list(value.uses())
    if len(uses) == 1 and is_relu_like(uses[0][0]) and not value.is_graph_output():
        folded, value = uses[0][0], uses[0][0].outputs[0]
        uses = list(value.uses())
    if value.is_graph_output() or len(uses) != 1 or uses[0][0].op_type != "QuantizeLinear":
        return None
    q = uses[0][0]
    if folded is not None and not _folds(folded, q):
        return None
    return q, folded


def _folds(activation: ir.Node, q: ir.Node) -> bool:
    """Whether quantizing alone does what the Relu / Clip did: its zero point is the type's least value and a Clip's
    minimum is 0 (its maximum is at or above the calibrated range's, which the QuantizeLinear saturates at)."""
    zero_point = constant_array(q.inputs[2] if len(q.inputs) > 2 else None)
    if zero_point is None or zero_point.size != 1 or int(zero_point.reshape(-1)[0]) != np.iinfo(zero_point.dtype).min:
        return False
    return activation.op_type == "Relu" or float(constant_array(activation.inputs[1]).reshape(-1)[0]) == 0.0


class LowerToQLinearPass(KeepsOutputNames):
    """requires / ensures: KeepsOutputNames' (a lowered product's output keeps the name of the value it replaces)."""

    def call(self, model: ir.Model) -> LoweringResult:
        result = LoweringResult(model, modified=False)
        graph, opset = model.graph, model.opset_imports.get("", 1)
        builder = GraphBuilder(graph)
        rules: dict[tuple[str, str], Callable[[GraphBuilder, ir.Node], str | None]] = {
            ("", "MatMul"): _lower_matmul, ("", "Gemm"): _lower_gemm, ("", "Conv"): _lower_conv,
            (_MS, "MatMulIntegerToFloat"): _lower_integer_to_float}
        for node in list(graph):
            rule = rules.get((node.domain or "", node.op_type))
            if rule is None:
                continue
            name = node.name or ""
            reason = rule(builder, node)
            if reason is None:
                result.lowered[name] = ""
            else:
                result.declined[name] = reason
        moved = [q for q in list(graph) if q.op_type == "QuantizeLinear" and _moves_integers(graph, q, opset)]
        if result.lowered or moved:
            RemoveUnusedNodesPass()(model)
        kernels = {n.name: n.op_type for n in graph}
        result.lowered = {name: kernels.get(name, "") for name in result.lowered}
        if not any(n.domain == _MS for n in ir.traversal.RecursiveGraphIterator(graph)) and not model.functions:
            model.opset_imports.pop(_MS, None)
        result.modified = bool(result.lowered or moved)
        return result


def _lower_matmul(builder: GraphBuilder, node: ir.Node) -> str | None:
    a, b = _dequantized(node.inputs[0]), _dequantized(node.inputs[1])
    if a is None or b is None:
        return "an input is not dequantized (not quantized by onnxq)"
    if not a.per_tensor:
        return "activation scale is not per tensor"
    if not b.per_tensor and (b.values.shape is None or b.values.shape.rank() != 2 or b.axis not in (1, -1)):
        return "weight scales are not per column of a 2-D B"
    requantized = _requantizing(node)
    if requantized is None:  # a model output: the float product, exactly as QDQ computes it
        return _integer_to_float(builder, node, a, b, None)
    q, _ = requantized
    lowered = ir.node("QLinearMatMul", [a.values, a.scale, a.zero_point, b.values, b.scale, b.zero_point,
                                        q.inputs[1], q.inputs[2]], name=node.name)
    builder.graph.insert_before(node, lowered)
    replace_node(builder.graph, q, lowered.outputs[0])
    return None


def _lower_conv(builder: GraphBuilder, node: ir.Node) -> str | None:
    x, w = _dequantized(node.inputs[0]), _dequantized(node.inputs[1])
    if x is None or w is None:
        return "an input is not dequantized (not quantized by onnxq)"
    bias = _dequantized(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if len(node.inputs) > 2 and node.inputs[2] is not None and (bias is None or bias.values.dtype != ir.DataType.INT32):
        return "bias is float (QLinearConv takes an int32 bias with scale s_x·s_w)"
    requantized = _requantizing(node)
    if requantized is None:
        return ("output not requantized (a model output, or read by more than one Relu): DequantizeLinear + float "
                "Conv, as ORT runs it (ConvInteger ran 5.6-7.7x slower than float)")
    q, _ = requantized
    inputs = [x.values, x.scale, x.zero_point, w.values, w.scale, w.zero_point, q.inputs[1], q.inputs[2]]
    attributes = {k: v for k, v in node.attributes.items() if k in _CONV_ATTRIBUTES}
    lowered = ir.node("QLinearConv", inputs + ([bias.values] if bias else []), attributes, name=node.name)
    builder.graph.insert_before(node, lowered)
    replace_node(builder.graph, q, lowered.outputs[0])
    return None


def _lower_gemm(builder: GraphBuilder, node: ir.Node) -> str | None:
    """Gemm → MatMulInteger chain: B transposed to [K, N] when transB (its per-row scales become per column), alpha
    in the weight scale, C (the int32 bias dequantized, or float times beta) added last."""
    a, b = _dequantized(node.inputs[0]), _dequantized(node.inputs[1])
    if a is None or b is None or constant_array(b.values) is None:
        return "an input is not dequantized (not quantized by onnxq)"
    if attribute(node, "transA"):
        return "Gemm with transA = 1 (MatMulInteger takes A as [M, K])"
    if not a.per_tensor:
        return "activation scale is not per tensor"
    trans_b, alpha = attribute(node, "transB"), float(attribute(node, "alpha", 1.0))
    if not b.per_tensor and b.axis != (0 if trans_b else 1):
        return "weight scales are not per output feature"
    weight = np.ascontiguousarray(constant_array(b.values).T) if trans_b else None
    scale = constant_array(b.scale) * np.float32(alpha) if alpha != 1.0 else None
    if weight is not None or scale is not None:
        base = b.values.name or "weight"
        b = dataclasses.replace(
            b, values=b.values if weight is None else builder.initializer(f"{base}_transposed", weight),
            scale=b.scale if scale is None else builder.initializer(f"{base}_scale_alpha", scale.astype(np.float32)),
            axis=1)
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is not None:
        bias = _float_bias(builder, bias, float(attribute(node, "beta", 1.0)))
        if bias is None:
            return "C is neither a constant nor scaled by beta = 1"
    return _integer_to_float(builder, node, a, b, bias)


def _float_bias(builder: GraphBuilder, bias: ir.Value, beta: float) -> ir.Value | None:
    """C·beta as a float value: an int32 bias dequantized here (a constant), a float one as it is."""
    quantized = _dequantized(bias)
    integers = None if quantized is None else constant_array(quantized.values)
    if integers is not None:
        scale = constant_array(quantized.scale).astype(np.float64)
        values = (integers.astype(np.float64) * scale * beta).astype(np.float32)
        return builder.initializer(f"{quantized.values.name}_float", values)
    if beta == 1.0:
        return bias
    constant = constant_array(bias)
    return None if constant is None else builder.initializer(f"{bias.name}_beta", (constant * beta).astype(np.float32))


def _integer_to_float(builder: GraphBuilder, node: ir.Node, a: _Quantized, b: _Quantized,
                      bias: ir.Value | None) -> str | None:
    """MatMulInteger → Cast → Mul(a_scale·b_scale) [→ Add bias] in place of the node (MatMulInteger takes the node's
    name, for the placement report)."""
    base = node.name or "MatMul"
    integer = ir.node("MatMulInteger", [a.values, b.values, a.zero_point, b.zero_point], name=base,
                      outputs=[ir.Value(name=builder.unique(f"{base}_int32"))])
    builder.graph.insert_before(node, integer)
    as_float = builder.node("Cast", [integer.outputs[0]], f"{base}_Cast", node, attributes={"to": ir.DataType.FLOAT})
    multiplier = builder.node("Mul", [a.scale, b.scale], f"{base}_scale_Mul", node)
    out = builder.node("Mul", [as_float.outputs[0], multiplier.outputs[0]], f"{base}_output_Mul", node).outputs[0]
    if bias is not None:
        out = builder.node("Add", [out, bias], f"{base}_bias_Add", node).outputs[0]
    replace_node(builder.graph, node, out)
    return None


def _lower_integer_to_float(builder: GraphBuilder, node: ir.Node) -> str | None:
    """com.microsoft MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp, b_zp[, bias]) → the standard chain."""
    inputs = list(node.inputs) + [None] * (7 - len(node.inputs))
    if inputs[4] is None or inputs[5] is None:
        return "a zero point is missing"
    a = _Quantized(inputs[0], inputs[2], inputs[4], 1)
    b = _Quantized(inputs[1], inputs[3], inputs[5], 1)
    return _integer_to_float(builder, node, a, b, inputs[6])


def _moves_integers(graph: ir.Graph, q: ir.Node, opset: int) -> bool:
    """DequantizeLinear → value-moving ops (MaxPool → Reshape, …) → QuantizeLinear with the same per-tensor scale
    and zero point become the ops on the integers (nothing is rounded: their outputs hold the input's grid values)."""
    chain, value = [], q.inputs[0]
    while _moving(value, opset) and len(list(value.uses())) == 1 and not value.is_graph_output():
        chain.append(value.producer())
        value = chain[-1].inputs[0]
        if producer(value, "DequantizeLinear") is not None:
            break
    source = _dequantized(value)
    if not chain or source is None or not source.per_tensor or not _same_qparams(source, q):
        return False
    chain[-1].replace_input_with(0, source.values)
    for op in chain:
        op.outputs[0].type = q.outputs[0].type
    replace_node(graph, q, chain[0].outputs[0])
    return True


def _moving(value: ir.Value | None, opset: int) -> bool:
    """Whether the value is the only used output of an op that only moves values of its first input."""
    op = None if value is None else value.producer()
    if op is None or op.op_type not in _MOVING or opset < _MOVING[op.op_type] or op.domain not in ("", "ai.onnx"):
        return False
    if op.op_type == "Resize" and attribute(op, "mode", "nearest") != "nearest":
        return False
    return op.outputs[0] is value and not any(len(list(v.uses())) for v in op.outputs[1:])


def _same_qparams(source: _Quantized, q: ir.Node) -> bool:
    pairs = [(source.scale, q.inputs[1]), (source.zero_point, q.inputs[2] if len(q.inputs) > 2 else None)]
    arrays = [(constant_array(x), constant_array(y)) for x, y in pairs]
    return all(x is not None and y is not None and x.dtype == y.dtype and np.array_equal(x, y) for x, y in arrays)


def _lower_planned(model: ir.Model, plans: Sequence[NodePlan]) -> dict[str, str]:
    """The planned products kept in QDQ form, with why."""
    declined = LowerToQLinearPass()(model).declined
    planned = {p.node.name for p in plans if not p.weight_only}
    return {name: reason for name, reason in declined.items() if name in planned}


register_format(OutputFormat(
    "qlinear", "ONNX-standard integer operators only (QLinearMatMul, QLinearConv, MatMulInteger), any ONNX runtime",
    _lower_planned, lowered_modes=frozenset({"static", "dynamic"}), requantize_products=True, standard_ops_only=True,
    refuses_weight_only="weight-only blocks are com.microsoft MatMulNBits / GatherBlockQuantized; use format qdq "
                        "(with blocks.format = qdq for opset-21 DequantizeLinear blocks)"))
