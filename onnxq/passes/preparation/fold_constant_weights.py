"""Weights reached through a data-free op on a constant, made plain initializers before planning, so that every
mode and format sees a constant weight: Identity (exporters write `W → Identity` for a shared weight), Cast to
float32 (`W16 → Cast` for a float16 checkpoint), and the layout ops Unsqueeze / Squeeze / Reshape / Transpose /
Slice / Concat with constant arguments (PyTorch's LSTM export reorders the gates with Slice → Concat → Unsqueeze into
the LSTM's [D, 4H, K]), and arithmetic on constants (passes.preparation.fold_arithmetic: a weight normalization's ReduceL2 → Div
→ Mul). Chains fold one node at a time, in graph order (a float16 chain up to its Cast to float32);
If / Loop / Scan bodies too. The folded model is a clone; the model as given stays the reference the verification
compares with (each fold is the numpy operation ONNX specifies, exact)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.io.irquery import attribute, constant_array, model_names, unique_name
from onnxq.passes.preparation.fold_arithmetic import ARITHMETIC_FOLDS

__all__ = ["folded_constant_weights", "WEIGHT_FOLDS"]


def _cast(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
    if attribute(node, "to", 0) != ir.DataType.FLOAT or array.dtype.kind != "f":
        return None
    return array.astype(np.float32)


def _axes(node: ir.Node) -> list[int] | None:
    """Unsqueeze's / Squeeze's axes: an attribute before opset 13, input 1 from then on (None: not constant)."""
    given = attribute(node, "axes", None)
    if given is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        given = constant_array(node.inputs[1])
    return None if given is None else [int(a) for a in np.asarray(given).reshape(-1)]


def _unsqueeze(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
    axes = _axes(node)
    if axes is None:
        return None
    rank = array.ndim + len(axes)
    return np.expand_dims(array, tuple(sorted(a % rank for a in axes)))


def _squeeze(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
    axes = _axes(node)
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        return None  # axes computed at run time
    return np.squeeze(array, axis=None if axes is None else tuple(a % array.ndim for a in axes))


def _reshape(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
    shape = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
    if shape is None:
        return None
    dims = [int(d) for d in shape.reshape(-1)]
    if not attribute(node, "allowzero", 0):  # 0 copies the input's dimension
        dims = [array.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return array.reshape(dims)


def _slice(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
    """Slice: starts, ends, axes, steps as inputs 1-4 (opset 10+) or attributes (before)."""
    if len(node.inputs) > 1:
        args = [constant_array(v) if v is not None else None for v in node.inputs[1:5]]
        if any(a is None and v is not None for a, v in zip(args, node.inputs[1:5])) or len(args) < 2:
            return None
        starts, ends, axes, steps = (args + [None, None])[:4]
    else:
        starts, ends, axes, steps = (attribute(node, name, None) for name in ("starts", "ends", "axes", None))
    starts, ends = np.asarray(starts).reshape(-1), np.asarray(ends).reshape(-1)
    axes = range(len(starts)) if axes is None else np.asarray(axes).reshape(-1)
    steps = np.ones(len(starts), np.int64) if steps is None else np.asarray(steps).reshape(-1)
    index = [slice(None)] * array.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[int(axis) % array.ndim] = slice(*(int(np.clip(b, -2**62, 2**62)) for b in (start, end, step)))
    return np.ascontiguousarray(array[tuple(index)])


def _concat(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
    parts = [constant_array(v) if v is not None else None for v in node.inputs]
    if any(p is None or p.dtype != array.dtype for p in parts):
        return None
    return np.concatenate(parts, axis=int(attribute(node, "axis", 0)))


def _transpose(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
    perm = attribute(node, "perm", None)
    return np.ascontiguousarray(np.transpose(array, None if perm is None else [int(p) for p in perm]))


# Op type → its result on a constant first input (None: an argument is not constant, so it does not fold).
WEIGHT_FOLDS: dict[str, Callable[[ir.Node, np.ndarray], np.ndarray | None]] = {
    "Identity": lambda node, array: array if array.dtype == np.float32 else None,
    "Cast": _cast, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Reshape": _reshape, "Transpose": _transpose,
    "Slice": _slice, "Concat": _concat, **ARITHMETIC_FOLDS,
}


def folded_constant_weights(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone with each fold of a constant weight replaced by an initializer, a note), or (the model itself, None)
    when there is none. A fold keeps its input's float type (a float16 chain folds up to its Cast to float32)."""
    if not any(_folded(node) is not None for node in model.graph.all_nodes()):
        return model, None
    folded = model.clone()
    taken = model_names(folded)  # a body's new initializer must not shadow any name
    counts: dict[str, int] = {}
    for node in list(folded.graph.all_nodes()):
        array = _folded(node)
        if array is None:
            continue
        name = unique_name(f"{node.outputs[0].name or 'weight'}_folded", taken)
        tensor = ir.tensor(array, name=name)
        value = ir.Value(name=name, const_value=tensor, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype))
        node.graph.register_initializer(value)
        node.outputs[0].replace_all_uses_with(value)
        node.graph.remove(node, safe=True)
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    RemoveUnusedNodesPass()(folded)  # the Constant nodes only the folded ops read (their float copies would stay)
    kinds = " / ".join(f"{n} {op}" for op, n in sorted(counts.items()))
    return folded, f"{sum(counts.values())} node(s) computing a constant weight ({kinds}) folded into initializers"


def _folded(node: ir.Node) -> np.ndarray | None:
    """The float weight the node computes from a constant (not a graph input; its output not a graph output), or
    None."""
    fold = WEIGHT_FOLDS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if fold is None or not node.inputs or node.inputs[0] is None or node.outputs[0].is_graph_output():
        return None
    source = node.inputs[0]
    if source.is_graph_input():
        return None
    tensor = ir.convenience.get_const_tensor(source)
    if tensor is None or tensor.size == 0 or len(tensor.shape) == 0:  # a weight or a bias, not a scalar
        return None
    if tensor.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE):
        return None  # shapes and indices (int64) are not weights
    result = fold(node, np.asarray(tensor.numpy()))
    return None if result is None or result.dtype.kind != "f" else result
