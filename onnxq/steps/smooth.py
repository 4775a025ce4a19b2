"""Step smooth: SmoothQuant before quantizing, as the user set it (recipe auto smooths in its own step)."""

from __future__ import annotations

from onnxq.ranges import smoothing_cache
from onnxq.smoothing.steps import check_recipe, smooth_model
from onnxq.steps.records import Smoothed
from onnxq.steps.state import RunState

__all__ = ["smooth"]


def smooth(state: RunState) -> bool:
    config, given = state.resolved.config, state.loaded.given
    if config.recipe == "auto":
        check_recipe(config, state.resolved.mode, given.calibration)
        return False
    if not state.user_smooths:
        return False
    work, stream = state.loaded.work, state.planned.stream
    cached, note = smoothing_cache(state.loaded.reference, work, config, stream, given.cache)
    state.notes += [note] if note else []
    # A large model's scaled weights (a second copy of its products') go to the run's spill file as they are made;
    # the graph being quantized is scaled in place, its clone the float graph the quantization starts from.
    activations = smooth_model(work, state.planned.plans, config, stream, cached, state.spill.storing_rows(work))
    state.smoothed = Smoothed(work.clone(), activations)
    return True
