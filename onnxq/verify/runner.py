"""What a search needs of verification, as one API: the tasks the gate judges each output by, the budget each bar
leaves, a candidate's outputs compared with reference outputs batch by batch exactly as the gate compares them,
where reference outputs are kept, and a session whose kernels are read off ORT's profile. The sensitivity and the
fallback use this module and the package's face (onnxq.verify), never verification's inner modules."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxq.config import VerifyConfig
from onnxq.verify.kernels.placement import profiled_session
from onnxq.verify.metrics import Operand, OutputMetrics, SampleAxes, finite_or_none
from onnxq.verify.outcome import NOT_ON_COSINE, task_bar
from onnxq.verify.reference import OUTPUT_BUDGET, OutputStore, store_budget
from onnxq.verify.tasks.detection_sets import aligned_pairs, sets_of
from onnxq.verify.tasks.rules import accumulator, choose_tasks, measured_kind, output_facts
from onnxq.verify.tasks.types import OutputTask
from onnxq.verify.tasks.user_metric import TaskAccumulator, TaskMetric, TaskMetrics, task_metric

__all__ = ["gate_tasks", "bar_budgets", "OutputComparison", "reference_store", "OUTPUT_BUDGET", "profiled_session",
           "task_metric", "TaskMetric", "TaskMetrics", "OutputMetrics", "finite_or_none"]


def gate_tasks(config: VerifyConfig, float_model: ir.Model, names: Sequence[str], outputs: Sequence[np.ndarray],
               samples: int) -> dict[str, OutputTask]:
    """Each output's task metric as the gate chooses it (verify.tasks.rules), from the float model's outputs on
    one batch of `samples` samples."""
    return choose_tasks(config, output_facts(float_model, list(names), list(outputs), samples))


def bar_budgets(config: VerifyConfig, names: Sequence[str], tasks: Mapping[str, OutputTask]) -> dict[str, float]:
    """Per output with a cosine tolerance, 1 - min_cosine; per output with a task bar ("task:" + its name), 1 - the
    bar: how much of each a change may use. An output judged through another, or by its task alone, is not on
    cosine (inf)."""
    budgets = {}
    for name in names:
        tolerance = config.tolerance_for(name)
        task = tasks.get(name)
        if task is not None and task.kind in NOT_ON_COSINE and name not in config.output_tolerances:
            budgets[name] = math.inf
        elif tolerance.min_cosine is not None and tolerance.min_cosine < 1.0:
            budgets[name] = 1.0 - tolerance.min_cosine
        bar = task_bar(tolerance, measured_kind(task))
        if bar is not None and bar < 1.0:
            budgets[f"task:{name}"] = 1.0 - bar
    return budgets


class OutputComparison:
    """A candidate's outputs against reference outputs, as the gate compares them: each output by its task's
    accumulator (detection sets' rows matched first), and the user's task metric when there is one. One
    comparison is reused for many candidates: each output's samples axis is decided once, on the first batch."""

    def __init__(self, names: Sequence[str], tasks: Mapping[str, OutputTask], metric: TaskMetric | None) -> None:
        self.names, self.tasks, self.metric = list(names), dict(tasks), metric
        self.sample_axes = SampleAxes()
        self._accumulators: dict = {}
        self._task: TaskAccumulator | None = None

    def start(self) -> None:
        """A new candidate: the figures start from nothing."""
        self._accumulators = {n: accumulator(self.tasks.get(n)) for n in self.names}
        self._task = None if self.metric is None else TaskAccumulator(self.metric)

    def add(self, reference: Sequence[np.ndarray], values: Sequence[np.ndarray], samples: int,
            task_reference=None) -> None:
        """One batch: the reference outputs, the candidate's, the batch's sample count, and (with a task metric)
        the metric's reading of the reference."""
        expected = [Operand(ref, self.sample_axes.of(n, ref, samples)) for n, ref in zip(self.names, reference)]
        for n, ref, got in aligned_pairs(self.names, expected, list(values), sets_of(self.tasks)):
            self._accumulators[n].add(ref, got)
        if self._task is not None:
            self._task.add(task_reference, self.metric(self.names, list(values), samples), samples)

    def result(self) -> tuple[dict[str, OutputMetrics], TaskMetrics | None]:
        return {n: a.result() for n, a in self._accumulators.items()}, \
            None if self._task is None else self._task.result()


def reference_store(model: ir.Model) -> OutputStore:
    """Reference outputs kept in memory up to the verification's budget for this model, on disk beyond it."""
    return OutputStore(store_budget(model), recomputable=False)
