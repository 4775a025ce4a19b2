"""Step rewrite: every plan applied to the working model (the quantize pass, each plan by its form), then the
output format's lowering and the compute precision (its float16 section joins the report)."""

from __future__ import annotations

from onnxq.io.memory import trim_heap
from onnxq.passes.graph.apply import apply_plans
from onnxq.steps.records import Quantized
from onnxq.steps.state import RunState

__all__ = ["rewrite"]


def rewrite(state: RunState) -> bool:
    if state.calibrated.moments is not None and state.spill.storing(state.loaded.reference) is not None:
        # To the run's file before GPTQ reads them, each paged out once used (calibration.moments): held, they sat
        # beside the rewrite's weights (SmolLM2's 4-bit run: 0.4 GB of XᵀX, the rewrite's peak of 1,009 MiB). Every
        # packed triangle goes, K = 576's 0.66 MB too (58 MB of SmolLM2's), as the run's other arrays outside a model.
        state.calibrated.moments.spill(state.spill.stored_array)
        trim_heap()
    planned, smoothed = state.planned, state.smoothed
    rewritten = apply_plans(state.loaded.work, planned.plans, state.calibrated.ranges, state.resolved.config,
                            state.resolved.mode, state.calibrated.moments, state.magnitudes)
    state.quantized = Quantized(
        work=state.loaded.work, plans=planned.plans, skips=planned.skips, eight_bit=planned.eight_bit,
        quantized_from=state.loaded.reference if smoothed.model is None else smoothed.model,
        bias_notes=rewritten.bias_notes, smoothing=smoothed.activations, precision=rewritten.float16)
    for name, reason in rewritten.kept_qdq.items():
        state.notes.append(f"format {state.resolved.config.format}: {name} kept in QDQ form ({reason})")
    if rewritten.separated_adds:
        state.notes.append(f"{len(rewritten.separated_adds)} Add after a quantized MatMul written as Sum (e.g. after "
                           f"{rewritten.separated_adds[0]}): ORT would fuse MatMul + Add into a float Gemm")
    if rewritten.clamps_as_max_min:
        state.notes.append(f"{len(rewritten.clamps_as_max_min)} Relu / Clip after a quantized product that nothing "
                           f"quantizes after written as Max / Min (e.g. after {rewritten.clamps_as_max_min[0]}): ORT "
                           "would run the product float")
    return True
