"""Step smooth: SmoothQuant before quantizing, as the user set it (recipe auto smooths in its own step)."""

from __future__ import annotations

from onnxq.ranges import smoothing_cache
from onnxq.smoothing.steps import check_recipe, smooth_model
from onnxq.steps.state import RunState

__all__ = ["smooth"]


def smooth(state: RunState) -> bool:
    config, given = state.config, state.given
    if config.recipe == "auto":
        check_recipe(config, state.mode, given.calibration)
        return False
    if not state.smoothed:
        return False
    cached, note = smoothing_cache(state.reference, state.work, config, state.stream, given.cache)
    state.notes += [note] if note else []
    # A large model's scaled weights (a second copy of its products') go to the run's spill file as they are made.
    state.smoothing = smooth_model(state.work, state.plans, config, state.stream, cached,
                                   state.spill.storing_rows(state.work))
    state.quantized_from = state.work.clone()
    return True
