"""Step verify: the float model's outputs on the verification inputs (computed once, shared by every later check
of the run), then the quantized model against them on every provider, with placement and target coverage."""

from __future__ import annotations

from onnxq.data.batching import Batches
from onnxq.data.holdout import ordinal
from onnxq.steps.load import synthetic_inputs
from onnxq.steps.state import RunState
from onnxq.verify import Reference, verify_models, with_placement
from onnxq.verify.providers import absent_providers
from onnxq.verify.result import CALIBRATION_SAMPLES, SYNTHETIC

__all__ = ["verify", "placed"]


def verify(state: RunState) -> bool:
    config = state.config
    if not config.verify.enabled:
        return False
    state.batches, state.label = state.upfront_inputs or _held_out_inputs(state)
    # Shares the float weights' memory map with every other session of the run.
    state.float_outputs = Reference(state.as_given, state.batches, synthetic=state.label == SYNTHETIC)
    placement = state.quantized_nodes() if config.verify.check_kernels else None
    state.verification = verify_models(state.float_outputs, state.work, config.verify, state.label, placement,
                                       config.target)
    return True


def placed(state: RunState) -> None:
    """The verification of a model a search chose (checked during the search) with its placement added (predicted
    on the absent providers asked for, as the first verification's)."""
    config = state.config
    if config.verify.check_kernels:
        state.verification = with_placement(state.verification, state.work, state.batches.first(),
                                            state.quantized_nodes(),
                                            absent_providers(config.verify.providers, config.target))


def _held_out_inputs(state: RunState) -> tuple[Batches, str]:
    holdout, plan = state.stream.holdout, state.stream.plan
    held, first = (holdout.verification_batches(), holdout.first_batches()) if holdout else ([], [])
    if held:
        if plan is not None and plan.for_shares:  # numeric bars only: the calibration line says how many
            state.notes.append(f"verification: {holdout.held_count} calibration samples held back ("
                               f"{plan.words(holdout.held_count)})")
        return Batches.held(held), f"held-out calibration samples (every {ordinal(holdout.every)})"
    if first:
        state.notes.append("too few samples to hold any back: verified on calibration data, which flatters the "
                           "result")
        return Batches.held(first), CALIBRATION_SAMPLES
    return synthetic_inputs(state)
