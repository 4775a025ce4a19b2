"""One output's verdict: its metrics against a tolerance."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from onnxq.config import Tolerance, VerifyConfig
from onnxq.errors import ConfigError, one_line
from onnxq.verify.metrics import MetricsAccumulator, OutputMetrics

__all__ = ["OutputCheck", "failures_for", "checks_of", "check_output_tolerances"]


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
    """What fails the tolerance; a NaN or inf anywhere fails whatever the tolerance, since no figure means
    anything then."""
    found = []
    if metrics.reference_nonfinite:
        found.append(f"the float model itself gives {metrics.reference_nonfinite} NaN/inf value(s) on these inputs — "
                     "check the data")
    if metrics.nonfinite:
        found.append(f"{metrics.nonfinite} NaN/inf value(s) in the quantized outputs")
    if not found and not metrics.finite:
        found.append("the error figures are NaN")
    if tolerance.min_cosine is not None and not metrics.cosine_mean >= tolerance.min_cosine:
        found.append(f"cosine {metrics.cosine_mean:.4f} < {tolerance.min_cosine}")
    if tolerance.min_sqnr_db is not None and not metrics.sqnr_db >= tolerance.min_sqnr_db:
        found.append(f"SQNR {metrics.sqnr_db:.1f} dB < {tolerance.min_sqnr_db} dB")
    if tolerance.max_abs_error is not None and not metrics.max_abs_error <= tolerance.max_abs_error:
        found.append(f"max abs error {metrics.max_abs_error:.4g} > {tolerance.max_abs_error}")
    if tolerance.min_argmax_agreement is not None and not metrics.argmax_agreement >= tolerance.min_argmax_agreement:
        changed = metrics.decisions - round(metrics.argmax_agreement * metrics.decisions)
        found.append(f"argmax agreement {metrics.argmax_agreement:.4f} < {tolerance.min_argmax_agreement} ({changed} "
                     f"of {metrics.decisions} decisions changed)")
    k, top_k = tolerance.topk, metrics.top(tolerance.topk)
    if tolerance.min_topk_agreement is not None and not top_k >= tolerance.min_topk_agreement:
        outside = metrics.decisions - round(top_k * metrics.decisions)
        found.append(f"top-{k} agreement {top_k:.4f} < {tolerance.min_topk_agreement} ({outside} of "
                     f"{metrics.decisions} float answers outside the quantized top {k})")
    return tuple(found)


def checks_of(accumulators: Mapping[str, MetricsAccumulator],
              tolerance_for: Callable[[str], Tolerance]) -> tuple[OutputCheck, ...]:
    """Each output's accumulated metrics against its tolerance."""
    return tuple(OutputCheck(n, m, failures_for(m, tolerance_for(n)))
                 for n, m in ((n, a.result()) for n, a in accumulators.items()))


def check_output_tolerances(config: VerifyConfig, outputs: list[str]) -> None:
    """A tolerance naming an output the model does not have would never be applied: refuse it."""
    unknown = [name for name in config.output_tolerances if name not in outputs]
    if unknown:
        raise ConfigError(f"a tolerance names output {one_line(repr(unknown[0]))}, which the model does not have; its "
                          f"outputs are: {one_line(', '.join(outputs))}")
