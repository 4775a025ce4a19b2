"""Dynamic quantization: activations quantized at run time (DynamicQuantizeLinear), int8 weights.

The pattern DynamicQuantizeLinear → MatMulInteger → Cast → Mul is what ORT's CPU optimizer fuses into
DynamicQuantizeMatMul. Weight-only plans (Gather) get the same DequantizeLinear as in static mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.config import QuantConfig
from onnxq.handlers.plan import NodePlan
from onnxq.irquery import attribute
from onnxq.passes.builder import GraphBuilder
from onnxq.passes.gather_rewrite import rewrite_gather

__all__ = ["InsertDynamicPass"]


class InsertDynamicPass(ir.passes.InPlacePass):
    def __init__(self, plans: Sequence[NodePlan], config: QuantConfig) -> None:
        super().__init__()
        self.plans = plans
        self.config = config

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        builder = GraphBuilder(graph, self.config.weights)
        dynamic_inputs: dict[ir.Value, ir.Node] = {}
        for plan in self.plans:
            node = plan.node
            if plan.weight_only:
                rewrite_gather(builder, node, plan.weights[0])
                continue
            x = node.inputs[0]
            if x not in dynamic_inputs:
                dynamic_inputs[x] = builder.node("DynamicQuantizeLinear", [x], f"{x.name}_DynamicQuantizeLinear",
                                                 node, num_outputs=3)
            x_q, x_scale, x_zero_point = dynamic_inputs[x].outputs
            spec = plan.weights[0]
            transposed = node.op_type == "Gemm" and attribute(node, "transB") == 1
            # MatMulInteger takes B as [K, N] with a zero point per column N (K pairs along axis 0).
            axis = None if spec.axis is None else 1
            weight = builder.quantized_weight(node.inputs[1], axis, transpose=transposed,
                                              pair_limit_axis=None if spec.pair_limit_axis is None else 0)
            base = node.name or "MatMul"
            integer = builder.node("MatMulInteger", [x_q, weight.quantized, x_zero_point, weight.zero_point],
                                   f"{base}_MatMulInteger", node)
            as_float = builder.node("Cast", [integer.outputs[0]], f"{base}_Cast", node,
                                    attributes={"to": ir.DataType.FLOAT})
            scale = builder.node("Mul", [x_scale, weight.scale], f"{base}_scale_Mul", node)
            result = builder.node("Mul", [as_float.outputs[0], scale.outputs[0]], f"{base}_output_Mul", node)
            out = result.outputs[0]
            if node.op_type == "Gemm" and len(node.inputs) > 2 and node.inputs[2] is not None:
                out = builder.node("Add", [out, node.inputs[2]], f"{base}_bias_Add", node).outputs[0]
            old = node.outputs[0]
            out.type, out.shape = old.type, old.shape
            old.replace_all_uses_with(out, replace_graph_outputs=True)
            out.name, old.name = old.name, None
            graph.remove(node, safe=True)
        RemoveUnusedNodesPass()(model)
        return ir.passes.PassResult(model, modified=bool(self.plans))
