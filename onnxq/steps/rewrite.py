"""Step rewrite: every plan applied to the working model (the quantize pass, each plan by its form), then the
output format's lowering and the compute precision (its float16 section joins the report)."""

from __future__ import annotations

from onnxq.io.memory import trim_heap
from onnxq.passes.graph.apply import apply_plans
from onnxq.steps.state import RunState

__all__ = ["rewrite"]


def rewrite(state: RunState) -> bool:
    if state.moments is not None and state.spill.storing(state.reference) is not None:
        # To the run's file before GPTQ reads them, each paged out once used (calibration.moments): held, they sat
        # beside the rewrite's weights (SmolLM2's 4-bit run: 0.4 GB of XᵀX, the rewrite's peak of 1,009 MiB). Every
        # packed triangle goes, K = 576's 0.66 MB too (58 MB of SmolLM2's), as the run's other arrays outside a model.
        state.moments.spill(state.spill.stored_array)
        trim_heap()
    rewritten = apply_plans(state.work, state.plans, state.ranges, state.config, state.mode, state.moments,
                            state.magnitudes)
    state.bias_notes = rewritten.bias_notes
    for name, reason in rewritten.kept_qdq.items():
        state.notes.append(f"format {state.config.format}: {name} kept in QDQ form ({reason})")
    if rewritten.float16 is not None:
        state.sections.append(rewritten.float16)
    if rewritten.separated_adds:
        state.notes.append(f"{len(rewritten.separated_adds)} Add after a quantized MatMul written as Sum (e.g. after "
                           f"{rewritten.separated_adds[0]}): ORT would fuse MatMul + Add into a float Gemm")
    if rewritten.clamps_as_max_min:
        state.notes.append(f"{len(rewritten.clamps_as_max_min)} Relu / Clip after a quantized product that nothing "
                           f"quantizes after written as Max / Min (e.g. after {rewritten.clamps_as_max_min[0]}): ORT "
                           "would run the product float")
    return True
