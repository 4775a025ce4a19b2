"""The user's own evaluation (verify.task_metric) of the float and the quantized model's outputs, batch by batch.

The hook sees one batch's outputs ({name: array}, read-only: the float outputs are shared by every check) and
returns either the batch's score — a float, higher is better, averaged over batches weighted by their samples (so a
mean of per-sample figures, an accuracy, is exact) — or one decision per sample (a decoded string, a label, a box
list), which onnxq compares with the float model's: the score is then the share of samples whose decision is kept.
The gate passes when the quantized score is at most task_max_drop below the float one."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxq.config import VerifyConfig
from onnxq.config.hooks import hook_name, resolve_hook
from onnxq.errors import ConfigError, one_line, whole_message
from onnxq.numerics.interval import wilson
from onnxq.verify.metrics import finite_or_none
from onnxq.verify.outcome import not_shown_words
from onnxq.verify.verdict import verdict_of

__all__ = ["TaskMetrics", "TaskMetric", "TaskAccumulator", "task_metric"]

SCORE, AGREEMENT = "score", "agreement"


@dataclasses.dataclass(frozen=True)
class TaskMetrics:
    metric: str  # the hook, as the config names it
    kind: str  # SCORE: the hook's own score; AGREEMENT: the share of per-sample decisions kept
    samples: int
    reference: float  # the float model's score (1.0 for agreement)
    quantized: float
    max_drop: float

    @property
    def drop(self) -> float:
        return self.reference - self.quantized

    @property
    def failures(self) -> tuple[str, ...]:
        if not math.isfinite(self.reference) or not math.isfinite(self.quantized):
            return (f"task metric {self.metric} is not a finite number (float {self.reference}, quantized "
                    f"{self.quantized})",)
        if self.drop <= self.max_drop + 1e-12:  # a tolerance of 0 must accept an equal score
            return ()
        what = "decisions kept" if self.kind == AGREEMENT else "score"
        return (f"task metric {self.metric}: {what} {self.quantized:.4f} vs float {self.reference:.4f}, drop "
                f"{self.drop:.4f} > {self.max_drop}",)

    @property
    def unshown(self) -> tuple[str, ...]:
        """Decisions kept whose 95 % interval reaches below 1 - max_drop although the share does not (a score has
        no such interval: it is the user's own figure)."""
        if self.kind != AGREEMENT or self.failures:
            return ()
        interval = wilson(round(self.quantized * self.samples), self.samples)
        bar = 1.0 - self.max_drop
        if interval.low >= bar - 1e-12 and interval.units:
            return ()
        return (f"task metric {self.metric}: " + not_shown_words("decisions kept", interval, round(bar, 9),
                                                                 "samples"),)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def passed(self) -> bool:
        return not self.failures and not self.unshown

    @property
    def verdict(self) -> str:
        return verdict_of(self.failed, self.passed)

    def text(self) -> str:
        what = "share of per-sample decisions kept" if self.kind == AGREEMENT else "score"
        verdict = "ok" if self.passed else "FAIL" if self.failed else "NOT SHOWN: " + "; ".join(self.unshown)
        return (f"  task metric {self.metric} ({what}, {self.samples} samples): float {self.reference:.4f}, "
                f"quantized {self.quantized:.4f}, drop {self.drop:.4f} (at most {self.max_drop})  {verdict}")

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "kind": self.kind, "samples": self.samples,
                "reference": finite_or_none(self.reference), "quantized": finite_or_none(self.quantized),
                "drop": finite_or_none(self.drop), "max_drop": self.max_drop, "passed": self.passed,
                "failures": list(self.failures), "verdict": self.verdict, "unshown": list(self.unshown)}


class TaskMetric:
    """The hook, called once per batch and model; its answer checked for the kind and size it must have."""

    def __init__(self, config: VerifyConfig) -> None:
        self.name = hook_name(config.task_metric)
        self.max_drop = config.task_max_drop
        self._function: Callable[..., Any] = resolve_hook(config.task_metric, "verify.task_metric")

    def __call__(self, names: Sequence[str], outputs: Sequence[np.ndarray], samples: int) -> float | list:
        arrays = {}
        for name, output in zip(names, outputs):
            view = np.asarray(output).view()
            view.flags.writeable = False
            arrays[name] = view
        try:
            answer = self._function(arrays)
        except Exception as e:  # the user's code: its own error, named, is the message
            raise ConfigError(f"verify.task_metric {one_line(self.name)} raised {type(e).__name__}: "
                              f"{whole_message(e)} — fix the function") from None
        return self._checked(answer, samples)

    def _checked(self, answer: Any, samples: int) -> float | list:
        if isinstance(answer, np.ndarray) and answer.ndim == 0:
            answer = answer.item()
        if isinstance(answer, numbers.Real):
            return float(answer)
        if isinstance(answer, (list, tuple, np.ndarray)) and len(answer) == samples:
            return list(answer)
        got = f"{len(answer)} values" if isinstance(answer, (list, tuple, np.ndarray)) else type(answer).__name__
        count = f"{samples} sample" + ("s" if samples != 1 else "")
        raise ConfigError(f"verify.task_metric {one_line(self.name)} returned {one_line(got)} for a batch of {count} "
                          f"— return a float (the batch's score) or a list of one decision per sample")


class TaskAccumulator:
    """One model's task score against the float model's, over the batches."""

    def __init__(self, metric: TaskMetric) -> None:
        self.metric = metric
        self.kind: str | None = None
        self.samples = 0
        self.reference = 0.0
        self.quantized = 0.0

    def add(self, reference: float | list, quantized: float | list, samples: int) -> None:
        kind = AGREEMENT if isinstance(reference, list) else SCORE
        if self.kind not in (None, kind) or isinstance(quantized, list) != (kind == AGREEMENT):
            raise ConfigError(f"verify.task_metric {one_line(self.metric.name)} returned a score for one batch and "
                              "per-sample decisions for another — return one kind")
        self.kind = kind
        self.samples += samples
        if kind == AGREEMENT:
            self.reference += samples
            self.quantized += sum(_same(r, q) for r, q in zip(reference, quantized))
        else:
            self.reference += reference * samples
            self.quantized += quantized * samples

    def result(self) -> TaskMetrics:
        count = max(self.samples, 1)
        return TaskMetrics(self.metric.name, self.kind or SCORE, self.samples, self.reference / count,
                           self.quantized / count, self.metric.max_drop)


def task_metric(config: VerifyConfig) -> TaskMetric | None:
    return None if config.task_metric is None else TaskMetric(config)


def _same(a: Any, b: Any) -> bool:
    """Two decisions equal: arrays (a decoded token sequence) by value and shape, anything else by ==."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    try:
        return bool(a == b)
    except Exception:  # a comparison that does not give one truth value: not the same
        return False
