"""Step check_speed (--check-speed): on the CPU, each kind of quantized node that runs slower than float is kept
float (onnxq.search.speed), the chosen model verified; then float against quantized latency on each provider, with
a note where the quantized model is still not faster."""

from __future__ import annotations

from onnxq.search.build import Overrides
from onnxq.search.speed import choose_kinds
from onnxq.steps.state import RunState
from onnxq.steps.verify import placed
from onnxq.verify import resolve_providers
from onnxq.verify.speed import check_speed as time_both

__all__ = ["check_speed"]

_CPU = "CPUExecutionProvider"


def check_speed(state: RunState) -> bool:
    config = state.config
    if not (config.verify.enabled and config.verify.check_speed):
        return False
    if state.plans:  # the CPU always runs (resolve_providers); its kernels decide which kinds stay float
        _speed_by_kind(state)
    state.speed = time_both(state.input_path or state.reference, state.work, state.batches.first(),
                            resolve_providers(config.verify.providers)[0])
    for check in state.speed:
        if not check.faster:
            state.notes.append(f"SPEED: the quantized model is not faster than float on {check.provider} "
                               f"({check.quantized_ms:.1f} ms vs {check.float_ms:.1f} ms) — see README, Targets")
    return True


def _speed_by_kind(state: RunState) -> None:
    section, chosen = choose_kinds(state.builder, state.plans, state.work, state.batches.first(), _CPU)
    state.sections.append(section)
    if chosen is None:
        return
    state.adopt(chosen, state.candidate_check()(chosen.model, whole=True))
    state.overrides = state.overrides | Overrides(float_nodes=section.float_nodes)
    placed(state)
    kinds = ", ".join(t.kind for t in section.timings if t.kept_float)
    state.notes.append(f"speed: {kinds} kept float ({len(section.float_nodes)} node(s)): slower quantized than "
                       "float on this CPU, measured (speed_by_kind)")
