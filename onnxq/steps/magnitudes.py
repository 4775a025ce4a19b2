"""Step magnitudes: for float16 compute (target cuda), the largest magnitude each float value of the model reaches
on a few batches of the data, so that the rewrite keeps float32 where float16 would overflow (a decomposed norm's
squares, a language model's outlier activations). The data: the calibration data when given, else the
verification inputs (the given data, or synthetic inputs, a rough guide then)."""

from __future__ import annotations

import itertools

import onnx_ir as ir

from onnxq.calibration.request import CalibrationRequest, observe
from onnxq.data.stream import check_reusable
from onnxq.errors import ConfigError
from onnxq.passes.float16.plan import element_types
from onnxq.steps.state import RunState
from onnxq.data.synthetic import synthetic_batches

__all__ = ["magnitudes", "MAGNITUDE_BATCHES"]

# Batches observed: values that pass float16's range do so on any batch of real data (an outlier channel, a
# mask); a few bound the cost (MiniLM: 1.2 s for 4 batches of 8 documents on 2 cores).
MAGNITUDE_BATCHES = 4


def magnitudes(state: RunState) -> bool:
    if state.resolved.config.compute_dtype != "float16":
        return False
    model = state.loaded.reference if state.smoothed.model is None else state.smoothed.model
    types = element_types(model.graph, model.opset_imports)
    names = [v.name for node in model.graph for v in node.outputs if v.name and types.get(v) == ir.DataType.FLOAT]
    request = CalibrationRequest((), None, magnitudes=tuple(names))
    summary = observe(model, request, lambda: itertools.islice(_batches(state), MAGNITUDE_BATCHES), None, "")
    state.magnitudes = {name: magnitude.largest for name, magnitude in summary.magnitudes.items()}
    return True


def _batches(state: RunState):
    """The calibration data (a pass after the first skips the held-back samples alike), unless it is a one-shot
    iterator already read; else the verification inputs; else synthetic ones."""
    if state.loaded.given.calibration is not None and _reusable(state.loaded.given.calibration):
        return state.planned.stream.batches()
    if state.planned.upfront_inputs is not None:
        return state.planned.upfront_inputs[0]
    return synthetic_batches(state.loaded.reference, state.planned.specs)


def _reusable(source) -> bool:
    try:
        check_reusable(source, "float16 compute's magnitudes")
    except ConfigError:
        return False
    return True
