"""How much arithmetic each product node does on one verification batch: its multiply-adds, from onnx's shape
inference with the model's inputs fixed to that batch's shapes.

The fallback quantizes its float nodes again costliest first (search.reclaim): the aim is the fewest,
cheapest nodes float, and the share of the compute quantized is what makes the model faster. Where inference
leaves an output's shape open (a Reshape computed at run time, a subgraph), the node's constant weight times the
median positions of the nodes whose shapes are known stands in: an ordering, not a figure anyone reads.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from onnxq.io.irquery import attribute

__all__ = ["product_costs"]

logger = logging.getLogger(__name__)


def _dims(value: ir.Value | None) -> tuple[int, ...] | None:
    shape = None if value is None else value.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _weight(node: ir.Node) -> tuple[int, ...] | None:
    """The shape of the node's largest constant input."""
    shapes = [v.const_value.shape for v in node.inputs if v is not None and v.const_value is not None]
    return tuple(max(shapes, key=math.prod)) if shapes else None


def _matmul(node: ir.Node) -> float | None:
    left, out = _dims(node.inputs[0]), _dims(node.outputs[0])
    return None if left is None or out is None else math.prod(out) * left[-1]


def _gemm(node: ir.Node) -> float | None:
    left, out = _dims(node.inputs[0]), _dims(node.outputs[0])
    if left is None or out is None:
        return None
    return math.prod(out) * left[0 if attribute(node, "transA") else 1]


def _conv(node: ir.Node) -> float | None:
    weight, out = _dims(node.inputs[1]) or _weight(node), _dims(node.outputs[0])
    return None if weight is None or out is None else math.prod(out) * math.prod(weight[1:])


def _conv_transpose(node: ir.Node) -> float | None:
    # Every input position meets the whole of its group's kernel.
    weight, source = _dims(node.inputs[1]) or _weight(node), _dims(node.inputs[0])
    return None if weight is None or source is None else math.prod(source) * math.prod(weight[1:])


# Multiply-adds per op type, where the shapes are known.
_MACS: dict[str, Callable[[ir.Node], float | None]] = {
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "ConvTranspose": _conv_transpose,
}


def product_costs(model: ir.Model, input_shapes: Mapping[str, tuple[int, ...]],
                  names: Iterable[str]) -> dict[str, float]:
    """Multiply-adds of each named node (bodies included) on inputs of these shapes; the model is not changed."""
    wanted = set(names)
    inferred = model.clone()
    for value in inferred.graph.inputs:
        if value.name in input_shapes:
            value.shape = ir.Shape(input_shapes[value.name])
    ShapeInferencePass(strict_mode=False).call(inferred)
    nodes = {n.name: n for n in inferred.graph.all_nodes() if n.name in wanted}
    costs, open_nodes, positions = {}, [], []
    for name, node in nodes.items():
        macs = _MACS.get(node.op_type, lambda _: None)(node)
        weight = _weight(node)
        if macs is None:
            open_nodes.append(name)
        else:
            costs[name] = float(macs)
            if weight:
                positions.append(macs / math.prod(weight))
    typical = float(np.median(positions)) if positions else 1.0
    for name in open_nodes:
        weight = _weight(nodes[name])
        costs[name] = typical * (math.prod(weight) if weight else 1.0)
    if open_nodes:
        logger.info("compute: %d of %d node(s) without inferred shapes, estimated", len(open_nodes), len(nodes))
    return costs
