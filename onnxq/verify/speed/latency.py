"""--check-speed: float vs quantized latency on each provider, interleaved, on one verification batch.

Machines are shared and noisy, so the two models take turns and the medians are compared; the figure is a ratio
on this machine, which is what a user needs to know before deploying (ORT users report quantized models that
run slower than float)."""

from __future__ import annotations

import dataclasses
import html
import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from onnxq.data.specs import Batch
from onnxq.targets import target_providers
from onnxq.targets.providers import provider_named, short_provider_name
from onnxq.io.model_sessions import ModelSource, make_session
from onnxq.verify.speed.sessions import deployed_sessions

__all__ = ["SpeedCheck", "check_speed", "timed_in_turns", "slower_notes", "MIN_ROUNDS", "MEANINGFUL_MS"]

# A median of fewer rounds is one noisy run.
MIN_ROUNDS = 3
# Below this float time a batch, the sessions' fixed costs (every QuantizeLinear's call, ORT's own overhead) dominate
# and the timing says nothing of the kernels: a 32-128-10 MLP times 0.01 ms float, 0.013 ms quantized.
MEANINGFUL_MS = 1.0


@dataclasses.dataclass(frozen=True)
class SpeedCheck:
    provider: str
    float_ms: float
    quantized_ms: float
    rounds: int
    in_turn: bool = False  # timed one model after the other, not alternating (check_speed)

    @property
    def speedup(self) -> float:
        return self.float_ms / self.quantized_ms

    @property
    def faster(self) -> bool:
        return self.speedup > 1.0

    @property
    def meaningful(self) -> bool:
        """Whether the float model takes long enough a batch for the ratio to speak of its kernels."""
        return self.float_ms >= MEANINGFUL_MS

    def text(self) -> str:
        where = short_provider_name(self.provider)
        turns = ", one model after the other" if self.in_turn else ""
        if not self.meaningful:
            return (f"speed on {where}: {self.float_ms:.2f} ms a batch{turns} — too small to time meaningfully; "
                    "quantized speed shows on models with bigger layers")
        verdict = "faster" if self.faster else "NOT FASTER than float"
        return (f"speed on {where}: float {self.float_ms:.2f} ms, quantized {self.quantized_ms:.2f} ms "
                f"({self.speedup:.2f}x, {verdict}; median of {self.rounds}{turns})")

    def html(self) -> str:
        return f"<p>{html.escape(self.text())}</p>"

    def to_dict(self) -> dict:
        return {"provider": self.provider, "float_ms": self.float_ms, "quantized_ms": self.quantized_ms,
                "speedup": self.speedup, "rounds": self.rounds, "in_turn": self.in_turn}


def check_speed(float_model: ModelSource, quant_model: ModelSource, batch: Batch, providers: Sequence[str],
                rounds: int = 10, budget_s: float = math.inf, in_turn: bool = False) -> tuple[SpeedCheck, ...]:
    """budget_s: stop after MIN_ROUNDS rounds once this long has passed on a provider (warm-up included), so that a
    model whose batch takes seconds is not timed for minutes; the check says how many rounds it took.
    in_turn: each model's session made, timed (on half the budget) and dropped before the other's is made — for a
    model whose two deployed sessions at once (each owning its weights) would be the run's peak memory — instead of
    both at once, in alternation (drift on a shared machine then falls on both)."""
    checks = []
    share = budget_s / 2 if in_turn else budget_s
    for provider in providers:
        times = timed_in_turns((float_model, quant_model), provider, in_turn,
                               lambda sessions: _rounds(sessions, batch, rounds, share))
        checks.append(SpeedCheck(provider, float(np.median(times[0]) * 1e3), float(np.median(times[1]) * 1e3),
                                 min(len(t) for t in times), in_turn))
    return tuple(checks)


def timed_in_turns(models: Sequence[ModelSource], provider: str, in_turn: bool,
                   timed: Callable[[list], list[list[float]] | None]) -> list[list[float]] | None:
    """timed(sessions) — a list of times per session — over the models' deployed sessions: all at once, or (in_turn)
    one model at a time, its session dropped before the next one is made; None when `timed` says None."""
    if not in_turn:  # both at once: sessions kept from an earlier timing of the same model are reused
        return timed(deployed_sessions(models, provider))
    times: list[list[float]] = []
    for model in models:
        got = timed([make_session(model, optimize=True, provider=provider)])
        if got is None:
            return None
        times += got
    return times


def _rounds(sessions: list, batch: Batch, rounds: int, budget_s: float) -> list[list[float]]:
    """Each session's seconds per run of the batch, the sessions taking turns round by round."""
    start_all = time.perf_counter()
    for s in sessions:  # warm-up: first runs allocate and pack weights
        s.run(None, batch)
        s.run(None, batch)
    times: list[list[float]] = [[] for _ in sessions]
    while len(times[0]) < rounds and (len(times[0]) < MIN_ROUNDS or time.perf_counter() - start_all < budget_s):
        for i, s in enumerate(sessions):
            start = time.perf_counter()
            s.run(None, batch)
            times[i].append(time.perf_counter() - start)
    return times


def slower_notes(checks: Sequence[SpeedCheck], target: str, searched: bool, weight_only: bool = False) -> list[str]:
    """A note per provider where the quantized model is not faster than float, with what to do about it there:
    --check-speed (unless it ran: searched) where the target is deployed on that provider, the right target where
    it is not (int8 forms run on CUDA as DequantizeLinear + float, or on the CPU with copies). A
    weight-only model's blocks are for size and memory-bound decoding, which one batch's timing does not see:
    --check-speed does not trade them, so it is not offered for them. A timing too small to mean anything
    (SpeedCheck.meaningful) gets no note: its line says so."""
    notes = []
    deployed_on = target_providers(target)
    for check in checks:
        if check.faster or not check.meaningful:
            continue
        provider = provider_named(check.provider)
        where = provider.short
        if check.provider not in deployed_on:
            hint = f"; target {target} is not meant for {where}" + (
                f"; {provider.target_hint}" if provider.target_hint else "")
        elif weight_only:
            hint = "; weight-only blocks are for size and memory-bound decoding, which one batch does not time"
        else:
            hint = "" if searched else ("; --check-speed keeps float the kinds of node that run slower quantized on "
                                        + where)
        notes.append(f"SPEED: the quantized model is not faster than float on {check.provider} "
                     f"({check.quantized_ms:.1f} ms vs {check.float_ms:.1f} ms){hint} — see docs/guides/"
                     f"{provider.guide}.md")
    return notes
