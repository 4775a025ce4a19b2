"""Dynamic quantization: activations quantized at run time, int8 weights.

Per tensor: DynamicQuantizeLinear → MatMulInteger → Cast → Mul, the pattern ORT's CPU optimizer fuses into
DynamicQuantizeMatMul. Per token (numerics.per_token): rows flattened to [rows, K], one symmetric scale per row
(Abs → ReduceMax → Div 127 → Max), one QuantizeLinear with that run-time per-row scale and zero point 128, then
com.microsoft MatMulIntegerToFloat (ORT's U8S8 kernel, weight scales in its epilogue) and a Mul by the row scales
(docs/guides/language-models.md: the forms measured). Weight-only plans (Gather) get the same DequantizeLinear as in
static mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.config import QuantConfig
from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import attribute
from onnxq.numerics.per_token import MIN_SCALE, PER_TOKEN_ZERO_POINT
from onnxq.passes.graph.builder import GraphBuilder, replace_node
from onnxq.passes.graph.contract import PlannedRewritePass
from onnxq.passes.forms.registry import RewriteInputs, rewrite_form
from onnxq.passes.forms.gather import rewrite_gather

__all__ = ["InsertDynamicPass"]


class InsertDynamicPass(PlannedRewritePass):
    def __init__(self, plans: Sequence[NodePlan], config: QuantConfig) -> None:
        super().__init__(plans)
        self.config = config

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        builder = GraphBuilder(graph, self.config.weights)
        opset = model.opset_imports.get("", 13)
        if any(p.per_token for p in self.plans):
            model.opset_imports.setdefault("com.microsoft", 1)  # MatMulIntegerToFloat
        # Each activation is quantized once for all its consumers (q/k/v; gate/up): (uint8, zero point, scale,
        # the original shape when per-token flattened the rows).
        quantized_inputs: dict[tuple[ir.Value, bool], tuple] = {}
        # Gathers last: one may read the int8 weight of a product tied to its table (passes.forms.tied_table).
        for plan in sorted(self.plans, key=lambda p: p.weight_only):
            node = plan.node
            if plan.weight_only:
                rewrite_gather(builder, node, plan.weights[0], self.config.tie_tables)
                continue
            x = node.inputs[0]
            key = (x, plan.per_token)
            if key not in quantized_inputs:
                k = _weight_k(node)
                quantized_inputs[key] = (_per_token(builder, x, k, node, opset) if plan.per_token
                                         else _per_tensor(builder, x, node))
            x_q, x_zero_point, x_scale, x_shape = quantized_inputs[key]
            spec = plan.weights[0]
            transposed = node.op_type == "Gemm" and attribute(node, "transB") == 1
            # MatMulInteger takes B as [K, N] with a zero point per column N (K pairs along axis 0).
            axis = None if spec.axis is None else 1
            weight = builder.quantized_weight(node.inputs[1], axis, transpose=transposed,
                                              pair_limit_axis=None if spec.pair_limit_axis is None else 0)
            base = node.name or "MatMul"
            if plan.per_token:
                # ORT's MatMulIntegerToFloat takes a scalar activation scale only (its kernel reads one float), so
                # the row scales come after: U8S8 GEMM · weight scale [N] in the kernel, then · row scale [rows, 1].
                one = builder.initializer(f"{base}_unit_scale", np.array(1.0, np.float32))
                integer = builder.node("MatMulIntegerToFloat", [x_q, weight.quantized, one, weight.scale,
                                                                x_zero_point, weight.zero_point],
                                       f"{base}_MatMulIntegerToFloat", node, domain="com.microsoft")
                result = builder.node("Mul", [integer.outputs[0], x_scale], f"{base}_row_scale_Mul", node)
                if x_shape is not None:  # back to [..., N]
                    shape = _output_shape(builder, x_shape, weight.quantized.shape[1], base, node)
                    result = builder.node("Reshape", [result.outputs[0], shape], f"{base}_Reshape", node)
            else:
                integer = builder.node("MatMulInteger", [x_q, weight.quantized, x_zero_point, weight.zero_point],
                                       f"{base}_MatMulInteger", node)
                as_float = builder.node("Cast", [integer.outputs[0]], f"{base}_Cast", node,
                                        attributes={"to": ir.DataType.FLOAT})
                scale = builder.node("Mul", [x_scale, weight.scale], f"{base}_scale_Mul", node)
                result = builder.node("Mul", [as_float.outputs[0], scale.outputs[0]], f"{base}_output_Mul", node)
            out = result.outputs[0]
            if node.op_type == "Gemm" and len(node.inputs) > 2 and node.inputs[2] is not None:
                out = builder.node("Add", [out, node.inputs[2]], f"{base}_bias_Add", node).outputs[0]
            replace_node(graph, node, out)
        RemoveUnusedNodesPass()(model)
        return ir.passes.PassResult(model, modified=bool(self.plans))


@rewrite_form("dynamic", stage=0)
def _dynamic(model: ir.Model, plans: Sequence[NodePlan], inputs: RewriteInputs) -> dict[str, str]:
    InsertDynamicPass(plans, inputs.config)(model)
    return {}


def _per_tensor(builder: GraphBuilder, x: ir.Value, before: ir.Node) -> tuple[ir.Value, ir.Value, ir.Value]:
    node = builder.node("DynamicQuantizeLinear", [x], f"{x.name}_DynamicQuantizeLinear", before, num_outputs=3)
    x_q, x_scale, x_zero_point = node.outputs
    x_q.type = ir.TensorType(ir.DataType.UINT8)
    return x_q, x_zero_point, x_scale, None


def _per_token(builder: GraphBuilder, x: ir.Value, k: int, before: ir.Node,
               opset: int) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value | None]:
    """x [..., K] → (x_q uint8 [rows, K] = q + 128, zero point 128, row scale [rows, 1], the shape of x or None
    when x is 2-D), with q and scale of numerics.per_token. Rows are flattened so that one QuantizeLinear with a
    per-axis scale (axis 0, computed at run time) does the division, rounding, shift and clamp in one pass."""
    base = f"{x.name}_per_token"

    def op(op_type: str, inputs: list[ir.Value], name: str, **attributes) -> ir.Value:
        return builder.node(op_type, inputs, f"{base}_{name}", before, attributes=attributes).outputs[0]

    def const(name: str, value: np.ndarray) -> ir.Value:
        return builder.initializer(f"{base}_{name}", value)

    x_shape = None
    if x.shape is None or len(x.shape) != 2:
        x_shape = op("Shape", [x], "Shape")
        x = op("Reshape", [x, const("rows_K", np.array([-1, k], np.int64))], "Reshape")
    magnitude = op("Abs", [x], "Abs")
    if opset >= 18:  # ReduceMax's axes became an input in opset 18
        row_max = op("ReduceMax", [magnitude, const("axes", np.array([1], np.int64))], "ReduceMax", keepdims=1)
    else:
        row_max = op("ReduceMax", [magnitude], "ReduceMax", axes=[1], keepdims=1)
    scale = op("Div", [row_max, const("qmax", np.array(127, np.float32))], "Div")
    scale = op("Max", [scale, const("min_scale", np.array(MIN_SCALE, np.float32))], "Max")
    per_row = op("Reshape", [scale, const("flat", np.array([-1], np.int64))], "scale_flat")
    zero_points = op("Expand", [const("zero_point", np.array(PER_TOKEN_ZERO_POINT, np.uint8)),
                                op("Shape", [per_row], "scale_Shape")], "zero_points")
    x_q = op("QuantizeLinear", [x, per_row, zero_points], "QuantizeLinear", axis=0)
    x_q.type = ir.TensorType(ir.DataType.UINT8)
    zero_point = const("zero_point_scalar", np.array(PER_TOKEN_ZERO_POINT, np.uint8))
    return x_q, zero_point, scale, x_shape


def _weight_k(node: ir.Node) -> int:
    shape = ir.convenience.get_const_tensor(node.inputs[1]).shape
    return shape[1] if node.op_type == "Gemm" and attribute(node, "transB") == 1 else shape[0]


def _output_shape(builder: GraphBuilder, x_shape: ir.Value, n: int, base: str, before: ir.Node) -> ir.Value:
    """x's shape with the last dimension replaced by N."""
    leading = builder.node("Slice", [x_shape, builder.initializer(f"{base}_zero", np.array([0], np.int64)),
                                     builder.initializer(f"{base}_minus_one", np.array([-1], np.int64))],
                           f"{base}_leading_Slice", before)
    last = builder.initializer(f"{base}_N", np.array([n], np.int64))
    return builder.node("Concat", [leading.outputs[0], last], f"{base}_shape_Concat", before,
                        attributes={"axis": 0}).outputs[0]
