"""The exact view of a model whose MatMulNBits products are wide: each one split along N into products of at most
NARROW_BYTES of dequantized weight, their outputs concatenated.

Without graph optimizations ORT does not pre-pack MatMulNBits' blocks: each run dequantizes the whole weight into a
float32 buffer and multiplies by it. For a language model's lm_head that buffer is the vocabulary times the hidden
size (SmolLM2-135M: 49,152 × 576, 113 MB) in every run of the verification's exact quantization, where the file
itself holds 28 MB. Each output column is the same dot product over K whichever columns share a product, so the
outputs are the whole product's bit for bit (tested); the slices are views of the packed weight, no copy. The
sensitivity's switch model keeps its products whole: with slices its peak was no lower (it is not this buffer)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.io.irquery import attribute, constant_array
from onnxq.passes.graph.builder import GraphBuilder, replace_node

__all__ = ["narrow_view", "NARROW_BYTES"]

# A product's dequantized weight at most: what one run of an exact session holds for it.
NARROW_BYTES = 16 << 20
_B, _SCALES, _ZERO_POINTS, _G_IDX, _BIAS = 1, 2, 3, 4, 5  # MatMulNBits' inputs


def narrow_view(model: ir.Model, narrow_bytes: int | None = None) -> ir.Model:
    """The model itself when no MatMulNBits dequantizes more than narrow_bytes (None: NARROW_BYTES), else a copy
    with each such product split along N (its slices named after it)."""
    narrow_bytes = NARROW_BYTES if narrow_bytes is None else narrow_bytes
    wide = {i: columns for i, node in enumerate(model.graph) if (columns := _columns(node, narrow_bytes))}
    if not wide:
        return model
    view = model.clone()  # the same nodes in the same order; the tensors shared
    builder = GraphBuilder(view.graph)
    for i, node in enumerate(list(view.graph)):
        if i in wide:
            _split(builder, node, wide[i])
    return view


def _columns(node: ir.Node, narrow_bytes: int) -> int:
    """The columns of each slice for a wide MatMulNBits whose weight inputs are constants; 0: left whole."""
    if node.op_type != "MatMulNBits" or node.domain != "com.microsoft":
        return 0
    k, n = attribute(node, "K"), attribute(node, "N")
    if not k or not n or k * n * 4 <= narrow_bytes:
        return 0
    if len(node.inputs) > _G_IDX and node.inputs[_G_IDX] is not None:
        return 0  # g_idx reorders K: left as it is
    constants = [_constant(value) for value in _weights(node).values()]
    if any(c is None or c[0].size % n for c in constants):
        return 0
    return max(1, narrow_bytes // (k * 4))


def _weights(node: ir.Node) -> dict[int, ir.Value]:
    """The inputs laid out by N (B, scales, zero points, bias) the node has, by position."""
    return {i: node.inputs[i] for i in (_B, _SCALES, _ZERO_POINTS, _BIAS)
            if len(node.inputs) > i and node.inputs[i] is not None}


def _split(builder: GraphBuilder, node: ir.Node, columns: int) -> None:
    n = attribute(node, "N")
    weights = {i: _constant(value) for i, value in _weights(node).items()}
    attributes = {k: a.value for k, a in node.attributes.items()}
    parts = []
    for start in range(0, n, columns):
        stop = min(n, start + columns)
        inputs = list(node.inputs)
        for i, (array, cast_to) in weights.items():
            rows = array.reshape(n, -1)[start:stop]  # a view: the input is laid out by N first, [N, …] or flat
            sliced = rows.reshape((stop - start, *array.shape[1:])) if array.ndim > 1 else rows.reshape(-1)
            inputs[i] = builder.initializer(f"{node.inputs[i].name}_n{start}", sliced)
            if cast_to is not None:  # float16 scales behind a Cast (passes.forms.blockwise): the slice's own Cast
                inputs[i] = builder.node("Cast", [inputs[i]], f"{inputs[i].name}_Cast", node,
                                         attributes={"to": cast_to}).outputs[0]
        parts.append(builder.node("MatMulNBits", inputs, node.name or "MatMulNBits", node,
                                  attributes={**attributes, "N": stop - start}, domain="com.microsoft").outputs[0])
    concat = builder.node("Concat", parts, f"{node.name}_Concat", node, attributes={"axis": -1})
    producers = [value.producer() for value in _weights(node).values() if value.producer() is not None]
    replace_node(builder.graph, node, concat.outputs[0])
    for producer in producers:  # the whole scales' Cast (or a Constant), read by nothing now
        if not producer.outputs[0].uses() and not producer.outputs[0].is_graph_output():
            builder.graph.remove(producer, safe=True)


def _constant(value: ir.Value) -> tuple[np.ndarray, ir.DataType | None] | None:
    """A weight input's constant, and the type a Cast of it makes when it is read through one; None otherwise."""
    array = constant_array(value)
    if array is not None:
        return array, None
    cast = value.producer()
    if cast is None or cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx"):
        return None
    array = constant_array(cast.inputs[0])
    return None if array is None else (array, ir.DataType(attribute(cast, "to")))
