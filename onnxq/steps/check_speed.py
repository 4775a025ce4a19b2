"""Step check_speed: float against quantized latency on the CPU, by default, with a note where the quantized model
is not faster. With --check-speed, first each kind of quantized node that runs slower than float on the CPU is kept
float (onnxq.search.speed) and the chosen model verified, then every provider is timed.
Both time the float model as loaded (state.as_given), not its file: ORT refuses some files that onnxq accepts
(repeated node names, renamed at load)."""

from __future__ import annotations

from onnxq.io.model import model_size_bytes
from onnxq.search.build import Overrides
from onnxq.search.speed import choose_kinds
from onnxq.steps.sensitivity import DEPLOYED_MAX_WEIGHT_BYTES
from onnxq.steps.state import RunState
from onnxq.steps.verify import placed
from onnxq.verify import resolve_providers
from onnxq.verify.speed import check_speed as time_both

__all__ = ["check_speed", "SPEED_MAX_BYTES", "DEFAULT_ROUNDS", "DEFAULT_BUDGET_S"]

_CPU = "CPUExecutionProvider"
# The default timing holds a float and a quantized deployed session at once, each owning a copy of its weights;
# above the sensitivity's bound for deployed sessions that would raise the run's peak memory (README, Large
# models), so such models are timed only when asked.
SPEED_MAX_BYTES = DEPLOYED_MAX_WEIGHT_BYTES
# The default timing's rounds: enough for a median on a quiet machine, cheap beside verification; fewer (down to
# verify.speed.MIN_ROUNDS) once DEFAULT_BUDGET_S has passed, for a model whose batch takes seconds.
DEFAULT_ROUNDS = 5
DEFAULT_BUDGET_S = 10.0


def check_speed(state: RunState) -> bool:
    verify = state.config.verify
    if not verify.enabled or not (verify.check_speed or verify.measure_speed):
        return False
    if not verify.check_speed:
        return _time_cpu(state)
    if state.plans:  # the CPU always runs (resolve_providers); its kernels decide which kinds stay float
        _speed_by_kind(state)
    state.speed = time_both(state.as_given, state.work, state.batches.first(),
                            resolve_providers(verify.providers)[0])
    _note_slower(state, hint="")
    return True


def _time_cpu(state: RunState) -> bool:
    if model_size_bytes(state.as_given) > SPEED_MAX_BYTES:  # the float model it would time
        state.notes.append("speed: not timed by default, the float weights being over "
                           f"{SPEED_MAX_BYTES / 1e9:g} GB (--check-speed times it)")
        return False
    state.speed = time_both(state.as_given, state.work, state.batches.first(), [_CPU], DEFAULT_ROUNDS,
                            DEFAULT_BUDGET_S)
    _note_slower(state, hint="; --check-speed keeps float the kinds of node that run slower quantized here")
    return True


def _note_slower(state: RunState, hint: str) -> None:
    if not state.plans:  # --check-speed kept every node float: two float models, timed for the record only
        return
    for check in state.speed:
        if not check.faster:
            state.notes.append(f"SPEED: the quantized model is not faster than float on {check.provider} "
                               f"({check.quantized_ms:.1f} ms vs {check.float_ms:.1f} ms){hint} — see README, "
                               "Targets")


def _speed_by_kind(state: RunState) -> None:
    section, chosen = choose_kinds(state.builder, state.plans, state.work, state.batches.first(), _CPU)
    state.sections.append(section)
    if chosen is None:
        return
    state.adopt(chosen, state.candidate_check()(chosen.model, whole=True))
    state.overrides = state.overrides | Overrides(float_nodes=section.float_nodes)
    state.float_reasons.update(dict.fromkeys(section.float_nodes, "kept float by --check-speed: slower quantized than "
                                                                  "float on this CPU, measured"))
    placed(state)
    kinds = ", ".join(section.kept_float())
    state.notes.append(f"speed: {kinds} kept float ({len(section.float_nodes)} node(s)): slower quantized than "
                       "float on this CPU, measured (speed_by_kind)")
