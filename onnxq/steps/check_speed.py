"""Step check_speed: float against quantized latency on the first provider (--check-speed), with a note when the
quantized model is not faster."""

from __future__ import annotations

from onnxq.steps.state import RunState
from onnxq.verify import resolve_providers
from onnxq.verify.speed import check_speed as time_both

__all__ = ["check_speed"]


def check_speed(state: RunState) -> bool:
    config = state.config
    if not (config.verify.enabled and config.verify.check_speed):
        return False
    state.speed = time_both(state.input_path or state.reference, state.work, state.batches.first(),
                            resolve_providers(config.verify.providers)[0])
    for check in state.speed:
        if not check.faster:
            state.notes.append(f"SPEED: the quantized model is not faster than float on {check.provider} "
                               f"({check.quantized_ms:.1f} ms vs {check.float_ms:.1f} ms) — see README, Targets")
    return True
