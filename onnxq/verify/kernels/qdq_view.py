"""The QDQ view of a standard QOperator model: each QLinearMatMul / QLinearConv written back as DequantizeLinear →
MatMul / Conv → QuantizeLinear, the computation the spec defines for it. Under ORT_DISABLE_ALL that view runs the
product exactly in float, so the saturation emulator (verify.kernels.emulate) can add AVX2's error before the requantization,
as it does for a QDQ model; the operator itself admits no error input."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.passes.graph.builder import replace_node

__all__ = ["qdq_view"]

_PRODUCTS = {"QLinearMatMul": ("MatMul", -1), "QLinearConv": ("Conv", 0)}  # op, the weight scale's axis


def qdq_view(model: ir.Model) -> ir.Model:
    """The model itself when it holds no QLinear product, else a copy in QDQ form (same node names)."""
    if not any(n.op_type in _PRODUCTS and n.domain in ("", "ai.onnx") for n in model.graph):
        return model
    view = model.clone()
    for node in list(view.graph):
        if node.op_type in _PRODUCTS and node.domain in ("", "ai.onnx"):
            _raise(view.graph, node)
    return view


def _raise(graph: ir.Graph, node: ir.Node) -> None:
    op_type, weight_axis = _PRODUCTS[node.op_type]
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = node.inputs[:8]
    per_axis = w_scale.shape is not None and w_scale.shape.rank() == 1
    made = [ir.node("DequantizeLinear", [x, x_scale, x_zp], name=f"{node.name}_x_DequantizeLinear"),
            ir.node("DequantizeLinear", [w, w_scale, w_zp], {"axis": weight_axis} if per_axis else {},
                    name=f"{node.name}_w_DequantizeLinear")]
    inputs = [made[0].outputs[0], made[1].outputs[0]]
    if len(node.inputs) > 8 and node.inputs[8] is not None:  # int32 bias at scale x_scale · w_scale, zero point 0
        bias_scale = ir.node("Mul", [x_scale, w_scale], name=f"{node.name}_bias_scale")
        made += [bias_scale, ir.node("DequantizeLinear", [node.inputs[8], bias_scale.outputs[0]],
                                     {"axis": 0} if per_axis else {}, name=f"{node.name}_bias_DequantizeLinear")]
        inputs.append(made[-1].outputs[0])
    for value in inputs:
        value.type = ir.TensorType(ir.DataType.FLOAT)
    product = ir.node(op_type, inputs, {k: a for k, a in node.attributes.items()}, name=node.name)
    requantize = ir.node("QuantizeLinear", [product.outputs[0], y_scale, y_zp], name=f"{node.name}_QuantizeLinear")
    graph.insert_before(node, [*made, product, requantize])
    replace_node(graph, node, requantize.outputs[0])
