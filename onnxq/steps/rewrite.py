"""Step rewrite: every plan applied to the working model (the quantize pass, each plan by its form), then the
output format's lowering and the compute precision (its float16 section joins the report)."""

from __future__ import annotations

from onnxq.passes.apply import apply_plans
from onnxq.steps.state import RunState

__all__ = ["rewrite"]


def rewrite(state: RunState) -> bool:
    rewritten = apply_plans(state.work, state.plans, state.ranges, state.config, state.mode, state.moments,
                            state.magnitudes)
    state.bias_fallbacks = rewritten.bias_fallbacks
    for name, reason in rewritten.kept_qdq.items():
        state.notes.append(f"format {state.config.format}: {name} kept in QDQ form ({reason})")
    if rewritten.float16 is not None:
        state.sections.append(rewritten.float16)
    stored = state.spill.storing(state.reference)
    if state.moments is not None and stored is not None:
        state.moments.spill(stored)  # only a fallback probe reads them from here on
    if rewritten.separated_adds:
        state.notes.append(f"{len(rewritten.separated_adds)} Add after a quantized MatMul written as Sum (e.g. after "
                           f"{rewritten.separated_adds[0]}): ORT would fuse MatMul + Add into a float Gemm")
    return True
