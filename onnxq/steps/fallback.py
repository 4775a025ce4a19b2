"""Step fallback: out of tolerance with fallback on, the most harmful nodes at 8 bits or float, fewest first,
until the tolerance is met (onnxq.search.fallback)."""

from __future__ import annotations

import numpy as np

from onnxq.search.build import Overrides
from onnxq.search.compute import product_costs
from onnxq.search.fallback import fall_back as search
from onnxq.steps.sensitivity import wants_fallback
from onnxq.steps.state import RunState
from onnxq.verify.result import SYNTHETIC

__all__ = ["fall_back"]


def fall_back(state: RunState) -> bool:
    if not wants_fallback(state):
        _note_not_run(state)
        return False
    check = state.candidate_check()
    state.fallback, chosen = search(state.builder, state.sensitivity, state.verified.verification, check,
                                    _costs(state, check.reference.batches))
    if chosen is None:
        state.notes.append("fallback: the tolerance cannot be met even with all but one node float")
        return True
    quantized = state.quantized
    # Later builds (check_speed's per-kind trials) start from these decisions. The fallback's reasons (rank, harm)
    # outlive later builds, whose planner sees these nodes as excluded by name.
    reasons = {s.node.name: s.reason for s in chosen.built.skips if s.node.name in chosen.excluded}
    state.adopt(chosen.built, chosen.verification,
                overrides=quantized.overrides | Overrides(float_nodes=tuple(chosen.excluded),
                                                          eight_bit=tuple(chosen.eight_bit)),
                float_reasons={**quantized.float_reasons, **reasons},
                eight_bit=quantized.eight_bit | set(chosen.eight_bit))
    state.notes.append(f"fallback: {_summary(chosen.excluded, chosen.eight_bit)} to meet the tolerance")
    return True


def _note_not_run(state: RunState) -> None:
    """Why the fallback left a model that is not shown within tolerance as it is."""
    verification = state.verified.verification
    if not state.resolved.config.verify.fallback or verification is None or verification.passed:
        return
    if verification.failed and state.verified.label == SYNTHETIC:
        state.notes.append("fallback: not run — out of tolerance on made-up inputs, which say nothing of yours (the "
                           "written model does not depend on them): pass --verify-data")
    elif not verification.failed:
        state.notes.append("fallback: not run — no bar is measured below; the data cannot show one (not shown), "
                           "and more data, not float nodes, would")


def _costs(state: RunState, batches) -> dict[str, float] | None:
    """Each ranked node's multiply-adds on the first verification batch (the reclaim's order); None without one."""
    if not state.resolved.config.verify.fallback_reclaim:
        return None
    for batch in batches:
        shapes = {name: np.shape(array) for name, array in batch.items()}
        return product_costs(state.builder.float_model, shapes, (n.name for n in state.sensitivity.nodes))
    return None


def _summary(floats: tuple[str, ...], eight_bit: tuple[str, ...]) -> str:
    parts = [f"{len(eight_bit)} sensitive node(s) at 8 bits"] if eight_bit else []
    if floats or not eight_bit:
        parts.append(f"{len(floats)} most sensitive node(s) kept float")
    return " and ".join(parts)
