"""A float16 model's weights that stay float are stored float16 again, each read through a Cast to float32: the
quantized file is never larger than the float16 file for what it leaves float (a node kept float by never-slower,
an excluded one, a norm). The arithmetic is unchanged — their values are float16 numbers (passes.float16.model made
them float32 exactly) — and onnxruntime folds each Cast of a constant when it optimizes the session."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.io.irquery import model_names, unique_name

__all__ = ["stored_as_float16", "MIN_STORED_BYTES"]

_HALF, _FLOAT = ir.DataType.FLOAT16, ir.DataType.FLOAT
# Smaller float32 constants stay as they are: a Cast node costs more than the bytes it saves.
MIN_STORED_BYTES = 4096


def stored_as_float16(model: ir.Model, given: ir.Model) -> int:
    """In place: each main-graph float32 initializer of `model` that `given` (the float16 model as given) holds
    under its name as float16, with the same values, stored float16 behind a Cast. Returns how many."""
    halves = {name: value.const_value for name, value in given.graph.initializers.items()
              if value.dtype == _HALF and value.const_value is not None}
    if not halves:
        return 0
    graph, taken, stored = model.graph, model_names(model), 0
    for name, value in list(graph.initializers.items()):
        original = halves.get(name)
        if original is None or not _same_values(value, original) or value.is_graph_output() \
                or value in graph.inputs:
            continue
        half = ir.Value(name=unique_name(f"{name}_float16", taken), shape=value.shape, type=ir.TensorType(_HALF),
                        const_value=original)
        wide = ir.Value(name=unique_name(f"{name}_float32", taken), shape=value.shape, type=ir.TensorType(_FLOAT))
        value.replace_all_uses_with(wide)
        del graph.initializers[name]
        graph.register_initializer(half)
        cast = ir.node("Cast", [half], {"to": _FLOAT.value}, outputs=[wide], name=unique_name(f"{name}_Cast", taken))
        graph.insert_before(next(iter(graph)), cast)
        stored += 1
    return stored


def _same_values(value: ir.Value, original: ir.TensorProtocol) -> bool:
    tensor = value.const_value
    if tensor is None or value.dtype != _FLOAT or tensor.nbytes < MIN_STORED_BYTES \
            or tuple(tensor.shape) != tuple(original.shape):
        return False
    return bool(np.array_equal(tensor.numpy(), original.numpy().astype(np.float32)))
