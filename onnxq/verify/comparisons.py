"""The comparisons of one verification, fed batch by batch: each provider's quantized outputs against the float
reference (the gate), the float model as deployed on each other provider against the same reference (the
provider's own arithmetic: reported), and each other provider's quantized outputs against the CPU's (the agreement,
held to the bound two in-tolerance providers always meet: verify.agreement).

It takes arrays, not sessions, so the rules are tested on outputs recorded from a GPU run as on live ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from onnxq.config import Tolerance, VerifyConfig
from onnxq.verify.agreement import implied_agreement
from onnxq.verify.tasks.detection_sets import aligned_pairs, sets_of
from onnxq.verify.metrics import MetricsAccumulator, Operand
from onnxq.verify.outcome import REPORTED, OutputCheck, checks_of, task_bar
from onnxq.verify.tasks.measures import OutputTask
from onnxq.verify.tasks.rules import accumulator, measured_kind
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["Comparisons", "ComparisonResult", "agreement_bound"]

_CPU = CPU_PROVIDER


def agreement_bound(config: VerifyConfig, output: str, task: OutputTask | None = None,
                    tolerance_for: Callable[[str], Tolerance] | None = None) -> Tolerance:
    """The bar for an output of the quantized model on another provider against the CPU's: the user's
    provider_agreement, or the one implied by the output's tolerance on both (one tolerance per output serves
    every provider, so the bound is the same for each pair); a task metric's share s on each implies 2s - 1.
    tolerance_for: the tolerances with their task bars resolved (outcome.task_tolerances); else the config's."""
    if config.provider_agreement is not None:
        return config.provider_agreement
    tolerance = (tolerance_for or config.tolerance_for)(output)
    bound = implied_agreement(tolerance, tolerance)
    bar = task_bar(tolerance, measured_kind(task))
    if bar is None:
        return dataclasses.replace(bound, task="numeric")
    return dataclasses.replace(bound, task=tolerance.task, min_task_agreement=max(0.0, round(2 * bar - 1, 9)))


@dataclasses.dataclass(frozen=True)
class ComparisonResult:
    outputs: dict[str, tuple[OutputCheck, ...]]  # provider → quantized there vs the reference, gated
    float_drift: dict[str, tuple[OutputCheck, ...]]  # provider (not CPU) → float there vs the reference, reported
    agreement: dict[str, tuple[OutputCheck, ...]]  # provider (not CPU) → quantized there vs on CPU, vs the bound
    bounds: dict[str, Tolerance]  # output → the agreement's bar


class Comparisons:
    def __init__(self, names: Sequence[str], providers: Sequence[str],
                 tasks: Mapping[str, OutputTask] | None = None) -> None:
        self.names = list(names)
        self.tasks = dict(tasks or {})
        self.sets = sets_of(self.tasks)  # detection sets: rows matched before comparing
        self.providers = list(providers)
        others = [p for p in providers if p != _CPU]
        self._quantized = {p: self._accumulators() for p in providers}
        self._float = {p: self._accumulators() for p in others}
        self._agreement = {p: self._accumulators() for p in others}

    def _accumulators(self) -> dict[str, MetricsAccumulator]:
        return {n: accumulator(self.tasks.get(n)) for n in self.names}

    def add(self, expected: Sequence[Operand], quantized: Mapping[str, Sequence[Operand]],
            floats: Mapping[str, Sequence[Operand]]) -> None:
        """One batch: the reference's outputs, each provider's quantized outputs and (other providers) float ones,
        each a list in the order of `names`."""
        for p, got in quantized.items():
            for name, e, g in aligned_pairs(self.names, expected, got, self.sets):
                self._quantized[p][name].add(e, g)
        for p, got in floats.items():
            for name, e, g in aligned_pairs(self.names, expected, got, self.sets):
                self._float[p][name].add(e, g)
        for p in self._agreement:
            for name, c, g in aligned_pairs(self.names, quantized[_CPU], quantized[p], self.sets):
                self._agreement[p][name].add(c, g)

    def result(self, config: VerifyConfig,
               tolerance_for: Callable[[str], Tolerance] | None = None) -> ComparisonResult:
        """tolerance_for: each output's tolerance, its task bar resolved (outcome.task_tolerances); else the
        config's."""
        tolerance_for = tolerance_for or config.tolerance_for
        bounds = {n: agreement_bound(config, n, self.tasks.get(n), tolerance_for) for n in self.names}
        return ComparisonResult(
            outputs={p: checks_of(a, tolerance_for) for p, a in self._quantized.items()},
            float_drift={p: checks_of(a, lambda _: REPORTED) for p, a in self._float.items()},
            agreement={p: checks_of(a, bounds.__getitem__) for p, a in self._agreement.items()},
            bounds=bounds)
