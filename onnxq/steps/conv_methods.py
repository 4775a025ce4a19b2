"""The Conv accuracy methods that read the calibration data again: each Conv input's window chosen by the output
error it costs (calibration.error_choice) and GPTQ rounding of the Conv weights from their inputs' XᵀX
(calibration.moments). Step calibrate applies them to every static Conv where the config asks for them; step
escalate to the Convs a failing gate points at. Each reads the float graph it is given (the rewrite quantizes the
run's working graph in place: escalation gives the one quantization starts from) and returns what it found and the
note that says so; the caller decides where it goes."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator

import onnx_ir as ir

from onnxq.calibration.error_choice import ERROR_SAMPLES, ErrorChoice, error_ranges
from onnxq.calibration.moments import WeightKey, WeightMoments, weight_key
from onnxq.data.batching import first_samples, fixed_batch_size
from onnxq.data.stream import check_reusable
from onnxq.errors import ConfigError
from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import constant_array
from onnxq.steps.state import RunState

__all__ = ["GPTQ_MAX_K", "conv_moments", "data_unreadable", "static_convs", "window_choices"]

# A Conv whose im2col width K is larger is rounded to nearest: GPTQ holds XᵀX (float32) and factors a float64 copy
# (FCN-ResNet50's head, a 3×3 Conv over 2048 channels, K = 18432: 12 GB of RSS, and two such runs met the OOM killer,
# before the factoring went in place: ~14 K² bytes since, 4.6 GB there, and a Cholesky of ~7 minutes on 2 cores).
GPTQ_MAX_K = 8192


def static_convs(state: RunState, only: Collection[str] | None = None) -> Iterator[NodePlan]:
    """The plans of main-graph Convs with a quantized activation and quantized weights (of the nodes named in
    `only`, where given)."""
    return (p for p in state.planned.plans if p.node.op_type == "Conv" and not p.scope and p.activations
            and p.weights and (only is None or p.node.name in only))


def _float_convs(state: RunState, model: ir.Model, only: Collection[str] | None) -> Iterator[ir.Node]:
    """The static Convs' nodes in `model` (a float graph with the planned graph's node names)."""
    names = {plan.node.name for plan in static_convs(state, only)}
    return (node for node in model.graph if node.name in names)


def data_unreadable(state: RunState) -> str:
    """Why these methods cannot read the calibration data again ("" where they can)."""
    stream = state.planned.stream
    if stream is None or stream.source is None:
        return "they read the calibration data, and a calibration cache holds none (pass --calib too)"
    try:
        check_reusable(stream.source, "the Conv methods")
    except ConfigError:
        return "the calibration data is a one-shot iterator and they read it again (pass a list or a callable)"
    return ""


def window_choices(state: RunState, model: ir.Model, ranges: dict[str, tuple[float, float]],
                   only: Collection[str] | None = None) -> tuple[list[ErrorChoice], str]:
    """The Conv inputs' windows narrowed where their Convs lose the least output, from `ranges`, on the first
    ERROR_SAMPLES calibration samples; and the note (why nothing was chosen where the data cannot be read again)."""
    why_not = data_unreadable(state)
    if why_not:
        return [], f"ranges: the output-error window choice skipped — {why_not}"
    # Each chosen activation's window is weighed by every Conv that reads it, pointed at or not: all of them take it.
    readers = _conv_readers(_float_convs(state, model, None), ranges)
    if only is not None:
        readers = {name: nodes for name, nodes in readers.items() if any(n.name in only for n in nodes)}
    samples = first_samples(state.planned.stream.batches(), ERROR_SAMPLES, fixed_batch_size(state.planned.specs))
    chosen = error_ranges(model, readers, ranges, samples, state.resolved.config)
    note = (f"ranges: {len(chosen)} Conv input(s) narrowed to the window whose quantization error costs their Convs "
            f"the least output ({ERROR_SAMPLES} calibration samples; calibration.error_choice)") if chosen else ""
    return chosen, note


def _conv_readers(convs: Iterator[ir.Node], ranges: dict[str, tuple[float, float]]) -> dict[str, list[ir.Node]]:
    """The Convs with a calibrated activation and a constant weight, by the activation they read."""
    readers: dict[str, list[ir.Node]] = {}
    for node in convs:
        if node.inputs[0].name in ranges and constant_array(node.inputs[1]) is not None:
            readers.setdefault(node.inputs[0].name, []).append(node)
    return readers


def conv_moments(state: RunState, model: ir.Model,
                 only: Collection[str] | None = None) -> tuple[WeightMoments | None, list[str]]:
    """The XᵀX of the static Convs' inputs, for their weights' GPTQ rounding: one more pass over the calibration
    data, whose first chunk runs now; and the notes. None where no Conv is planned, and, with a note, where the data
    can be read only once (the ranges took it)."""
    readers, notes = _moment_readers(_float_convs(state, model, only))
    if not readers or state.planned.stream is None or not state.resolved.config.per_channel:
        return None, notes
    why_not = data_unreadable(state)
    if why_not:
        return None, [*notes, f"weights: Conv weights rounded to nearest — {why_not}"]
    moments = WeightMoments(model.clone(), {k: list(v) for k, v in readers.items()},
                            state.planned.stream.batches, full=True)
    moments.prefetch()
    rounded = (f"weights: {len(readers)} Conv weight(s) rounded by GPTQ for the least output error on the "
               "calibration data (same scales; --weight-rounding nearest rounds each to nearest)")
    return moments, [*notes, rounded]


def _moment_readers(convs: Iterator[ir.Node]) -> tuple[dict[WeightKey, dict[str, None]], list[str]]:
    """The activations each Conv weight is read with (ordered sets), less the weights too wide for GPTQ; the note on
    those."""
    readers: dict[WeightKey, dict[str, None]] = {}
    wide = set()
    for node in convs:
        # The tensor's shape, nothing read: a value made from a Constant node (PaddlePaddle's exports) has none.
        weight = ir.convenience.get_const_tensor(node.inputs[1])
        dims = tuple(node.inputs[1].shape or ()) if weight is None else tuple(weight.shape)
        if all(isinstance(d, int) for d in dims) and math.prod(dims[1:]) > GPTQ_MAX_K:
            wide.add(node.name)
            continue
        readers.setdefault(weight_key(node), {})[node.inputs[0].name] = None
    note = (f"weights: {len(wide)} Conv weight(s) of K > {GPTQ_MAX_K} rounded to nearest — GPTQ's XᵀX and its "
            "float64 factor take ~14 K² bytes (4.6 GB at K = 18432)")
    return readers, [note] if wide else []
