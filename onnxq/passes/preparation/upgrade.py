"""A model below the opset onnxq needs (MIN_OPSET: per-axis QuantizeLinear) is converted, not refused: onnx's version
converter, handed the graph without its weights (passes.preparation.opset_conversion). Refused only
when the conversion fails, with onnx's reason. The converted model is a clone: the model as given stays the float
reference the verification compares with, so a conversion that changed the arithmetic would show there."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.errors import UnsupportedModelError, one_line
from onnxq.io.naming import name_nodes
from onnxq.passes.preparation.checks import MIN_OPSET, onnx_opset
from onnxq.passes.preparation.opset_conversion import convert_opset

__all__ = ["upgraded", "ORT_MIN_OPSET"]

# onnxruntime implements ONNX opset 7 and later (its documented compatibility): a model below it cannot be the
# float reference as given (Gemm-6: "Could not find an implementation"), its conversion is.
ORT_MIN_OPSET = 7

def upgraded(model: ir.Model) -> tuple[ir.Model, str | None]:
    """The model at MIN_OPSET when its ONNX opset is below it (a converted clone) and a note for the report; the model
    itself and None otherwise."""
    opset = onnx_opset(model)
    if opset is None or opset >= MIN_OPSET:
        return model, None
    converted = model.clone()
    try:
        convert_opset(converted, MIN_OPSET)
    except Exception as e:  # noqa: BLE001 — onnx's converter raises its own types (ConvertError, RuntimeError, ...)
        raise UnsupportedModelError(
            f"the model uses opset {opset}; onnxq needs opset >= {MIN_OPSET} for per-channel QuantizeLinear, and "
            f"onnx's version converter could not convert it ({one_line(str(e) or type(e).__name__)[:300]}) — "
            f"re-export the model with opset >= {MIN_OPSET}") from None
    if onnx_opset(converted) != MIN_OPSET:
        raise UnsupportedModelError(f"the model uses opset {opset}; onnx's version converter left it at opset "
                                    f"{onnx_opset(converted)}, not {MIN_OPSET} — re-export the model with opset >= "
                                    f"{MIN_OPSET}")
    added = len(name_nodes(converted))  # the converter's new nodes (Constant axes) come unnamed
    reference = ("verified against the model as given" if opset >= ORT_MIN_OPSET else
                 f"onnxruntime runs opset {ORT_MIN_OPSET} and later, so the float model it is verified against is the "
                 "converted one")
    return converted, (f"opset {opset} converted to {MIN_OPSET} with onnx's version converter ({added} node(s) "
                       f"added); {reference}")
