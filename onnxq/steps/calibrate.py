"""Step calibrate: what the rewrite needs from the data — activation ranges (static), or per weight the second
moments of its activations (weight-only GPTQ, activation-aware clipping). Its first pass fills the holdout. What the
ranges change of the plans is step replan's (steps.plan)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from onnxq.calibration.moments import WeightKey, WeightMoments, weight_key
from onnxq.calibration.range_choice import saturated_ranges
from onnxq.calibration_api import calibration_request
from onnxq.data.stream import check_reusable
from onnxq.errors import ConfigError
from onnxq.ranges import calibrated_ranges, smoothed_ranges
from onnxq.steps.conv_methods import conv_moments, window_choices
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
    if config.weight_rounding == "gptq":  # auto: on the Convs a failing gate points at (steps.escalate)
        moments, notes = conv_moments(state, state.loaded.work)
        state.calibrated = dataclasses.replace(state.calibrated, moments=moments)
        state.notes += notes
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
    """Conv inputs' windows narrowed where their Convs lose the least output (steps.conv_methods)."""
    ranges = state.calibrated.ranges
    chosen, note = window_choices(state, state.loaded.work, ranges)
    state.calibrated = dataclasses.replace(state.calibrated, ranges={**ranges, **{c.name: c.after for c in chosen}})
    state.notes += [note] if note else []


# What each range_choice does after the method's windows, in order (config.calibration.range_choice). auto: the
# saturation clip here, the output-error windows on the Convs a failing gate points at (steps.escalate).
RANGE_CHOICES: dict[str, tuple[Callable[[RunState], None], ...]] = {
    "method": (),
    "saturation": (_clip_saturated,),
    "auto": (_clip_saturated,),
    "output-error": (_clip_saturated, _choose_by_error),
}


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
