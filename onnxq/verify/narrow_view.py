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

from onnxq.irquery import attribute, constant_array, model_names, unique_name
from onnxq.passes.builder import replace_node

__all__ = ["narrow_view", "NARROW_BYTES"]

# A product's dequantized weight at most: what one run of an exact session holds for it.
NARROW_BYTES = 16 << 20
_B, _SCALES, _ZERO_POINTS, _G_IDX, _BIAS = 1, 2, 3, 4, 5  # MatMulNBits' inputs


def narrow_view(model: ir.Model, narrow_bytes: int | None = None) -> ir.Model:
    """The model itself when no MatMulNBits dequantizes more than narrow_bytes (None: NARROW_BYTES), else a copy
    with each such product split along N (its slices named after it: _1, _2, …)."""
    narrow_bytes = NARROW_BYTES if narrow_bytes is None else narrow_bytes
    if not any(_columns(node, narrow_bytes) for node in model.graph):
        return model
    view = model.clone()
    taken = model_names(view)
    for node in list(view.graph):
        columns = _columns(node, narrow_bytes)
        if columns:
            _split(view.graph, node, columns, taken)
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


def _split(graph: ir.Graph, node: ir.Node, columns: int, taken: set[str]) -> None:
    n = attribute(node, "N")
    weights = {i: _constant(value) for i, value in _weights(node).items()}
    made, parts = [], []
    for start in range(0, n, columns):
        stop = min(n, start + columns)
        inputs: list[ir.Value | None] = [node.inputs[0]]
        for i in range(1, len(node.inputs)):
            if i not in weights:
                inputs.append(node.inputs[i])
                continue
            array, cast_to = weights[i]
            sliced = _slice(graph, array, n, (start, stop), f"{node.inputs[i].name}_n{start}", taken)
            if cast_to is not None:  # float16 scales behind a Cast (passes.insert_blockwise): the slice's own Cast
                made.append(ir.node("Cast", [sliced], {"to": cast_to},
                                    name=unique_name(f"{sliced.name}_Cast", taken)))
                sliced = made[-1].outputs[0]
            inputs.append(sliced)
        attributes = {**{k: a.value for k, a in node.attributes.items()}, "N": stop - start}
        part = ir.node("MatMulNBits", inputs, attributes, domain="com.microsoft",
                       name=unique_name(node.name or "MatMulNBits", taken))
        made.append(part)
        parts.append(part.outputs[0])
    concat = ir.node("Concat", parts, {"axis": -1}, name=unique_name(f"{node.name}_Concat", taken))
    graph.insert_before(node, [*made, concat])
    producers = [value.producer() for value in _weights(node).values() if value.producer() is not None]
    replace_node(graph, node, concat.outputs[0])
    for producer in producers:  # the whole scales' Cast (or a Constant), read by nothing now
        if not producer.outputs[0].uses() and not producer.outputs[0].is_graph_output():
            graph.remove(producer, safe=True)


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


def _slice(graph: ir.Graph, array: np.ndarray, n: int, columns: tuple[int, int], name: str,
           taken: set[str]) -> ir.Value:
    """Rows start:stop of an input laid out by N first ([N, …] or [N × per_row] flat): a view, not a copy."""
    start, stop = columns
    per_row = array.size // n
    rows = array.reshape(n, per_row)[start:stop]
    value = ir.Value(name=unique_name(name, taken),
                     const_value=ir.Tensor(rows.reshape((stop - start,) + array.shape[1:]) if array.ndim > 1
                                           else rows.reshape(-1)))
    value.shape = ir.Shape(value.const_value.shape)
    value.type = ir.TensorType(value.const_value.dtype)
    graph.register_initializer(value)
    return value
