"""A model below the opset onnxq needs (MIN_OPSET: per-axis QuantizeLinear) is converted, not refused: onnx's version
converter, through onnxscript's ConvertVersionPass, which hands onnx the graph without its weights. Refused only
when the conversion fails, with onnx's reason. The converted model is a clone: the model as given stays the float
reference the verification compares with, so a conversion that changed the arithmetic would show there."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import onnx_ir as ir

from onnxq.errors import UnsupportedModelError, one_line
from onnxq.io.naming import name_nodes
from onnxq.passes.preparation.checks import MIN_OPSET, onnx_opset

__all__ = ["upgraded", "ORT_MIN_OPSET"]

# onnxruntime implements ONNX opset 7 and later (its documented compatibility): a model below it cannot be the
# float reference as given (Gemm-6: "Could not find an implementation"), its conversion is.
ORT_MIN_OPSET = 7

_CONVERTER_LOGGER = "onnxscript.version_converter"


def upgraded(model: ir.Model) -> tuple[ir.Model, str | None]:
    """The model at MIN_OPSET when its ONNX opset is below it (a converted clone) and a note for the report; the model
    itself and None otherwise."""
    opset = onnx_opset(model)
    if opset is None or opset >= MIN_OPSET:
        return model, None
    # Imported here: onnxscript's converter costs every run ~17 MB of resident modules, and only old models need it.
    from onnxscript.version_converter import ConvertVersionPass

    converted = model.clone()
    with _converter_messages() as messages:
        ConvertVersionPass(MIN_OPSET, fallback=True)(converted)
    if onnx_opset(converted) != MIN_OPSET:
        reason = next((m for m in reversed(messages) if m), "no reason given")
        raise UnsupportedModelError(
            f"the model uses opset {opset}; onnxq needs opset >= {MIN_OPSET} for per-channel QuantizeLinear, and "
            f"onnx's version converter could not convert it ({one_line(reason)[:300]}) — re-export the model with "
            f"opset >= {MIN_OPSET}")
    added = len(name_nodes(converted))  # the converter's new nodes (Constant axes) come unnamed
    reference = ("verified against the model as given" if opset >= ORT_MIN_OPSET else
                 f"onnxruntime runs opset {ORT_MIN_OPSET} and later, so the float model it is verified against is the "
                 "converted one")
    return converted, (f"opset {opset} converted to {MIN_OPSET} with onnx's version converter ({added} node(s) "
                       f"added); {reference}")


@contextlib.contextmanager
def _converter_messages() -> Iterator[list[str]]:
    """The converter's log records (it logs its failure instead of raising), kept off the user's console."""
    messages: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            error = record.exc_info[1] if record.exc_info else None
            messages.append(str(error) if error is not None else record.getMessage())

    log = logging.getLogger(_CONVERTER_LOGGER)
    handler, propagate = _Keep(), log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        yield messages
    finally:
        log.removeHandler(handler)
        log.propagate = propagate
