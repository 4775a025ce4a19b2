"""Preconditions checked before anything is planned. Checks only; nothing is converted."""

from __future__ import annotations

import onnx
import onnx_ir as ir

from onnxq.errors import UnsupportedModelError

__all__ = ["MIN_OPSET", "check_model"]

# Per-axis QuantizeLinear/DequantizeLinear arrived in opset 13.
MIN_OPSET = 13


def check_model(model: ir.Model) -> None:
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if opset is None:
        raise UnsupportedModelError("the model imports no ONNX opset — re-export it with a standard opset (>= 13)")
    if opset < MIN_OPSET:
        raise UnsupportedModelError(
            f"the model uses opset {opset}; onnxq needs opset >= {MIN_OPSET} for per-channel QuantizeLinear — "
            f"convert it with onnx.version_converter.convert_version(model, {MIN_OPSET})")
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise UnsupportedModelError(
            f"the model uses opset {opset}, newer than this onnx release knows ({newest}) — upgrade onnx and "
            "onnxruntime, or export with an older opset")
    if any(node.op_type == "QuantizeLinear" or node.op_type == "DequantizeLinear" for node in model.graph):
        raise UnsupportedModelError(
            "the model is already quantized (it has QuantizeLinear/DequantizeLinear nodes) — pass the float model")
