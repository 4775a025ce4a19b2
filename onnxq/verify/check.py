"""Run the float model (CPU, no optimizations: the reference) and the quantized model on each provider on the same
inputs, and gate every provider's outputs on their tolerance against that one reference — a model within
tolerance on every provider passes. Also: the float model as deployed on each other provider against the reference
(the provider's own arithmetic, reported), the quantized model's agreement across providers (held to the bound that
two in-tolerance providers always meet: verify.agreement), and where each node ran (placement: profiled where the
provider is present, predicted from ORT's kernel registrations where it is not)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxq.data.batching import samples_in
from onnxq.data.specs import Batch
from onnxq.config import Tolerance, VerifyConfig
from onnxq.io import load_model, trim_heap
from onnxq.targets import DEFAULT_TARGET
from onnxq.targets.providers import CPU_PROVIDER
from onnxq.verify.kernels.coverage import Coverage, CoverageRun
from onnxq.verify.comparisons import Comparisons
from onnxq.verify.metrics import Operand, SampleAxes
from onnxq.verify.outcome import JudgedChecks, OutputCheck, failures_for, task_tolerances
from onnxq.verify.kernels.assignment import read_placement
from onnxq.verify.kernels.placement import Placement
from onnxq.verify.providers import absent_providers, resolve_providers
from onnxq.verify.kernels.predict import predict_placement, predictable, with_mismatches
from onnxq.verify.reference import OutputStore, Reference
from onnxq.io.model_sessions import ModelSource, make_session
from onnxq.verify.tasks.user_metric import TaskAccumulator, TaskMetrics, task_metric
from onnxq.verify.tasks.types import OutputTask
from onnxq.verify.verdict import verdict_of

__all__ = ["OutputCheck", "ProviderCheck", "Verification", "Reference", "verify_models", "with_placement",
           "resolve_providers", "absent_providers", "failures_for"]

_CPU = CPU_PROVIDER


@dataclasses.dataclass(frozen=True)
class ProviderCheck(JudgedChecks):
    provider: str
    outputs: tuple[OutputCheck, ...]  # quantized on this provider vs the float reference (CPU, no optimizations)
    placement: Placement | None
    task: TaskMetrics | None = None  # the user's own evaluation (verify.task_metric), quantized here vs float
    # The float model as deployed on this provider vs the same reference: the provider's own arithmetic (TF32,
    # fused kernels), inside `outputs` too. None on the CPU, whose deployed float kernels the speed line times.
    float_drift: tuple[OutputCheck, ...] | None = None

    def to_dict(self) -> dict:
        return {"provider": self.provider, "passed": self.passed, "verdict": self.verdict,
                "outputs": {o.name: o.to_dict() for o in self.outputs},
                "placement": None if self.placement is None else self.placement.to_dict(),
                "task": None if self.task is None else self.task.to_dict(),
                "float_drift": None if self.float_drift is None else {o.name: o.to_dict() for o in self.float_drift}}


@dataclasses.dataclass(frozen=True)
class Verification:
    data: str  # where the inputs came from, in words
    samples: int
    providers: tuple[ProviderCheck, ...]
    # Quantized on CPU vs quantized on each other provider (ORT issues #11532, #10636: silent disagreement), each
    # output against agreement_bounds[output] (verify.agreement: what two in-tolerance providers always meet).
    agreement: dict[str, tuple[OutputCheck, ...]]
    unavailable: tuple[str, ...]  # requested providers this onnxruntime lacks, with why
    # Where the check holds: this CPU, each target (run / exact / emulated), the kernels' gap to the exact model.
    coverage: Coverage | None = None
    agreement_bounds: dict[str, Tolerance] = dataclasses.field(default_factory=dict)
    # Placements predicted from ORT's kernel registrations for providers asked for (or the target's) but absent.
    predicted: tuple[Placement, ...] = ()
    # Each output's task metric and the rule that chose it (verify.tasks.rules; kind "numeric": none).
    tasks: dict[str, OutputTask] = dataclasses.field(default_factory=dict)
    # Per output with a task metric, the float model's own agreement under input rounding (verify.stability): the
    # bar where it is below the kind's default.
    stability: dict[str, float] = dataclasses.field(default_factory=dict)
    # Per output with a task metric, the share of its answer it must keep (the kind's default, the user's, or the
    # float model's own where lower).
    task_bars: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Shown within tolerance: every check met, none left unshown by the data."""
        return (all(p.passed for p in self.providers) and all(o.passed for c in self.agreement.values() for o in c)
                and (self.coverage is None or self.coverage.passed))

    @property
    def failed(self) -> bool:
        """Out of tolerance: some bar measured below (the one case a search acts on)."""
        return (any(p.failed for p in self.providers) or any(o.failed for c in self.agreement.values() for o in c)
                or (self.coverage is not None and self.coverage.failed))

    @property
    def verdict(self) -> str:
        return verdict_of(self.failed, self.passed)

    @property
    def accuracy_could_show(self) -> bool:
        """Not shown, where a model closer to float could show a bar on this data (OutputCheck.accuracy_could_show):
        a search may try one; more data, not more accuracy, is what any other not-shown verdict needs."""
        return not self.failed and not self.passed and any(o.accuracy_could_show for p in self.providers
                                                            for o in p.outputs)

    def unshown(self) -> list[str]:
        """Why the data shows no verdict, once per reason, where no bar is measured below: the task intervals that
        straddle their bars, the float model's instability."""
        found = [u for p in self.providers for o in p.outputs for u in o.unshown]
        found += [u for p in self.providers if p.task is not None for u in p.task.unshown]
        found += [u for c in self.agreement.values() for o in c for u in o.unshown]
        if self.coverage is not None:  # a target's own reason only where the deployed check did not give it
            found += [f"on {target}: {reason}" for target, reason in self.coverage.unshown() if reason not in found]
        return list(dict.fromkeys(found))

    @property
    def cpu(self) -> ProviderCheck:
        return next(p for p in self.providers if p.provider == _CPU)

    @property
    def outputs(self) -> tuple[OutputCheck, ...]:
        return self.cpu.outputs

    @property
    def kernels(self) -> dict[str, int] | None:
        return None if self.cpu.placement is None else self.cpu.placement.kernels

    def to_dict(self) -> dict:
        return {"data": self.data, "samples": self.samples, "passed": self.passed, "verdict": self.verdict,
                "unshown": self.unshown(),
                "providers": {p.provider: p.to_dict() for p in self.providers},
                "agreement": {k: {o.name: o.to_dict() for o in v} for k, v in self.agreement.items()},
                "agreement_bounds": {n: dataclasses.asdict(t) for n, t in self.agreement_bounds.items()},
                "unavailable": list(self.unavailable),
                "predicted": {p.provider: p.to_dict() for p in self.predicted},
                "tasks": {n: {**t.to_dict(), "float_stability": self.stability.get(n), "bar": self.task_bars.get(n)}
                          for n, t in self.tasks.items()},
                "coverage": None if self.coverage is None else self.coverage.to_dict()}


