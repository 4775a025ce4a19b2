"""--check-speed: float vs quantized latency on each provider, interleaved, on one verification batch.

Machines are shared and noisy, so the two models take turns and the medians are compared; the figure is a ratio
on this machine, which is what a user needs to know before deploying (ORT users report quantized models that
run slower than float)."""

from __future__ import annotations

import dataclasses
import html
import time
from collections.abc import Sequence

import numpy as np

from onnxq.calibration.specs import Batch
from onnxq.verify.sessions import ModelSource, make_session

__all__ = ["SpeedCheck", "check_speed"]


@dataclasses.dataclass(frozen=True)
class SpeedCheck:
    provider: str
    float_ms: float
    quantized_ms: float
    rounds: int

    @property
    def speedup(self) -> float:
        return self.float_ms / self.quantized_ms

    @property
    def faster(self) -> bool:
        return self.speedup > 1.0

    def text(self) -> str:
        verdict = "faster" if self.faster else "NOT FASTER than float"
        return (f"speed on {self.provider.replace('ExecutionProvider', '')}: float {self.float_ms:.2f} ms, quantized "
                f"{self.quantized_ms:.2f} ms ({self.speedup:.2f}x, {verdict}; median of {self.rounds})")

    def html(self) -> str:
        return f"<p>{html.escape(self.text())}</p>"

    def to_dict(self) -> dict:
        return {"provider": self.provider, "float_ms": self.float_ms, "quantized_ms": self.quantized_ms,
                "speedup": self.speedup, "rounds": self.rounds}


def check_speed(float_model: ModelSource, quant_model: ModelSource, batch: Batch, providers: Sequence[str],
                rounds: int = 10) -> tuple[SpeedCheck, ...]:
    checks = []
    for provider in providers:
        sessions = [make_session(m, optimize=True, provider=provider) for m in (float_model, quant_model)]
        for s in sessions:  # warm-up: first runs allocate and pack weights
            s.run(None, batch)
            s.run(None, batch)
        times: list[list[float]] = [[], []]
        for _ in range(rounds):
            for i, s in enumerate(sessions):
                start = time.perf_counter()
                s.run(None, batch)
                times[i].append(time.perf_counter() - start)
        checks.append(SpeedCheck(provider, float(np.median(times[0]) * 1e3), float(np.median(times[1]) * 1e3),
                                 rounds))
    return tuple(checks)
