"""Step check_speed: float against quantized latency on every provider verified, by default, with a note per
provider where the quantized model is not faster. With --check-speed, first each kind of quantized node that runs
slower than float on the provider the target is deployed on (the CPU, or CUDA for target cuda) is kept float
(onnxq.search.speed) and the chosen model verified, then every provider is timed.
Both time the float model as loaded (state.as_given), not its file: ORT refuses some files that onnxq accepts
(repeated node names, renamed at load)."""

from __future__ import annotations

import numpy as np

from onnxq.data.batching import fixed_batch_size
from onnxq.data.batching import concatenate, first_samples, samples_in
from onnxq.errors import one_line, whole_message
from onnxq.io.model import model_size_bytes
from onnxq.io.sessions import ORT_ERRORS
from onnxq.io.segments import SEGMENT_FROM_BYTES
from onnxq.search.build import Overrides
from onnxq.search.speed import choose_compute, choose_kinds
from onnxq.steps.state import RunState
from onnxq.targets import target_providers
from onnxq.verify import resolve_providers
from onnxq.verify.kernels.placement import short
from onnxq.verify.speed.latency import check_speed as time_both
from onnxq.verify.speed.latency import MEANINGFUL_MS, SpeedCheck, slower_notes
from onnxq.verify.speed.sessions import reused_sessions
from onnxq.verify.speed.decode import decode_speed as time_decoding
from onnxq.verify.tasks.rules import language_model_logits
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["check_speed", "SPEED_MAX_BYTES", "DEFAULT_ROUNDS", "DEFAULT_BUDGET_S"]

_CPU = CPU_PROVIDER
# The default timing holds a float and a quantized deployed session at once, each owning a copy of its weights;
# above 1 GB of float weights that would raise the run's peak memory (docs/scale/large-models.md: a 2.3 GB model), so
# such models are timed only when asked. (The timing is what the user reads; the sensitivity's ranking, whose order
# does not need the deployed copies, uses the exact kernels from a lower bound: steps.sensitivity.)
SPEED_MAX_BYTES = 1_000_000_000
# The default timing's rounds: enough for a median on a quiet machine, cheap beside verification; fewer (down to
# verify.speed.latency.MIN_ROUNDS) once DEFAULT_BUDGET_S has passed, for a model whose batch takes seconds.
DEFAULT_ROUNDS = 5
DEFAULT_BUDGET_S = 10.0
# The timed batch's float outputs, at most (_timed_batch): the verification's own batches are smaller.
_TIMED_OUTPUT_BYTES = 64 << 20
# From this size of float weights the two models are timed one after the other, not both sessions at once in
# alternation: the float and the quantized deployed sessions, each owning its weights, were the peak of SmolLM2-135M's
# default run (653 MB of weights: 1.50 GB, 1.28 GB elsewhere) — the size from which exact sessions run in segments.
IN_TURN_FROM_BYTES = SEGMENT_FROM_BYTES
# verify.never_slower searches only models whose float batch takes at least this long (a smaller one would go float
# on noise): the timing's own floor, below which it says nothing of the kernels.
NEVER_SLOWER_MIN_MS = MEANINGFUL_MS
# verify.never_slower acts only on a quantized model this much slower than float, in two timings in a row: one timing
# on a shared machine can swing past a tie, and the written model must not depend on the machine's load.
NEVER_SLOWER_BELOW = 0.95


def check_speed(state: RunState) -> bool:
    verify = state.resolved.config.verify
    if not verify.enabled or not (verify.check_speed or verify.measure_speed):
        return False
    with reused_sessions():  # the float model's session made once for every timing, the search's choice's too
        return _check_speed(state)


def _check_speed(state: RunState) -> bool:
    verify = state.resolved.config.verify
    providers = resolve_providers(verify.providers, state.resolved.config.target)[0]
    if not verify.check_speed:
        timed = _time_providers(state, providers)
    else:
        if state.quantized.plans:  # the target's provider decides which kinds stay float (targets.target_providers)
            _speed_by_kind(state, providers)
        state.speed = time_both(state.as_given, state.quantized.work, _timed_batch(state), providers,
                                in_turn=_in_turn(state))
        _note_slower(state, searched=True)
        timed = True
    if timed and state.quantized.plans and language_model_logits(state.loaded.reference) is not None:
        _time_decoding(state, providers)
    return timed


