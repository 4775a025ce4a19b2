"""One output's verdict: its metrics against a tolerance."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

from onnxq.config import Tolerance, VerifyConfig
from onnxq.errors import ConfigError, one_line
from onnxq.verify.bars import Bar, bars_for, task_bar
from onnxq.verify.metrics import MetricsAccumulator, OutputMetrics
from onnxq.verify.task_measures import PERPLEXITY_BAR, TASK_BARS, TASK_WORDS, OutputTask

__all__ = ["OutputCheck", "NOT_ON_COSINE", "failures_for", "checks_of", "check_output_tolerances", "task_bar",
           "REPORTED", "task_tolerances", "coarse_task"]

# The tolerance of a comparison that is reported, not gated (the float model on another provider, the kernels' gap).
REPORTED = Tolerance(min_cosine=None, task="numeric")


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    name: str
    metrics: OutputMetrics
    failures: tuple[str, ...]
    tolerance: Tolerance | None = None  # what the figures were held to (None: not recorded)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def bars(self) -> tuple[Bar, ...]:
        """Each gated figure beside its bar (verify.bars); none for a comparison that is reported, not gated."""
        return () if self.tolerance is None else bars_for(self.metrics, self.tolerance)

    def to_dict(self) -> dict:
        return {**self.metrics.to_dict(), "passed": self.passed, "failures": list(self.failures),
                "bars": [b.to_dict() for b in self.bars]}


def task_tolerances(config: VerifyConfig, tasks: Mapping[str, OutputTask],
                    stability: Mapping[str, float]) -> Callable[[str], Tolerance]:
    """Each output's tolerance with its task bar resolved: the user's, else the kind's default — or the float
    model's own agreement under input rounding (verify.stability) where that is lower: no quantized model is held to
    a decision the float model does not keep itself. A language model's logits are held to the perplexity ratio in
    place of the numeric bars, and its cache outputs (state) are reported, judged through the logits; a detection
    set is held to its detections kept — unless the output has a tolerance of its own."""
    def tolerance_for(name: str) -> Tolerance:
        tolerance, task = config.tolerance_for(name), tasks.get(name)
        if task is not None and task.kind in _JUDGED_AS_A_WHOLE and tolerance.task != "numeric" \
                and name not in config.output_tolerances:
            tolerance = _JUDGED_AS_A_WHOLE[task.kind](tolerance)
        if task is None or task.kind not in TASK_BARS or tolerance.task == "numeric" \
                or tolerance.min_task_agreement is not None:
            return tolerance
        return dataclasses.replace(tolerance, min_task_agreement=min(TASK_BARS[task.kind],
                                                                     stability.get(name, 1.0)))
    return tolerance_for


_LANGUAGE_MODEL = {
    "next-token": lambda t: dataclasses.replace(t, max_perplexity_ratio=(
        PERPLEXITY_BAR if t.max_perplexity_ratio is None else t.max_perplexity_ratio)),
    "state": lambda t: dataclasses.replace(REPORTED, task=t.task),
}


def _task_alone(tolerance: Tolerance) -> Tolerance:
    return dataclasses.replace(REPORTED, task=tolerance.task, min_task_agreement=tolerance.min_task_agreement)


# Outputs judged by their task in place of the numeric bars, unless they have a tolerance of their own: a language
# model's logits and its cache; a detection set's rows (verify.detection_sets), whose figures count a detection one
# model lacks against rows of zeros — the detections kept judge them, the set's other outputs are reported; packed
# detections, rows in score order.
_JUDGED_AS_A_WHOLE = {
    **_LANGUAGE_MODEL,
    "detections": _task_alone,
    "detection-part": lambda t: dataclasses.replace(REPORTED, task=t.task),
    "packed-detections": _task_alone,
}
# The kinds whose cosine gates nothing (the sensitivity does not rank on it either).
NOT_ON_COSINE = frozenset(kind for kind in _JUDGED_AS_A_WHOLE if kind != "next-token")


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
    # Where the perplexity ratio is measured and bounded, it judges the logits in place of their cosine.
    perplexity_judges = tolerance.max_perplexity_ratio is not None and metrics.perplexity_ratio is not None
    if tolerance.min_cosine is not None and not perplexity_judges and not metrics.cosine_mean >= tolerance.min_cosine:
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
    ratio = metrics.perplexity_ratio
    if tolerance.max_perplexity_ratio is not None and ratio is not None and not ratio <= tolerance.max_perplexity_ratio:
        found.append(f"perplexity {ratio:.3f}x float's > {tolerance.max_perplexity_ratio}x ({metrics.perplexity:.4g} vs "
                     f"{metrics.perplexity_reference:.4g} over {metrics.scored_tokens} next tokens)")
    bar = task_bar(tolerance, metrics.task)
    if bar is not None and not metrics.task_agreement >= bar:
        found.append(f"{TASK_WORDS[metrics.task]} {metrics.task_agreement:.4f} < {bar} (over {metrics.task_units} "
                     f"{_UNITS[metrics.task]})")
    return tuple(found)


def coarse_task(units: int, bar: float, kind: str) -> str | None:
    """Words for a task agreement the verification data cannot resolve at its bar: one changed decision among
    `units` costs more than 1 - bar allows, so the gate (and the fallback) asks for no change at all; None when the
    data resolves the bar. A detector's class scores over 8 pages held 8 positives at 0.5 on its coarsest
    level: the fallback kept 73 of its 102 Convs float to change none of them."""
    if units and units * (1 - bar) >= 1:
        return None
    if not units:
        return f"no {_UNITS[kind]} in the verification data: its {TASK_WORDS[kind]} says nothing"
    need = math.ceil(1 / max(1 - bar, 1e-9))
    return (f"over {units} {_UNITS[kind]} one change is {1 / units:.4f} of it, where the bar {bar:.4g} allows "
            f"{1 - bar:.4f}: the gate allows no change (verification data with {need}+ {_UNITS[kind]} would "
            "allow some)")


_UNITS = {"top1": "decisions", "next-token": "positions", "sequence": "samples", "frames": "frames", "iou": "pixels of the union",
          "labels": "labels", "detections": "confident detections of either model",
          "head-detections": "detections of either model", "packed-detections": "detections of either model"}


def checks_of(accumulators: Mapping[str, MetricsAccumulator],
              tolerance_for: Callable[[str], Tolerance]) -> tuple[OutputCheck, ...]:
    """Each output's accumulated metrics against its tolerance."""
    checks = []
    for name, accumulator in accumulators.items():
        metrics, tolerance = accumulator.result(), tolerance_for(name)
        checks.append(OutputCheck(name, metrics, failures_for(metrics, tolerance), tolerance))
    return tuple(checks)


def check_output_tolerances(config: VerifyConfig, outputs: list[str]) -> None:
    """A tolerance naming an output the model does not have would never be applied: refuse it."""
    unknown = [name for name in config.output_tolerances if name not in outputs]
    if unknown:
        raise ConfigError(f"a tolerance names output {one_line(repr(unknown[0]))}, which the model does not have; its "
                          f"outputs are: {one_line(', '.join(outputs))}")
