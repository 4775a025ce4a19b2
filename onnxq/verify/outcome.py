"""One output's verdict: its metrics against a tolerance."""

from __future__ import annotations

import dataclasses

from onnxq.config import Tolerance
from onnxq.verify.metrics import OutputMetrics

__all__ = ["OutputCheck", "failures_for"]


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    name: str
    metrics: OutputMetrics
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {**self.metrics.to_dict(), "passed": self.passed, "failures": list(self.failures)}


def failures_for(metrics: OutputMetrics, tolerance: Tolerance) -> tuple[str, ...]:
    found = []
    if tolerance.min_cosine is not None and not metrics.cosine_mean >= tolerance.min_cosine:
        found.append(f"cosine {metrics.cosine_mean:.4f} < {tolerance.min_cosine}")
    if tolerance.min_sqnr_db is not None and not metrics.sqnr_db >= tolerance.min_sqnr_db:
        found.append(f"SQNR {metrics.sqnr_db:.1f} dB < {tolerance.min_sqnr_db} dB")
    if tolerance.max_abs_error is not None and not metrics.max_abs_error <= tolerance.max_abs_error:
        found.append(f"max abs error {metrics.max_abs_error:.4g} > {tolerance.max_abs_error}")
    return tuple(found)
