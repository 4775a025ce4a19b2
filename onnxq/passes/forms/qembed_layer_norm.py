"""com.microsoft EmbedLayerNormalization → com.microsoft QEmbedLayerNormalization (handlers/embed_layer_norm.py):
each table, gamma and beta as uint8 with one scale and zero point (the kernel's only form, whatever the config's
weight type), the ids and the mask as they were; the outputs keep their names and uses."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.config import QScheme
from onnxq.handlers.embed_layer_norm import EMBED_WEIGHTS, MASK
from onnxq.handlers.plan import NodePlan
from onnxq.passes.graph.builder import GraphBuilder, replace_node_with
from onnxq.passes.forms.registry import RewriteInputs, rewrite_form

__all__: list[str] = []

_MS = "com.microsoft"


@rewrite_form("qembed_layer_norm", stage=0)
def _qembed_layer_norm(model: ir.Model, plans: Sequence[NodePlan], inputs: RewriteInputs) -> dict[str, str]:
    builder = GraphBuilder(model.graph, QScheme("uint8", symmetric=False))
    model.opset_imports.setdefault(_MS, 1)
    for plan in plans:
        node = plan.node
        given = [node.inputs[i] if len(node.inputs) > i else None for i in EMBED_WEIGHTS]
        weights = [None if value is None else builder.quantized_weight(value, None) for value in given]
        parts = [[None if w is None else getattr(w, part) for w in weights]
                 for part in ("quantized", "scale", "zero_point")]
        mask = node.inputs[MASK] if len(node.inputs) > MASK else None
        attributes = {name: attr for name, attr in node.attributes.items() if name == "epsilon"}
        fused = builder.node("QEmbedLayerNormalization", [node.inputs[0], node.inputs[1], *parts[0], mask,
                                                          *parts[1], *parts[2]],
                             f"{node.name or 'EmbedLayerNormalization'}_quantized", node, attributes=attributes,
                             num_outputs=2, domain=_MS)
        replace_node_with(model.graph, node, fused)
    RemoveUnusedNodesPass()(model)
    return {}
