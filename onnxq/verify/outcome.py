"""One output's verdict: its metrics against a tolerance — failed where a bar is measured below, not shown where
a task bar's interval straddles it (numerics.interval) or the float model is too unstable to judge."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from onnxq.config import Tolerance, VerifyConfig
from onnxq.errors import ConfigError, one_line
from onnxq.verify.bars import Bar, bars_for, task_bar
from onnxq.numerics.interval import ShareInterval, units_to_show, wilson
from onnxq.verify.metrics import MetricsAccumulator, OutputMetrics
from onnxq.verify.tasks.types import OutputTask, PERPLEXITY_BAR, TASK_BARS, TASK_FLOOR, TASK_WORDS
from onnxq.verify.verdict import verdict_of

__all__ = ["OutputCheck", "JudgedChecks", "NOT_ON_COSINE", "failures_for", "unshown_for", "checks_of", "check_output_tolerances",
           "task_bar", "task_interval", "REPORTED", "task_tolerances", "TaskTolerances", "UNITS", "not_shown_words"]

# The tolerance of a comparison that is reported, not gated (the float model on another provider, the kernels' gap).
REPORTED = Tolerance(min_cosine=None, task="numeric")


def task_interval(metrics: OutputMetrics) -> ShareInterval | None:
    """The 95 % interval of the output's task agreement (None: no task measure, or one a share does not judge:
    a language model's next-token agreement, which the perplexity ratio gates)."""
    if metrics.task is None or metrics.task == "next-token":
        return None
    return wilson(round(metrics.task_agreement * metrics.task_units), metrics.task_units)


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    name: str
    metrics: OutputMetrics
    failures: tuple[str, ...]  # the bars measured below: out of tolerance
    # Why the data cannot show a bar that is not measured below (numerics.interval: the sample count; the float
    # model's own instability): not shown.
    unshown: tuple[str, ...] = ()
    bar: float | None = None  # the task agreement's bar, where one gates
    tolerance: Tolerance | None = None  # what the figures were held to (None: not recorded)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def passed(self) -> bool:
        """Shown within every bar."""
        return not self.failures and not self.unshown

    @property
    def verdict(self) -> str:
        return verdict_of(self.failed, self.passed)

    @property
    def accuracy_could_show(self) -> bool:
        """Not shown, where a model closer to float could show the task bar on this data: its units are at least
        the count that no change at all would need (a data set too small for any model is not)."""
        interval = task_interval(self.metrics) if self.unshown and self.bar is not None else None
        clean = None if interval is None else units_to_show(1.0, self.bar)
        return clean is not None and interval.units >= clean

    @property
    def bars(self) -> tuple[Bar, ...]:
        """Each gated figure beside its bar (verify.bars); none for a comparison that is reported, not gated."""
        return () if self.tolerance is None else bars_for(self.metrics, self.tolerance)

    def to_dict(self) -> dict:
        interval = task_interval(self.metrics) if self.bar is not None else None
        return {**self.metrics.to_dict(), "passed": self.passed, "failures": list(self.failures),
                "bars": [b.to_dict() for b in self.bars], "verdict": self.verdict, "unshown": list(self.unshown),
                "task_bar": self.bar, "task_interval": None if interval is None else interval.to_dict()}


class JudgedChecks:
    """The verdict of output checks and an optional task metric taken together (a provider's, a target's): shown
    within tolerance when all are, out of tolerance when any is measured below a bar, not shown otherwise. The class
    that mixes it in has `outputs` and `task`."""

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs) and (self.task is None or self.task.passed)

    @property
    def failed(self) -> bool:
        return any(o.failed for o in self.outputs) or (self.task is not None and self.task.failed)

    @property
    def verdict(self) -> str:
        return verdict_of(self.failed, self.passed)


class TaskTolerances:
    """Each output's tolerance with its task bar resolved: the user's, else the kind's default — or the float
    model's own agreement under input rounding (verify.stability) where that is lower: no quantized model is held to
    a decision the float model does not keep itself. But a bar never falls below TASK_FLOOR: where the float model
    keeps less of its own answer than that, the kind's default bar stays and an agreement short of it is not shown
    (`unstable`), never passed on a bar no user would accept (a detector whose float model keeps 0.76 of its
    detections under noise would pass a file that loses a quarter of them). A language model's logits are held to
    the perplexity ratio in place of the numeric bars, and its cache outputs (state) are reported, judged through
    the logits; a detection set is held to its detections kept — unless the output has a tolerance of its own."""

    def __init__(self, config: VerifyConfig, tasks: Mapping[str, OutputTask], stability: Mapping[str, float]) -> None:
        self.config, self.tasks, self.stability = config, tasks, stability

    def __call__(self, name: str) -> Tolerance:
        tolerance, task = self.config.tolerance_for(name), self.tasks.get(name)
        if task is not None and task.kind in _JUDGED_AS_A_WHOLE and tolerance.task != "numeric" \
                and name not in self.config.output_tolerances:
            tolerance = _JUDGED_AS_A_WHOLE[task.kind](tolerance)
        if not self._lowered_by_stability(name, tolerance):
            return tolerance
        own = self.stability.get(name, 1.0)
        bar = TASK_BARS[task.kind] if own < TASK_FLOOR else min(TASK_BARS[task.kind], own)
        return dataclasses.replace(tolerance, min_task_agreement=bar)

    def unstable(self, name: str) -> float | None:
        """The float model's own agreement where it is below TASK_FLOOR and would have set the bar: the data cannot
        judge the output's task below the kind's default bar. None otherwise."""
        own = self.stability.get(name)
        if own is None or own >= TASK_FLOOR:
            return None
        return own if self._lowered_by_stability(name, self.config.tolerance_for(name)) else None

    def _lowered_by_stability(self, name: str, tolerance: Tolerance) -> bool:
        """Whether the kind's default bar applies (no bar of the user's, a task measured), which the float model's
        stability may lower."""
        task = self.tasks.get(name)
        return not (task is None or task.kind not in TASK_BARS or tolerance.task == "numeric"
                    or tolerance.min_task_agreement is not None)


