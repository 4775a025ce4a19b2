"""onnx's version converter on an onnx_ir model: its functions inlined, the graph handed to onnx without its large
weights (a proto holds at most 2 GB, and copying the weights costs their size again), the weights put back after.
What onnxscript's ConvertVersionPass does for the opsets below its own converter's (18), where it falls back to
onnx's; done here with onnx_ir's passes, without importing onnxscript (a quarter of a second on every run of an old
model, more than the conversion itself on a small CNN)."""

from __future__ import annotations

import onnx
import onnx.version_converter
import onnx_ir as ir
from onnx_ir.passes import Sequential
from onnx_ir.passes.common import (InlinePass, RemoveUnusedFunctionsPass, RemoveUnusedNodesPass,
                                   RemoveUnusedOpsetsPass)

__all__ = ["convert_opset"]

# A weight of more elements than this leaves the proto handed to onnx as a typed graph input (onnxscript's bound).
_BIG_TENSOR_ELEMENTS = 1000


def convert_opset(model: ir.Model, target: int) -> None:
    """Converts the model's default-domain opset to `target` in place (its graph replaced). Raises what onnx's
    converter raises where it cannot."""
    Sequential(InlinePass(), RemoveUnusedFunctionsPass(), RemoveUnusedOpsetsPass())(model)
    proto = _weightless_proto(model)
    converted = ir.from_proto(onnx.version_converter.convert_version(proto, target_version=target))
    for value in converted.graph.inputs:  # the weights back, as initializers
        if value.name in model.graph.initializers:
            value.const_value = model.graph.initializers[value.name].const_value
            converted.graph.register_initializer(value)
    user_inputs = converted.graph.inputs[:len(model.graph.inputs)]
    converted.graph.inputs.clear()
    converted.graph.inputs.extend(user_inputs)
    model.graph = converted.graph
    Sequential(RemoveUnusedNodesPass(), RemoveUnusedFunctionsPass(), RemoveUnusedOpsetsPass())(model)


def _weightless_proto(model: ir.Model) -> onnx.ModelProto:
    """The model as a proto, every initializer a typed graph input and the large ones without their values; the
    model itself unchanged when it returns."""
    initializers = tuple(model.graph.initializers.values())
    tensors = {v.name: v.const_value for v in initializers}
    input_count = len(model.graph.inputs)
    for value in initializers:
        if value.shape is None:
            value.shape = value.const_value.shape
        if value.dtype is None:
            value.dtype = value.const_value.dtype
        if value not in model.graph.inputs:
            model.graph.inputs.append(value)
        if value.const_value.size > _BIG_TENSOR_ELEMENTS:
            value.const_value = None
            model.graph.initializers.pop(value.name)
    try:
        return ir.serde.serialize_model(model)
    finally:
        for value in initializers:
            value.const_value = tensors[value.name]
            model.graph.register_initializer(value)
        inputs = model.graph.inputs[:input_count]
        model.graph.inputs.clear()
        model.graph.inputs.extend(inputs)
