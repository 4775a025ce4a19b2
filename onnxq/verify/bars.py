"""Each figure an output is gated on, beside the bar it was held to, and the share of the tolerance it uses.

The summary, the JSON report and the HTML page show a figure with its bar ("cosine 0.9855 (>= 0.98)") and colour it
by its share: 0 is the float model's own answer, 1 is the bar itself, above 1 fails. The share is measured in what
the bar allows away from perfect: 1 - cosine against 1 - its bar, the noise power against the bar's for SQNR, the
error against the bound for max abs, the lost share of an agreement against the loss the bar allows, the perplexity
added against what the ratio's bar allows."""

from __future__ import annotations

import dataclasses
import math

from onnxq.config import Tolerance
from onnxq.verify.metrics import OutputMetrics, finite_or_none
from onnxq.verify.tasks.types import TASK_BARS, TASK_WORDS

__all__ = ["Bar", "bars_for", "task_bar", "NEAR_SHARE"]

# From this share of its tolerance a figure is near its bar (amber); above 1 it is over (red); below, well within.
NEAR_SHARE = 0.5


def task_bar(tolerance: Tolerance, kind: str | None) -> float | None:
    """The share of an output's task answer it must keep: the tolerance's, else its kind's default; None when the
    output has no task metric or the tolerance keeps to the numeric bars."""
    if kind is None or tolerance.task == "numeric":
        return None
    return TASK_BARS.get(kind) if tolerance.min_task_agreement is None else tolerance.min_task_agreement


@dataclasses.dataclass(frozen=True)
class Bar:
    """One gated figure: `value` held to `limit`, from below (at least) or from above (at most)."""

    metric: str  # in words: "cosine", "SQNR dB", "top-1 agreement"
    value: float
    limit: float
    at_least: bool  # True: value >= limit passes; False: value <= limit passes
    perfect: float  # the value of a model identical to float: the share's zero (inf for SQNR)

    @property
    def passed(self) -> bool:
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    @property
    def share(self) -> float:
        """The share of the tolerance used: 0 identical to float, 1 at the bar, over 1 failing (inf: no figure)."""
        if math.isnan(self.value):
            return math.inf
        if math.isinf(self.perfect):  # SQNR: noise power against the bar's, 10^((bar - value) / 10)
            return 10 ** ((self.limit - self.value) / 10) if math.isfinite(self.value) else 0.0
        allowed = abs(self.perfect - self.limit)
        used = abs(self.perfect - self.value)
        if allowed == 0:
            return 0.0 if used == 0 else math.inf
        return used / allowed

    @property
    def op(self) -> str:
        return ">=" if self.at_least else "<="

    def text(self, spec: str = ".4f") -> str:
        """The figure with its bar: '0.9855 (>= 0.98)'."""
        figure = format(self.value, spec) if math.isfinite(self.value) else str(self.value)
        return f"{figure} ({self.op} {self.limit:g})"

    def to_dict(self) -> dict:
        return {"metric": self.metric, "value": finite_or_none(self.value), "op": self.op, "bar": self.limit,
                "share": finite_or_none(self.share), "passed": self.passed}


def bars_for(metrics: OutputMetrics, tolerance: Tolerance) -> tuple[Bar, ...]:
    """The bars an output's figures were held to, in the order verify.outcome.failures_for checks them."""
    bars = []
    # Where the perplexity ratio is measured and bounded, it judges the logits in place of their cosine.
    perplexity_judges = tolerance.max_perplexity_ratio is not None and metrics.perplexity_ratio is not None
    if tolerance.min_cosine is not None and not perplexity_judges:
        bars.append(Bar("cosine", metrics.cosine_mean, tolerance.min_cosine, True, 1.0))
    if tolerance.min_sqnr_db is not None:
        bars.append(Bar("SQNR dB", metrics.sqnr_db, tolerance.min_sqnr_db, True, math.inf))
    if tolerance.max_abs_error is not None:
        bars.append(Bar("max abs", metrics.max_abs_error, tolerance.max_abs_error, False, 0.0))
    if tolerance.min_argmax_agreement is not None:
        bars.append(Bar("argmax agreement", metrics.argmax_agreement, tolerance.min_argmax_agreement, True, 1.0))
    if tolerance.min_topk_agreement is not None:
        bars.append(Bar(f"top-{tolerance.topk} agreement", metrics.top(tolerance.topk), tolerance.min_topk_agreement,
                        True, 1.0))
    if perplexity_judges:
        bars.append(Bar("perplexity ratio", metrics.perplexity_ratio, tolerance.max_perplexity_ratio, False, 1.0))
    bar = task_bar(tolerance, metrics.task)
    if bar is not None:
        bars.append(Bar(TASK_WORDS[metrics.task], metrics.task_agreement, bar, True, 1.0))
    return tuple(bars)