def task_tolerances(config: VerifyConfig, tasks: Mapping[str, OutputTask],
                    stability: Mapping[str, float]) -> TaskTolerances:
    return TaskTolerances(config, tasks, stability)


_LANGUAGE_MODEL = {
    "next-token": lambda t: dataclasses.replace(t, max_perplexity_ratio=(
        PERPLEXITY_BAR if t.max_perplexity_ratio is None else t.max_perplexity_ratio)),
    "state": lambda t: dataclasses.replace(REPORTED, task=t.task),
}


def _task_alone(tolerance: Tolerance) -> Tolerance:
    return dataclasses.replace(REPORTED, task=tolerance.task, min_task_agreement=tolerance.min_task_agreement)


# Outputs judged by their task in place of the numeric bars, unless they have a tolerance of their own: a language
# model's logits and its cache; a detection set's rows (verify.tasks.detection_sets), whose figures count a detection one
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


def failures_for(metrics: OutputMetrics, tolerance: Tolerance, task: bool = True) -> tuple[str, ...]:
    """What fails the tolerance; a NaN or inf anywhere fails whatever the tolerance, since no figure means
    anything then. task: whether the task agreement's point estimate below its bar fails (not where the float model
    is too unstable for the data to judge it: unshown_for says so instead)."""
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
    if task and bar is not None and not metrics.task_agreement >= bar:
        found.append(f"{TASK_WORDS[metrics.task]} {metrics.task_agreement:.4f} < {bar} (over {metrics.task_units} "
                     f"{UNITS[metrics.task]})")
    return tuple(found)


def unshown_for(metrics: OutputMetrics, tolerance: Tolerance, unstable: float | None = None) -> tuple[str, ...]:
    """Why the data cannot show the output's task bar, where the agreement is not measured below it: its 95 %
    interval reaches below the bar (with the count of units that would show it), or there is nothing to count, or
    (unstable: the float model's own agreement under input noise, below TASK_FLOOR) the float model does not keep
    its own answer well enough for any agreement short of the default bar to mean anything."""
    bar = task_bar(tolerance, metrics.task)
    interval = task_interval(metrics)
    if bar is None or interval is None or interval.low >= bar and interval.units:
        return ()
    words, units = TASK_WORDS[metrics.task], UNITS[metrics.task]
    if unstable is not None:
        return (f"the float model itself keeps only {unstable:.2f} of its own answer ({words}) under one step of "
                f"input noise, below the {TASK_FLOOR:g} floor a bar may fall to — the data cannot judge "
                f"{metrics.task_agreement:.4f} against the {bar:g} bar (set the output's own task bar to judge it)",)
    if not metrics.task_agreement >= bar:
        return ()  # measured below: a failure (failures_for)
    if not interval.units:
        return (f"no {units} in the verification data: its {words} shows nothing — pass data that holds some",)
    return (not_shown_words(words, interval, bar, units),)


def not_shown_words(words: str, interval: ShareInterval, bar: float, units: str) -> str:
    """A share whose interval straddles its bar, and the count of units that would show it."""
    clean = units_to_show(1.0, bar)
    need = units_to_show(interval.share, bar)
    way = (f"about {clean} {units} with no change would show it" if interval.kept == interval.units or need is None
           else f"about {need} {units} at this agreement ({clean} with no change) would show it")
    return (f"{words} {interval.share:.4f} on {interval.units} {units} (95% interval {interval.low:.3f}–"
            f"{interval.high:.3f}) cannot show the {bar:g} bar: {way}")


UNITS = {"top1": "decisions", "next-token": "positions", "sequence": "samples", "frames": "frames",
         "iou": "pixels of the union", "labels": "labels", "detections": "confident detections of either model",
         "head-detections": "detections of either model", "packed-detections": "detections of either model",
         "decoded": "samples"}


def checks_of(accumulators: Mapping[str, MetricsAccumulator],
              tolerance_for: Callable[[str], Tolerance]) -> tuple[OutputCheck, ...]:
    """Each output's accumulated metrics against its tolerance (a TaskTolerances also says where the float model is
    too unstable to judge its task)."""
    checks = []
    for name, accumulator in accumulators.items():
        metrics, tolerance = accumulator.result(), tolerance_for(name)
        unstable = tolerance_for.unstable(name) if isinstance(tolerance_for, TaskTolerances) else None
        checks.append(OutputCheck(name, metrics, failures_for(metrics, tolerance, task=unstable is None),
                                  unshown_for(metrics, tolerance, unstable), task_bar(tolerance, metrics.task),
                                  tolerance))
    return tuple(checks)


def check_output_tolerances(config: VerifyConfig, outputs: list[str]) -> None:
    """A tolerance naming an output the model does not have would never be applied: refuse it."""
    unknown = [name for name in config.output_tolerances if name not in outputs]
    if unknown:
        raise ConfigError(f"a tolerance names output {one_line(repr(unknown[0]))}, which the model does not have; its "
                          f"outputs are: {one_line(', '.join(outputs))}")
