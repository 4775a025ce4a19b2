"""Step calibrate: what the rewrite needs from the data — activation ranges (static), or per weight the second
moments of its activations (weight-only GPTQ, activation-aware clipping). Its first pass fills the holdout. What the
ranges change of the plans is step replan's (steps.plan)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator

import onnx_ir as ir

from onnxq.data.batching import first_samples, fixed_batch_size
from onnxq.calibration.error_choice import ERROR_SAMPLES, error_ranges
from onnxq.calibration.moments import WeightKey, WeightMoments, weight_key
from onnxq.calibration.range_choice import saturated_ranges
from onnxq.calibration_api import calibration_request
from onnxq.data.stream import check_reusable
from onnxq.errors import ConfigError
from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import constant_array
from onnxq.ranges import calibrated_ranges, smoothed_ranges
from onnxq.steps.records import Calibrated
from onnxq.steps.state import RunState

__all__ = ["calibrate"]


def calibrate(state: RunState) -> bool:
    config, given, planned = state.resolved.config, state.loaded.given, state.planned
    if state.resolved.mode == "weight-only" and (config.blocks.method == "gptq" or config.blocks.clip == "activation"):
        state.calibrated = Calibrated(moments=_second_moments(state))
        return True
    if state.resolved.mode != "static":
        return False
    request = calibration_request(planned.plans, config)  # what the ranges need, made once from the plans
    if state.user_smooths:  # ranges of the smoothed graph; a cache holds the float model's
        ranges, samples = smoothed_ranges(state.loaded.work, request, config, planned.stream, given.progress)
        state.calibrated = Calibrated(ranges, samples)
    else:
        ranges, summary, note = calibrated_ranges(state.loaded.reference, state.loaded.work, request, config,
                                                  planned.stream, given.cache, given.progress)
        state.calibrated = Calibrated(ranges, summary.samples, summary)
        state.notes += [note] if note else []
    for choose in RANGE_CHOICES[config.calibration.range_choice]:
        choose(state)
    if config.weight_rounding == "gptq":
        state.calibrated = dataclasses.replace(state.calibrated, moments=_conv_moments(state))
    return True


def _clip_saturated(state: RunState) -> None:
    """Main-graph ranges narrowed where what reads them saturates (calibration.range_choice)."""
    calibrated = state.calibrated
    choices = tuple(saturated_ranges(state.loaded.work, calibrated.ranges))
    state.calibrated = dataclasses.replace(calibrated, range_choices=choices,
                                           ranges={**calibrated.ranges, **{c.name: c.after for c in choices}})
    if choices:
        readers = sorted({"+".join(c.reader) for c in choices}, key=len)
        state.notes.append(f"ranges: {len(choices)} activation(s) clipped where what reads them "
                           f"saturates (exact: the reader's outputs do not change), e.g. read by {readers[0]}")


def _choose_by_error(state: RunState) -> None:
    """Conv inputs' windows narrowed where their Convs lose the least output (calibration.error_choice): the data
    is read again, its first samples only."""
    if state.planned.stream is None or state.planned.stream.source is None:
        state.notes.append("ranges: --range-choice output-error skipped — it reads the calibration data, and a "
                           "cache holds none (pass --calib too)")
        return
    try:
        check_reusable(state.planned.stream.source, "the output-error range choice")
    except ConfigError:
        state.notes.append("ranges: --range-choice output-error skipped — the calibration data is a one-shot "
                           "iterator (pass a list or a callable)")
        return
    samples = first_samples(state.planned.stream.batches(), ERROR_SAMPLES, fixed_batch_size(state.planned.specs))
    ranges = state.calibrated.ranges
    chosen = error_ranges(state.loaded.work, _conv_readers(state), ranges, samples, state.resolved.config)
    state.calibrated = dataclasses.replace(state.calibrated, ranges={**ranges, **{c.name: c.after for c in chosen}})
    if chosen:
        state.notes.append(f"ranges: {len(chosen)} Conv input(s) narrowed to the window whose quantization error "
                           f"costs their Convs the least output ({ERROR_SAMPLES} calibration samples; "
                           "calibration.error_choice)")


def _static_convs(state: RunState) -> Iterator[NodePlan]:
    """The plans of main-graph Convs with a quantized activation and quantized weights."""
    return (p for p in state.planned.plans if p.node.op_type == "Conv" and not p.scope and p.activations and p.weights)


def _conv_readers(state: RunState) -> dict[str, list[ir.Node]]:
    """Main-graph static Convs with a calibrated activation and a constant weight, by the activation they read."""
    readers: dict[str, list[ir.Node]] = {}
    for plan in _static_convs(state):
        node = plan.node
        if node.inputs[0].name in state.calibrated.ranges and constant_array(node.inputs[1]) is not None:
            readers.setdefault(node.inputs[0].name, []).append(node)
    return readers


# A Conv whose im2col width K is larger is rounded to nearest: GPTQ holds XᵀX (float32) and factors a float64 copy
# (FCN-ResNet50's head, a 3×3 Conv over 2048 channels, K = 18432: 12 GB of RSS, and two such runs met the OOM killer,
# before the factoring went in place: ~14 K² bytes since, 4.6 GB there, and a Cholesky of ~7 minutes on 2 cores).
GPTQ_MAX_K = 8192

# What each range_choice does after the method's windows, in order (config.calibration.range_choice).
RANGE_CHOICES: dict[str, tuple[Callable[[RunState], None], ...]] = {
    "method": (),
    "saturation": (_clip_saturated,),
    "output-error": (_clip_saturated, _choose_by_error),
}


def _conv_moments(state: RunState) -> WeightMoments | None:
    """The XᵀX of every main-graph static Conv's input, for its weights' GPTQ rounding (weight_rounding): one more
    pass over the calibration data, whose first chunk runs now. None where no Conv is planned, and, with a note,
    where the data can be read only once (the ranges took it)."""
    readers: dict[WeightKey, dict[str, None]] = {}
    wide = set()
    for plan in _static_convs(state):
        # The tensor's shape, nothing read: a value made from a Constant node (PaddlePaddle's exports) has none.
        weight = ir.convenience.get_const_tensor(plan.node.inputs[1])
        dims = tuple(plan.node.inputs[1].shape or ()) if weight is None else tuple(weight.shape)
        if all(isinstance(d, int) for d in dims) and math.prod(dims[1:]) > GPTQ_MAX_K:
            wide.add(plan.node.name)
            continue
        readers.setdefault(weight_key(plan.node), {})[plan.node.inputs[0].name] = None
    if wide:
        state.notes.append(f"weights: {len(wide)} Conv weight(s) of K > {GPTQ_MAX_K} rounded to nearest — GPTQ's "
                           "XᵀX and its float64 factor take ~14 K² bytes (4.6 GB at K = 18432)")
    if not readers or state.planned.stream is None or not state.resolved.config.per_channel:
        return None
    try:
        check_reusable(state.planned.stream.source, "GPTQ rounding of Conv weights")
    except ConfigError:
        why = ("the calibration cache holds ranges, not the data GPTQ rounding reads — pass --calib too"
               if state.planned.stream.source is None else
               "the calibration data is a one-shot iterator and GPTQ rounding reads it again (pass a list or a "
               "callable)")
        state.notes.append(f"weights: Conv weights rounded to nearest — {why}")
        return None
    moments = WeightMoments(state.loaded.work.clone(), {k: list(v) for k, v in readers.items()},
                            state.planned.stream.batches,
                            full=True)
    moments.prefetch()
    state.notes.append(f"weights: {len(readers)} Conv weight(s) rounded by GPTQ for the least output error on the "
                       "calibration data (same scales; --weight-rounding nearest rounds each to nearest)")
    return moments


def _second_moments(state: RunState) -> WeightMoments:
    """Per weight, the second moments of every activation reading it: from the calibration cache where it holds them
    (of the float graph: not after AWQ's scaling), else computed now (the first pass collects the held-back
    samples); a model whose matrices exceed the budget needs a pass per chunk, so its data must be re-readable."""
    config = state.resolved.config
    readers: dict[WeightKey, dict[str, None]] = {}  # ordered sets
    for plan in state.planned.plans:
        if plan.node.op_type != "Gather":
            readers.setdefault(weight_key(plan.node), {})[plan.node.inputs[0].name] = None
    full = config.blocks.method == "gptq"
    stored = state.resolved.cached_moments
    if stored is not None and (stored.full or not full) and not state.user_smooths:
        return _moments_from_cache(state, {k: list(v) for k, v in readers.items()})
    if state.planned.stream.source is None:
        why = ("holds the float graph's, and AWQ's scaling changes them" if state.user_smooths and stored is not None
               else "holds only their diagonals" if stored is not None else "holds none")
        raise ConfigError(f"the 4-bit weights' second moments come from the data, and the calibration cache {why} "
                          "— pass --calib DATA too")
    moments = WeightMoments(state.loaded.work.clone(), {k: list(v) for k, v in readers.items()},
                            state.planned.stream.batches,
                            full=full)
    if moments.chunks > 1:
        check_reusable(state.planned.stream.source, f"GPTQ over {moments.chunks} chunks of weights (their matrices "
                                            f"exceed {moments.budget >> 20} MiB at once)")
    moments.prefetch()
    return moments


def _moments_from_cache(state: RunState, readers: dict[WeightKey, list[str]]) -> WeightMoments:
    """The cache's second moments; the data, when given too, only supplies the held-back samples."""
    moments = WeightMoments.from_stored(state.loaded.work.clone(), readers, state.resolved.cached_moments)
    if state.planned.stream.source is not None:
        for _ in state.planned.stream.batches():
            pass
    state.notes.append(f"weights: second moments of {len(readers)} weight(s) from calibration cache "
                       f"{state.loaded.given.cache}")
    return moments
