"""Step accuracy_level: a decoder's 4-bit weights at MatMulNBits accuracy_level 4, where the run chose that level (the
config left it open), checked against the same model at level 0 on the verification data; level 0 is kept where
level 4 changes greedy next tokens or perplexity beyond level 0's (onnxq.search.accuracy_level)."""

from __future__ import annotations

from onnxq.search.accuracy_level import LevelChoice, level4_holds
from onnxq.search.build import Overrides
from onnxq.steps.state import RunState
from onnxq.verify.result import SYNTHETIC

__all__ = ["accuracy_level"]


def _next_token_output(state: RunState) -> str | None:
    """The output judged by next-token agreement on the data's own tokens, where the check measured one."""
    verification = state.verified.verification
    return next((o.name for o in verification.outputs if o.metrics.task == "next-token" and o.metrics.task_units),
                None)


def _wanted(state: RunState) -> bool:
    resolved, verified = state.resolved, state.verified
    return ("accuracy_level" in resolved.defaulted and resolved.config.blocks.accuracy_level == 4
            and resolved.mode == "weight-only" and bool(state.quantized.plans)
            and verified.verification is not None and verified.label != SYNTHETIC)


def accuracy_level(state: RunState) -> bool:
    if not _wanted(state):
        return False
    name = _next_token_output(state)
    if name is None:
        return False
    level0 = state.builder.build(Overrides(accuracy_level=0))
    checked = state.candidate_check()(level0.model, whole=True)
    found = {o.name: o.metrics for o in state.verified.verification.outputs}[name]
    other = {o.name: o.metrics for o in checked.outputs}[name]
    agreement = (found.task_agreement, other.task_agreement)
    ratios = (found.perplexity_ratio, other.perplexity_ratio)
    kept = 4 if level4_holds(agreement, ratios) else 0
    state.accuracy_level = LevelChoice(name, agreement, ratios, kept)
    if kept == 0:
        state.adopt(level0, checked, overrides=state.quantized.overrides | Overrides(accuracy_level=0))
        state.notes.append(f"accuracy level 0 kept: level 4's int8 activations changed greedy next tokens or "
                           f"perplexity beyond level 0's (agreement {agreement[0]:.4f} vs {agreement[1]:.4f})")
    return True
