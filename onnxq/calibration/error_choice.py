"""Each Conv input's window chosen by the output error it costs (range_choice = "output-error", a
per-tensor range choice): the calibration method's window scaled by SHRINKS, each tried on the first calibration
samples — the tensor quantized on it, and the error (tensor − its quantized value) run through every Conv reading it
(by ONNX Runtime, the Conv's own attributes, no bias) — and the window whose relative output error energy is least
kept. A narrower window clips outliers and gains a finer step; which wins is the layer's to say, not a percentile's.

Measured before the fallback (docs/methods/calibration.md): PP-OCRv4's recognizer strings 0.656 → 0.703, the
direction classifier's SQNR 49.2 → 51.9 dB, the detector's IoU 0.9848 → 0.9860; with it, the fallback quantizes
89 % of the detector's MACs instead of 66 %. Runs after the saturation clip (calibration.range_choice), whose window
it narrows further or keeps."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxq.calibration.channels import values_per_batch
from onnxq.config import QuantConfig
from onnxq.io.sessions import session_options
from onnxq.io.irquery import constant_array
from onnxq.numerics import choose_qparams, dequantize, quantize
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["ErrorChoice", "SHRINKS", "ERROR_SAMPLES", "error_ranges"]

# The method's window times each factor (1.0 first: a tie keeps the method's window).
SHRINKS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)
# Calibration samples the errors are measured on (each costs its Convs' compute once per factor): a handful would
# miss the rare values that a narrow window clips, and choose it where held-out data pays for the clipping.
ERROR_SAMPLES = 16


@dataclasses.dataclass(frozen=True)
class ErrorChoice:
    name: str
    before: tuple[float, float]
    after: tuple[float, float]
    errors: tuple[float, ...]  # per factor of SHRINKS: Σ over the readers of their relative output error energy


def error_ranges(model: ir.Model, readers: Mapping[str, list[ir.Node]], ranges: Mapping[str, tuple[float, float]],
                 batches: Iterable, config: QuantConfig) -> list[ErrorChoice]:
    """readers: the Convs (each with a constant weight) reading each activation, by its name; batches: the samples
    to measure on (the first ERROR_SAMPLES of the calibration data). The activations whose least-error window is
    narrower than their range."""
    if not readers:
        return []
    convs = {id(n): _ConvRun(n) for nodes in readers.values() for n in nodes}
    # Per tensor and reader: Σ output error energy per factor, and Σ output energy, over every piece.
    errors = {name: np.zeros((len(nodes), len(SHRINKS))) for name, nodes in readers.items()}
    signals = {name: np.zeros((len(nodes), 1)) for name, nodes in readers.items()}
    for values in values_per_batch(model, list(readers), batches):
        for name, nodes in readers.items():
            found, signal = _energies(values[name], ranges[name], [convs[id(n)] for n in nodes], config)
            errors[name] += found
            signals[name] += signal
    choices = []
    for name in readers:
        relative = (errors[name] / np.maximum(signals[name], 1e-30)).sum(axis=0)
        best = SHRINKS[int(np.argmin(relative))]
        if best != 1.0:
            lo, hi = ranges[name]
            choices.append(ErrorChoice(name, (lo, hi), (lo * best, hi * best), tuple(map(float, relative))))
    return choices


def _energies(x: np.ndarray, window: tuple[float, float], convs: list[_ConvRun],
              config: QuantConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per reader: ‖Conv(x − Q(x))‖² per factor of SHRINKS, and ‖Conv(x)‖² (a column)."""
    x = np.asarray(x, np.float32)
    scheme = config.activations
    signal = np.array([[float(np.square(c.run(x), dtype=np.float64).sum())] for c in convs])
    found = np.zeros((len(convs), len(SHRINKS)))
    for i, factor in enumerate(SHRINKS):
        qparams = choose_qparams(window[0] * factor, window[1] * factor, scheme.np_dtype, scheme.symmetric)
        error = x - dequantize(quantize(x, qparams), qparams).astype(np.float32)
        found[:, i] = [float(np.square(c.run(error), dtype=np.float64).sum()) for c in convs]
    return found, signal


class _ConvRun:
    """One Conv's weight applied to an input of the activation's shape (no bias: the error's image)."""

    def __init__(self, node: ir.Node) -> None:
        x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT))
        weight = ir.Value(name="w", const_value=ir.tensor(np.asarray(constant_array(node.inputs[1]), np.float32)))
        graph = ir.Graph([x], [], nodes=[], opset_imports={"": 17}, initializers=[weight])
        attributes = [ir.Attr(a.name, a.type, a.value) for a in node.attributes.values()]
        conv = ir.Node("", "Conv", [x, weight], attributes, name="conv")
        graph.append(conv)
        conv.outputs[0].name = "y"
        conv.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
        graph.outputs.append(conv.outputs[0])
        proto = ir.serde.serialize_model(ir.Model(graph, ir_version=8))
        self._session = ort.InferenceSession(proto.SerializeToString(), session_options(optimize=False),
                                             providers=[CPU_PROVIDER])

    def run(self, x: np.ndarray) -> np.ndarray:
        return self._session.run(None, {"x": x})[0]
