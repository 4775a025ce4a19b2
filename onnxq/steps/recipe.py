"""Step recipe: recipe auto, when the all-static model missed the tolerance — per group of layers, per token with
smoothing where the tolerance needs it (onnxq.search.recipe)."""

from __future__ import annotations

from onnxq.report.record import SmoothedActivation
from onnxq.search.recipe import choose_recipe
from onnxq.smoothing.steps import recipe_groups
from onnxq.steps.state import RunState
from onnxq.verify.result import SYNTHETIC

__all__ = ["recipe"]


def recipe(state: RunState) -> bool:
    config = state.resolved.config
    if config.recipe != "auto" or state.verified.verification is None:
        return False
    if state.verified.label == SYNTHETIC:  # made-up inputs never change the written model
        state.notes.append("recipe auto: not searched on made-up inputs (pass --verify-data): all static")
        return False
    if not state.verified.verification.failed:  # within tolerance, or not shown: no bar measured below
        state.notes.append("recipe auto: no bar is measured below the all-static model's; nothing per token")
        return False
    groups = recipe_groups(state.loaded.reference, config, state.resolved.mode, state.calibrated.ranges,
                           state.planned.stream)
    result, chosen = choose_recipe(state.builder, groups, state.candidate_check())
    state.recipe = result
    if chosen is not None:  # None: no activation group can go per token
        switched = set(result.per_token)
        smoothing = tuple(SmoothedActivation(g.activation, g.alpha, chosen.absorbed.get(g.activation), {})
                          for g in groups if g.activation in switched)
        state.adopt(chosen.built, chosen.verification, overrides=state.quantized.overrides | chosen.per_token,
                    quantized_from=chosen.float_model, smoothing=smoothing)
    state.notes.append(f"recipe auto: {len(result.per_token)} of {result.candidates} activation group(s) per token "
                       f"+ smoothing, the rest static per tensor ({result.log.text()})"
                       + ("" if result.met else "; the tolerance is not met even so"))
    return True
