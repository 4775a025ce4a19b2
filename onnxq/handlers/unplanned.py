"""Nothing skipped in silence: a node that holds weights (a constant float input of weight size) and that no planner
took or refused is listed under "left float" with why. MiniLM after onnxruntime's transformer optimizer holds a fused
com.microsoft Attention (its 384 × 1152 QKV weights) and an EmbedLayerNormalization (the 30522 × 384 table): a node
kind without a planner stays float, and its weights keep the file near float's size (0.74× instead of 0.25× for
these two, which have planners: handlers/attention.py, handlers/embed_layer_norm.py)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

import onnx_ir as ir

from onnxq.handlers.plan import Skip
from onnxq.handlers.registry import handler_for

__all__ = ["unplanned_weights", "WEIGHT_VALUES"]

# Elements from which a constant input is a weight worth naming (a LayerNorm's 384 scales are not; a 32 × 32
# matrix is).
WEIGHT_VALUES = 1024


def _weights(node: ir.Node) -> list[str]:
    """The node's constant float inputs of weight size, as 'name [shape]'."""
    found = []
    for value in node.inputs:
        tensor = None if value is None or value.is_graph_input() else ir.convenience.get_const_tensor(value)
        if tensor is None or not tensor.dtype.is_floating_point() or tensor.size < WEIGHT_VALUES:
            continue
        found.append(f"{value.name} {list(tensor.shape.numpy())}")
    return found


def unplanned_weights(nodes: Iterable[ir.Node], decided: Collection[ir.Node], op_types: Collection[str]) -> list[Skip]:
    """A skip for each node among `nodes` that holds weights and that no planner decided on (`decided`)."""
    skips = []
    for node in nodes:
        if node in decided:
            continue
        weights = _weights(node)
        if not weights:
            continue
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        held = ", ".join(weights[:2]) + (", …" if len(weights) > 2 else "")
        if handler_for(node) is not None and node.op_type not in op_types:
            why = f"its op type is not in op_types (config), so its weights ({held}) stay float"
        elif handler_for(node) is not None:
            why = f"its planner does not take this form of {node.op_type}: its weights ({held}) stay float"
        else:
            kind = f"{domain}:{node.op_type}" if domain else node.op_type
            why = f"onnxq does not quantize {kind}: its constant input(s) ({held}) stay float"
        skips.append(Skip(node, why))
    return skips