def verify_models(reference: Reference, quant_model: ModelSource, config: VerifyConfig, data: str,
                  quantized_nodes: Mapping[str, str] | None = None, target: str | None = DEFAULT_TARGET) -> Verification:
    """With quantized_nodes (name → op type), also profile one batch per provider to report placement, and
    predict it on the providers asked for (or the target's) that are absent here.

    target: the CPUs and providers the model is meant for; each CPU is checked by running, by the exact
    quantization or by emulation (verify.kernels.coverage), and gates like the providers do. None: the providers only (a
    search's probe, which its confirmation checks in full)."""
    providers, unavailable = resolve_providers(config.providers, target)
    reference.prefetch()
    sessions = {p: make_session(quant_model, optimize=True, provider=p) for p in providers}
    # The float model as deployed on each other provider: its own difference from the reference, reported (by a
    # full check: a search's probe, target None, does without).
    floats = {p: make_session(reference.float_model, optimize=True, provider=p) for p in providers
              if p != _CPU and target is not None}
    task = _TaskRun(config, reference.names, providers)
    tasks = reference.tasks(config)
    stability = reference.stability(tasks)
    reference.release_session()  # every float output is kept now
    tolerance_for = task_tolerances(config, tasks, stability)
    comparisons = Comparisons(reference.names, providers, tasks)
    deployed = _run_deployed(reference, sessions, floats, (comparisons, task), keep=target is not None)
    del sessions, floats  # gone before the exact quantization's sessions are made,
    trim_heap()  # and what they freed handed back (glibc kept 220 MiB of SmolLM2's 4-bit session)
    coverage = None if deployed is None else _run_exact(reference, deployed, CoverageRun(
        quant_model if isinstance(quant_model, ir.Model) else load_model(quant_model), reference.names, config, target,
        task.metric, tasks, tolerance_for))
    found = comparisons.result(config, tolerance_for)
    checks = tuple(ProviderCheck(p, found.outputs[p], None, task.result(p), found.float_drift.get(p))
                   for p in providers)
    others = {c.provider: (c.outputs, c.task) for c in checks[1:]}
    verification = Verification(data, reference.samples, checks, found.agreement, tuple(unavailable),
                                None if coverage is None else coverage.result(checks[0].outputs, checks[0].task,
                                                                              others), found.bounds,
                                tasks=tasks, stability=stability, task_bars=_task_bars(tasks, tolerance_for))
    first = reference.batches.first()
    if quantized_nodes is None or first is None:
        return verification
    return with_placement(verification, quant_model, first, quantized_nodes,
                          absent_providers(config.providers, target or DEFAULT_TARGET))


def _task_bars(tasks: Mapping[str, OutputTask], tolerance_for: Callable[[str], Tolerance]) -> dict[str, float]:
    """Each task-gated output's bar, as its tolerance resolved it."""
    bars = {name: tolerance_for(name).min_task_agreement for name in tasks}
    return {name: bar for name, bar in bars.items() if bar is not None}


