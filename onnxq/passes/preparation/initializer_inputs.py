"""Initializers also listed as graph inputs read as the constants they are. Before IR version 4 ONNX required every
initializer to be a graph input (the ONNX Model Zoo's opset 7-9 CNNs, old PyTorch exports with
keep_initializers_as_inputs): ORT then treats each as a default a feed may override — not a constant, so neither
onnxq's planners (no weight to quantize: "W is not a constant float32 weight") nor ORT's optimizers (no constant
folding, no QDQ fusion of the weights' DequantizeLinear) would see them as weights. The prepared clone lists only
the inputs the data feeds, as onnxruntime's remove_initializer_from_input tool and onnx-simplifier do; the model as
given stays the verification's reference, run with its defaults."""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["initializers_as_constants"]

_FIRST_IR_WITHOUT_THE_RULE = 4  # IR version 4 let initializers stay out of the graph's inputs


def initializers_as_constants(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone whose main graph lists no initializer among its inputs, a note), or (the model itself, None) when it
    lists none."""
    if not _initializer_inputs(model.graph):
        return model, None
    constant = model.clone()
    listed = _initializer_inputs(constant.graph)
    for value in listed:
        constant.graph.inputs.remove(value)
    constant.ir_version = max(constant.ir_version or 0, _FIRST_IR_WITHOUT_THE_RULE)
    return constant, (f"{len(listed)} initializer(s) also listed as graph inputs (IR version {model.ir_version}) read "
                      "as constants: the quantized model's inputs are the ones the data feeds")


def _initializer_inputs(graph: ir.Graph) -> list[ir.Value]:
    return [value for value in graph.inputs if value.is_initializer()]
