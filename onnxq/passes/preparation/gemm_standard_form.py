"""Gemm with a constant weight made transA = 0, alpha = beta = 1 before planning: alpha folded into the weight, beta
into a constant C (or a Mul where C is computed; nothing where there is no C), a transposed A given a Transpose.

Y = alpha · A' · B' + beta · C is then the same product every form quantizes: dynamic and weight-only forms
(MatMulInteger, MatMulNBits) have no transA, alpha or beta, and ORT's QDQ Gemm fusion takes alpha = 1 only (a static
alpha = 0.5 Gemm ran as DequantizeLinear + float Gemm). Scaling B by alpha before its scales are chosen changes no
code: per-channel int8 and 4-bit blocks scale with it. The folded model is a clone; the model as given stays the
verification's reference."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.io.irquery import attribute
from onnxq.passes.graph.builder import GraphBuilder, rewrite_each

__all__ = ["gemms_in_standard_form"]


def gemms_in_standard_form(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone with every Gemm of a constant float weight in standard form, a note), or (the model itself, None)."""
    standard, count = rewrite_each(model, _nonstandard, lambda builder, node, _: _standardize(builder, node))
    if not count:
        return model, None
    return standard, (f"{count} Gemm(s) with transA, alpha or beta made standard (alpha folded into the weight, "
                      "beta into C, A transposed) so that every form can quantize them")


def _constant_float(value: ir.Value | None) -> np.ndarray | None:
    tensor = None if value is None or value.is_graph_input() else ir.convenience.get_const_tensor(value)
    return None if tensor is None or tensor.dtype != ir.DataType.FLOAT else tensor.numpy()


def _nonstandard(node: ir.Node) -> bool:
    if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or _constant_float(node.inputs[1]) is None:
        return False
    return bool(attribute(node, "transA", 0) or attribute(node, "alpha", 1.0) != 1.0
                or attribute(node, "beta", 1.0) != 1.0)


def _standardize(builder: GraphBuilder, node: ir.Node) -> None:
    alpha, beta = float(attribute(node, "alpha", 1.0)), float(attribute(node, "beta", 1.0))
    name = node.name or "Gemm"
    if attribute(node, "transA", 0):
        transpose = builder.node("Transpose", [node.inputs[0]], f"{name}_A_transposed", node,
                                 attributes={"perm": [1, 0]})
        node.replace_input_with(0, transpose.outputs[0])
    if alpha != 1.0:
        weight = _constant_float(node.inputs[1])
        scaled = (weight.astype(np.float64) * alpha).astype(np.float32)
        node.replace_input_with(1, builder.initializer(f"{node.inputs[1].name or 'B'}_times_alpha", scaled))
    c = node.inputs[2] if len(node.inputs) > 2 else None
    if beta != 1.0 and c is not None:
        node.replace_input_with(2, _scaled_c(builder, node, c, beta))
    for key, default in (("transA", ir.AttrInt64("transA", 0)), ("alpha", ir.AttrFloat32("alpha", 1.0)),
                         ("beta", ir.AttrFloat32("beta", 1.0))):
        if key in node.attributes:
            node.attributes[key] = default


def _scaled_c(builder: GraphBuilder, node: ir.Node, c: ir.Value, beta: float) -> ir.Value:
    """beta · C: a new constant where C is one, else a Mul before the Gemm."""
    constant = _constant_float(c)
    if constant is not None:
        return builder.initializer(f"{c.name or 'C'}_times_beta", (constant.astype(np.float64) * beta)
                                   .astype(np.float32))
    factor = builder.initializer(f"{node.name or 'Gemm'}_beta", np.array(beta, np.float32))
    return builder.node("Mul", [c, factor], f"{node.name or 'Gemm'}_C_times_beta", node).outputs[0]
