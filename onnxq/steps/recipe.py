"""Step recipe: recipe auto, when the all-static model missed the tolerance — per group of layers, per token with
smoothing where the tolerance needs it (onnxq.search.recipe)."""

from __future__ import annotations

from onnxq.report.record import SmoothedActivation
from onnxq.search.recipe import choose_recipe
from onnxq.smoothing.steps import recipe_groups
from onnxq.steps.state import RunState
from onnxq.steps.verify import placed
from onnxq.verify.result import SYNTHETIC

__all__ = ["recipe"]


def recipe(state: RunState) -> bool:
    config = state.config
    if config.recipe != "auto" or state.verification is None:
        return False
    if state.label == SYNTHETIC:  # made-up inputs never change the written model
        state.notes.append("recipe auto: not searched on made-up inputs (pass --verify-data): all static")
        return False
    if not state.verification.failed:  # within tolerance, or not shown: no bar measured below
        state.notes.append("recipe auto: no bar is measured below the all-static model's; nothing per token")
        return False
    groups = recipe_groups(state.reference, config, state.mode, state.ranges, state.stream)
    result, chosen = choose_recipe(state.builder, groups, state.candidate_check())
    state.recipe = result
    if chosen is not None:  # None: no activation group can go per token
        state.overrides, state.quantized_from = state.overrides | chosen.per_token, chosen.float_model
        state.adopt(chosen.built, chosen.verification)
        placed(state)
        switched = set(result.per_token)
        state.smoothing = tuple(SmoothedActivation(g.activation, g.alpha, chosen.absorbed.get(g.activation), {})
                                for g in groups if g.activation in switched)
    state.notes.append(f"recipe auto: {len(result.per_token)} of {result.candidates} activation group(s) per token "
                       f"+ smoothing, the rest static per tensor ({result.log.text()})"
                       + ("" if result.met else "; the tolerance is not met even so"))
    return True