def _timed_batch(state: RunState):
    """The verification's first batch as the data gives it, cut to _TIMED_OUTPUT_BYTES of float outputs (at least
    the reference's first batch, itself cut to verify.reference.OUTPUT_BUDGET): a language model's 8 windows of 128
    tokens held 201 MB of logits in each timed session's arena and output, the run's peak (SmolLM2-135M, measured
    with ORT's arena off: 2.56 GB; 2.01 GB, elsewhere, with 2 windows). The same prefill kernels on fewer tokens:
    1.91x float on 2 windows against 2.14-2.26x on 8 (separate runs)."""
    reference = state.verified.float_outputs
    first = None if reference is None else reference.batches.first()
    if first is None:
        return state.verified.batches.first()
    if not len(reference.store):
        return first
    per_sample = sum(np.asarray(o).nbytes for o in reference.store[0]) / max(samples_in(first), 1)
    # Never more than the data's own first batch: only what the reference cut off it comes back.
    count = min(samples_in(state.verified.batches.first()), int(_TIMED_OUTPUT_BYTES // max(per_sample, 1)))
    if count <= samples_in(first):
        return first
    return concatenate(first_samples(reference.batches, count, fixed_batch_size(state.verified.specs)))


def _in_turn(state: RunState) -> bool:
    """Whether the float and the quantized model are timed one after the other (verify.speed.latency.check_speed)."""
    return model_size_bytes(state.as_given) >= IN_TURN_FROM_BYTES


def _time_decoding(state: RunState, providers: list[str]) -> None:
    """A decoder's tokens per second with its cache, batch 1, beside the batch timing (a prefill): on the provider
    the target deploys it to where that is here (CUDA for --target cuda on a GPU machine), else on the CPU. A float
    model that onnxruntime cannot decode (onnxruntime-genai's float16 CPU export of SmolLM2 fails its second step,
    in genai's own runtime too) is said in a note, with whether the quantized one decodes; a quantized model that
    cannot decode where the float one can is the run's error."""
    deployed = [p for p in target_providers(state.resolved.config.target) if p in providers]
    provider = (deployed or [_CPU])[0]
    try:
        decode = time_decoding((state.as_given, state.quantized.work), state.verified.batches.first(),
                               state.verified.specs, provider=provider, in_turn=_in_turn(state))
    except ORT_ERRORS as e:
        quantized = _decode_error(state, state.quantized.work, provider)
        if quantized is not None and _decode_error(state, state.as_given, provider) is None:
            raise quantized
        state.notes.append(f"decode: not timed — onnxruntime cannot decode the float model as given on "
                           f"{short(provider)} ({one_line(whole_message(e))[:240]}); the quantized model "
                           + ("decodes" if quantized is None else "cannot either"))
        return
    if decode is not None:
        state.sections.append(decode)


def _decode_error(state: RunState, model, provider: str) -> BaseException | None:
    """What onnxruntime raises decoding two tokens with the model alone; None when it decodes."""
    try:
        time_decoding((model, model), state.verified.batches.first(), state.verified.specs, steps=2, rounds=1,
                      provider=provider, in_turn=True)
    except ORT_ERRORS as e:
        return e
    return None


def _time_providers(state: RunState, providers: list[str]) -> bool:
    if model_size_bytes(state.as_given) > SPEED_MAX_BYTES:  # the float model it would time
        state.notes.append("speed: not timed by default, the float weights being over "
                           f"{SPEED_MAX_BYTES / 1e9:g} GB (--check-speed times it)")
        return False
    state.speed = time_both(state.as_given, state.quantized.work, _timed_batch(state), providers, DEFAULT_ROUNDS,
                            DEFAULT_BUDGET_S, in_turn=_in_turn(state))
    slower = _slower_here(state)
    if slower is not None:  # confirmed by a second timing, or the first was noise
        state.speed = time_both(state.as_given, state.quantized.work, _timed_batch(state), providers, DEFAULT_ROUNDS,
                                DEFAULT_BUDGET_S, in_turn=_in_turn(state))
        slower = _slower_here(state)
    if slower is None:
        _note_slower(state, searched=False)
        return True
    state.notes.append(f"speed: the quantized model ran {slower.speedup:.2f}x float on this CPU, so the kinds of node "
                       "that run slower quantized were searched (verify.never_slower; --allow-slower only says so)")
    _speed_by_kind(state, providers)
    state.speed = time_both(state.as_given, state.quantized.work, _timed_batch(state), providers, DEFAULT_ROUNDS,
                            DEFAULT_BUDGET_S, in_turn=_in_turn(state))
    _note_slower(state, searched=True)
    return True


def _slower_here(state: RunState) -> SpeedCheck | None:
    """The CPU's timing when the defaults must not ship it: clearly slower than float (NEVER_SLOWER_BELOW), on a CPU
    the target covers (another CPU's kernels say nothing of the target's), in a mode the speed search serves (not
    weight-only blocks, whose size is the point); else None."""
    config = state.resolved.config
    if not config.verify.never_slower or not state.quantized.plans or state.resolved.mode == "weight-only" \
            or target_providers(config.target)[0] != _CPU:
        return None
    if not state.this_cpu_is_target():
        return None
    return next((c for c in state.speed if c.provider == _CPU and c.speedup < NEVER_SLOWER_BELOW
                 and c.float_ms >= NEVER_SLOWER_MIN_MS), None)


def _note_slower(state: RunState, searched: bool) -> None:
    if state.quantized.plans:  # none left (--check-speed kept every node float): two float models, timed for the
        # record only
        state.notes += slower_notes(state.speed, state.resolved.config.target, searched,
                                    state.resolved.mode == "weight-only")


def _speed_by_kind(state: RunState, providers: list[str]) -> None:
    deciding = target_providers(state.resolved.config.target)[0]
    if deciding not in providers:
        state.notes.append(f"speed: the kinds of node were not timed: target {state.resolved.config.target} is "
                           f"deployed on "
                           f"{short(deciding)}, which this onnxruntime does not have")
        return
    where = "this CPU" if deciding == _CPU else short(deciding)
    if state.builder.effective_config.compute_dtype == "float16":
        _choose_compute(state, deciding, where)
    section, chosen = choose_kinds(state.builder, state.quantized.plans, state.quantized.work, _timed_batch(state),
                                   deciding)
    state.sections.append(section)
    if chosen is None:
        return
    reasons = dict.fromkeys(section.float_nodes, f"kept float by --check-speed: slower quantized than float on "
                                                 f"{where}, measured")
    quantized = state.quantized
    state.adopt(chosen, state.candidate_check()(chosen.model, whole=True),
                overrides=quantized.overrides | Overrides(float_nodes=section.float_nodes),
                float_reasons={**quantized.float_reasons, **reasons})
    kinds = ", ".join(section.kept_float())
    state.notes.append(f"speed: {kinds} kept float ({len(section.float_nodes)} node(s)): slower quantized than "
                       f"float on {where}, measured (speed_by_kind)")


def _choose_compute(state: RunState, provider: str, where: str) -> None:
    """float32 arithmetic where float16 runs slower on the deployment provider, measured."""
    timing, wide = choose_compute(state.builder, state.quantized.work, _timed_batch(state), provider)
    state.sections.append(timing)
    if wide is None:
        return
    # Nothing is float16 any more: no precision section.
    state.adopt(wide, state.candidate_check()(wide.model, whole=True),
                overrides=state.quantized.overrides | Overrides(compute="float32"), precision=None)
    state.notes.append(f"speed: float32 compute kept: float16 ran slower on {where} ({timing.float16_ms:.1f} ms vs "
                       f"{timing.float32_ms:.1f} ms, measured; speed_by_compute)")
