"""com.microsoft Attention → DynamicQuantizeLinear + com.microsoft QAttention (handlers/attention.py): the weights
int8 with their scale and zero point per column (or per tensor), the bias, mask and past as they were, the input
quantized to uint8 at run time; the outputs (and present) keep their names and uses."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.handlers.attention import QATTENTION_ATTRIBUTES
from onnxq.handlers.plan import NodePlan
from onnxq.passes.graph.builder import GraphBuilder, replace_node_with
from onnxq.passes.forms.registry import RewriteInputs, rewrite_form

__all__: list[str] = []

_MS = "com.microsoft"


@rewrite_form("qattention", stage=0)
def _qattention(model: ir.Model, plans: Sequence[NodePlan], inputs: RewriteInputs) -> dict[str, str]:
    builder = GraphBuilder(model.graph, inputs.config.weights)
    model.opset_imports.setdefault(_MS, 1)
    for plan in plans:
        node, spec = plan.node, plan.weights[0]
        weight = builder.quantized_weight(node.inputs[1], spec.axis, pair_limit_axis=spec.pair_limit_axis)
        x = node.inputs[0]
        dynamic = builder.node("DynamicQuantizeLinear", [x], f"{x.name or 'input'}_DynamicQuantizeLinear", node,
                               num_outputs=3)
        x_q, x_scale, x_zero = dynamic.outputs
        mask = node.inputs[3] if len(node.inputs) > 3 else None
        past = node.inputs[4] if len(node.inputs) > 4 else None
        attributes = {name: attr for name, attr in node.attributes.items() if name in QATTENTION_ATTRIBUTES}
        fused = builder.node("QAttention", [x_q, weight.quantized, node.inputs[2], x_scale, weight.scale, mask,
                                            x_zero, weight.zero_point, past],
                             f"{node.name or 'Attention'}_QAttention", node, attributes=attributes,
                             num_outputs=len(node.outputs), domain=_MS)
        replace_node_with(model.graph, node, fused)
    RemoveUnusedNodesPass()(model)
    return {}