def _run_deployed(reference: Reference, sessions: Mapping[str, ort.InferenceSession],
                  floats: Mapping[str, ort.InferenceSession], into: tuple[Comparisons, _TaskRun],
                  keep: bool) -> _Deployed | None:
    """Every verification batch through every deployed session, each output read once (with its norms) for every
    comparison it takes part in. keep: this CPU's outputs and the task metric's float answers are returned for the
    exact quantization's pass (_run_exact)."""
    comparisons, task = into
    kept = _Deployed(OutputStore(reference.store.memory_bytes, recomputable=False), []) if keep else None
    for batch, outputs, expected in _expected(reference, comparisons.tasks):
        raw = {p: s.run(reference.names, batch) for p, s in sessions.items()}
        answer = task.add(batch, outputs, raw)
        if kept is not None:
            kept.outputs.append(raw[_CPU])
            kept.answers.append(answer)
        got = {p: [Operand(g, e.sample_axis) for g, e in zip(values, expected)] for p, values in raw.items()}
        del raw
        floated = {p: [Operand(g, e.sample_axis) for g, e in zip(s.run(reference.names, batch), expected)]
                   for p, s in floats.items()}
        comparisons.add(expected, got, floated)
        del outputs, expected, got, floated  # not alive through the next batch's runs
    return kept


def _run_exact(reference: Reference, deployed: _Deployed, coverage: CoverageRun) -> CoverageRun:
    """The same batches through the exact quantization (and the AVX2 emulation), made once the deployed sessions
    are gone: a deployed session owns a packed copy of the quantized weights and its arena keeps a run's buffers,
    which were resident beside the exact sessions' (SmolLM2's W8A8 verification peaked at 840 MiB with both)."""
    try:
        for i, (batch, _, expected) in enumerate(_expected(reference, coverage.tasks)):
            here = [Operand(d, e.sample_axis) for d, e in zip(deployed.outputs[i], expected)]
            coverage.add(batch, expected, here, deployed.answers[i])
            del expected, here
    finally:
        deployed.outputs.close()
    return coverage


@dataclasses.dataclass(frozen=True)
class _Deployed:
    """This CPU's deployed outputs of each batch (in memory up to the reference's budget, then on disk) and the
    task metric's answer on the float outputs (None without one)."""

    outputs: OutputStore
    answers: list


def _expected(reference: Reference,
              tasks: Mapping[str, OutputTask]) -> Iterator[tuple[Batch, list[np.ndarray], list[Operand]]]:
    """Each batch, the reference's outputs, and those as operands, each on its samples axis, logits with their
    tokens."""
    sample_axes = SampleAxes()
    for batch, outputs in reference:
        samples = samples_in(batch)
        expected = [Operand(e, sample_axes.of(n, e, samples)) for n, e in zip(reference.names, outputs)]
        _with_tokens(expected, reference.names, tasks, batch)
        yield batch, outputs, expected


def _with_tokens(operands: Sequence[Operand], names: Sequence[str], tasks: Mapping[str, OutputTask],
                 batch: Batch) -> None:
    """A language model's logits get the batch's tokens (and attention mask), whose next ones they are scored on."""
    for operand, name in zip(operands, names):
        task = tasks.get(name)
        if task is not None and task.labels is not None and task.labels in batch:
            mask = batch.get("attention_mask")
            operand.tokens = (np.asarray(batch[task.labels]), None if mask is None or np.ndim(mask) != 2 else
                              np.asarray(mask))


def with_placement(verification: Verification, quant_model: ModelSource, batch: Batch,
                   quantized_nodes: Mapping[str, str], absent: tuple[str, ...] = ()) -> Verification:
    """The verification with each provider's placement, from one profiled batch per provider, each checked against
    the kernel table's prediction where the table knows the provider; and predicted placements for `absent`."""
    model = quant_model if isinstance(quant_model, ir.Model) else load_model(quant_model)
    checks = []
    for check in verification.providers:
        placement = read_placement(quant_model, check.provider, batch, quantized_nodes)
        if predictable(check.provider):
            placement = with_mismatches(placement, predict_placement(model, check.provider, quantized_nodes))
        checks.append(dataclasses.replace(check, placement=placement))
    predicted = tuple(predict_placement(model, p, quantized_nodes) for p in absent)
    return dataclasses.replace(verification, providers=tuple(checks), predicted=predicted)


class _TaskRun:
    """verify.task_metric over a verification: the float outputs' answer once per batch, each provider's against
    it. Nothing when no task metric is set."""

    def __init__(self, config: VerifyConfig, names: list[str], providers: list[str]) -> None:
        self.names = names
        self.metric = task_metric(config)
        self.accumulators = {} if self.metric is None else {p: TaskAccumulator(self.metric) for p in providers}

    def add(self, batch: Batch, reference: list, got: Mapping[str, list]) -> float | list | None:
        """Each provider's answer against the float outputs' answer, which it returns (None: no task metric)."""
        if self.metric is None:
            return None
        samples = samples_in(batch)
        expected = self.metric(self.names, reference, samples)
        for provider, outputs in got.items():
            self.accumulators[provider].add(expected, self.metric(self.names, outputs, samples), samples)
        return expected

    def result(self, provider: str) -> TaskMetrics | None:
        return None if self.metric is None else self.accumulators[provider].result()
