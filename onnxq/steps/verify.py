"""Step verify: the float model's outputs on the verification inputs (computed once, shared by every later check
of the run), then the quantized model against them on every provider, with placement and target coverage."""

from __future__ import annotations

from onnxq.data.batching import Batches
from onnxq.data.specs import InputSpec
from onnxq.data.holdout import ordinal
from onnxq.steps.plan import synthetic_inputs
from onnxq.steps.records import Verified
from onnxq.steps.state import RunState
from onnxq.verify import Reference, verify_models
from onnxq.verify.result import CALIBRATION_SAMPLES, SYNTHETIC

__all__ = ["verify"]


def verify(state: RunState) -> bool:
    config = state.resolved.config
    if not config.verify.enabled:
        return False
    upfront = state.planned.upfront_inputs
    batches, label, specs = (*upfront, state.planned.specs) if upfront else _held_out_inputs(state)
    # Shares the float weights' memory map with every other session of the run.
    float_outputs = Reference(state.as_given, batches, synthetic=label == SYNTHETIC)
    placement = state.quantized_nodes() if config.verify.check_kernels else None
    verification = verify_models(float_outputs, state.quantized.work, config.verify, label, placement, config.target)
    state.verified = Verified(batches, label, specs, float_outputs, verification)
    return True


def _held_out_inputs(state: RunState) -> tuple[Batches, str, list[InputSpec]]:
    holdout, plan = state.planned.stream.holdout, state.planned.stream.plan
    held, first = (holdout.verification_batches(), holdout.first_batches()) if holdout else ([], [])
    if held:
        if plan is not None and plan.for_shares:  # numeric bars only: the calibration line says how many
            state.notes.append(f"verification: {holdout.held_count} calibration samples held back ("
                               f"{plan.words(holdout.held_count)})")
        return Batches.held(held), f"held-out calibration samples (every {ordinal(holdout.every)})", \
            state.planned.specs
    if first:
        state.notes.append("too few samples to hold any back: verified on calibration data, which flatters the "
                           "result")
        return Batches.held(first), CALIBRATION_SAMPLES, state.planned.specs
    return synthetic_inputs(state, state.planned.specs)
