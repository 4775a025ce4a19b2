"""Step calibrate: what the rewrite needs from the data — activation ranges (static), or per weight the second
moments of its activations (weight-only GPTQ, activation-aware clipping). Its first pass fills the holdout."""

from __future__ import annotations

from onnxq.calibration.moments import WeightKey, WeightMoments, weight_key
from onnxq.calibration.stream import check_reusable
from onnxq.handlers.planner import replan_dynamic
from onnxq.passes.quantize import needed_ranges
from onnxq.ranges import calibrated_ranges, smoothed_ranges
from onnxq.steps.state import RunState

__all__ = ["calibrate"]


def calibrate(state: RunState) -> bool:
    config, given = state.config, state.given
    if state.mode == "weight-only" and (config.blocks.method == "gptq" or config.blocks.clip == "activation"):
        state.moments = _second_moments(state)
        return True
    if state.mode != "static":
        return False
    if state.smoothed:  # ranges of the smoothed graph; a cache holds the float model's
        state.ranges, state.calibration_samples = smoothed_ranges(state.work, state.plans, config, state.stream,
                                                                  given.progress)
    else:
        state.ranges, state.calibration_samples, note = calibrated_ranges(
            state.reference, state.work, state.plans, config, state.stream, given.cache, given.progress)
        state.notes += [note] if note else []
    _unobserved_bodies_dynamic(state)
    return True


def _unobserved_bodies_dynamic(state: RunState) -> None:
    """Subgraph nodes whose activation has no range go dynamic: the data never computed it (a branch not taken,
    a loop without iterations), a cache written before onnxq observed subgraphs holds none, or calibration cannot
    pass it out of its body (calibration.bodies)."""
    unobserved = {p.node for p in state.plans
                  if p.scope and any(n not in state.ranges for n in needed_ranges([p], state.config))}
    if unobserved:
        state.plans, state.skips = replan_dynamic(
            state.plans, state.skips, state.config, unobserved,
            "no calibrated range for its activation (the calibration data never ran this subgraph, the cache "
            "predates subgraph calibration, or the body is not an If / Loop / Scan)")


def _second_moments(state: RunState) -> WeightMoments:
    """Per weight, the second moments of every activation reading it, computed now (the first pass collects the
    held-back samples); a model whose matrices exceed the budget needs a pass per chunk, so its data must be
    re-readable."""
    config = state.config
    readers: dict[WeightKey, dict[str, None]] = {}  # ordered sets
    for plan in state.plans:
        if plan.node.op_type != "Gather":
            readers.setdefault(weight_key(plan.node), {})[plan.node.inputs[0].name] = None
    moments = WeightMoments(state.work.clone(), {k: list(v) for k, v in readers.items()}, state.stream.batches,
                            full=config.blocks.method == "gptq")
    if moments.chunks > 1:
        check_reusable(state.stream.source, f"GPTQ over {moments.chunks} chunks of weights (their matrices "
                                            f"exceed {moments.budget >> 20} MiB at once)")
    moments.prefetch()
    return moments
