"""Run the float model (CPU, the reference) and the quantized model on each provider on the same inputs, and
gate every output on its tolerance; also gate the quantized model's agreement across providers."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir
import onnxruntime as ort

from onnxq.calibration.batching import samples_in
from onnxq.calibration.specs import Batch
from onnxq.config import PROVIDER_ALIASES, VerifyConfig
from onnxq.io import load_model
from onnxq.verify.coverage import Coverage, CoverageRun
from onnxq.verify.metrics import MetricsAccumulator, Operand, SampleAxes
from onnxq.verify.outcome import OutputCheck, failures_for
from onnxq.verify.placement import Placement, profile_placement
from onnxq.verify.reference import Reference
from onnxq.verify.sessions import ModelSource, make_session
from onnxq.verify.task import TaskAccumulator, TaskMetrics, task_metric

__all__ = ["OutputCheck", "ProviderCheck", "Verification", "Reference", "verify_models", "with_placement",
           "resolve_providers", "failures_for"]


@dataclasses.dataclass(frozen=True)
class ProviderCheck:
    provider: str
    outputs: tuple[OutputCheck, ...]  # quantized on this provider vs float on CPU
    placement: Placement | None
    task: TaskMetrics | None = None  # the user's own evaluation (verify.task_metric), quantized here vs float

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs) and (self.task is None or self.task.passed)

    def to_dict(self) -> dict:
        return {"provider": self.provider, "passed": self.passed,
                "outputs": {o.name: o.to_dict() for o in self.outputs},
                "placement": None if self.placement is None else self.placement.to_dict(),
                "task": None if self.task is None else self.task.to_dict()}


@dataclasses.dataclass(frozen=True)
class Verification:
    data: str  # where the inputs came from, in words
    samples: int
    providers: tuple[ProviderCheck, ...]
    # Quantized on CPU vs quantized on each other provider (ORT issues #11532, #10636: silent disagreement).
    agreement: dict[str, tuple[OutputCheck, ...]]
    unavailable: tuple[str, ...]  # requested providers this onnxruntime lacks, with why
    # Where the check holds: this CPU, each target (run / exact / emulated), the kernels' gap to the exact model.
    coverage: Coverage | None = None

    @property
    def passed(self) -> bool:
        return (all(p.passed for p in self.providers) and all(o.passed for c in self.agreement.values() for o in c)
                and (self.coverage is None or self.coverage.passed))

    @property
    def cpu(self) -> ProviderCheck:
        return next(p for p in self.providers if p.provider == "CPUExecutionProvider")

    @property
    def outputs(self) -> tuple[OutputCheck, ...]:
        return self.cpu.outputs

    @property
    def kernels(self) -> dict[str, int] | None:
        return None if self.cpu.placement is None else self.cpu.placement.kernels

    def to_dict(self) -> dict:
        return {"data": self.data, "samples": self.samples, "passed": self.passed,
                "providers": {p.provider: p.to_dict() for p in self.providers},
                "agreement": {k: {o.name: o.to_dict() for o in v} for k, v in self.agreement.items()},
                "unavailable": list(self.unavailable),
                "coverage": None if self.coverage is None else self.coverage.to_dict()}


def resolve_providers(requested: Sequence[str]) -> tuple[list[str], list[str]]:
    """(providers to run, messages for requested ones this onnxruntime lacks). CPU always runs."""
    available = ort.get_available_providers()
    wanted = ["CPUExecutionProvider"]
    missing = []
    for name in requested:
        if name == "auto":
            wanted += [p for p in ("CUDAExecutionProvider",) if p in available]
            continue
        full = PROVIDER_ALIASES.get(name.lower(), name)
        if full in available:
            wanted.append(full)
        else:
            hint = " (install onnxruntime-gpu and a CUDA runtime)" if full == "CUDAExecutionProvider" else ""
            missing.append(f"{full} is not available in this onnxruntime{hint}; skipped")
    return list(dict.fromkeys(wanted)), missing


def verify_models(reference: Reference, quant_model: ModelSource, config: VerifyConfig, data: str,
                  quantized_nodes: Mapping[str, str] | None = None, target: str | None = "portable") -> Verification:
    """With quantized_nodes (name → op type), also profile one batch per provider to report placement.

    target: the CPUs the model is meant for; each is checked by running, by the exact quantization or by
    emulation (verify.coverage), and gates like the providers do. None: the providers only (a search's probe,
    which its confirmation checks in full)."""
    providers, unavailable = resolve_providers(config.providers)
    reference.prefetch()
    sessions = {p: make_session(quant_model, optimize=True, provider=p) for p in providers}
    accumulators = {p: {n: MetricsAccumulator() for n in reference.names} for p in providers}
    agreement = {p: {n: MetricsAccumulator() for n in reference.names} for p in providers[1:]}
    task = _TaskRun(config, reference.names, providers)
    sample_axes = SampleAxes()
    coverage = None if target is None else CoverageRun(
        quant_model if isinstance(quant_model, ir.Model) else load_model(quant_model), reference.names, config, target,
        task.metric)
    for batch, outputs in reference:
        raw = {p: s.run(reference.names, batch) for p, s in sessions.items()}
        expected_task = task.add(batch, outputs, raw)
        # Each array in float64 once, with its norms, for every comparison it takes part in.
        samples = samples_in(batch)
        axes = [sample_axes.of(n, e, samples) for n, e in zip(reference.names, outputs)]
        expected = [Operand(e, a) for e, a in zip(outputs, axes)]
        got = {p: [Operand(g, a) for g, a in zip(values, axes)] for p, values in raw.items()}
        del raw
        if coverage is not None:
            coverage.add(batch, expected, got["CPUExecutionProvider"], expected_task)
        for p in providers:
            for name, e, g in zip(reference.names, expected, got[p]):
                accumulators[p][name].add(e, g)
        for p in providers[1:]:
            for name, c, g in zip(reference.names, got["CPUExecutionProvider"], got[p]):
                agreement[p][name].add(c, g)
    checks = tuple(ProviderCheck(p, tuple(OutputCheck(n, m, failures_for(m, config.tolerance_for(n)))
                                          for n, m in ((n, a.result()) for n, a in accumulators[p].items())), None,
                                 task.result(p))
                   for p in providers)
    agreed = {p: tuple(OutputCheck(n, m, failures_for(m, config.provider_agreement))
                       for n, m in ((n, a.result()) for n, a in agreement[p].items())) for p in agreement}
    verification = Verification(data, reference.samples, checks, agreed, tuple(unavailable),
                                None if coverage is None else coverage.result(checks[0].outputs, checks[0].task))
    first = reference.batches.first()
    if quantized_nodes is None or first is None:
        return verification
    return with_placement(verification, quant_model, first, quantized_nodes)


def with_placement(verification: Verification, quant_model: ModelSource, batch: Batch,
                   quantized_nodes: Mapping[str, str]) -> Verification:
    """The verification with each provider's placement, from one profiled batch per provider."""
    checks = tuple(dataclasses.replace(c, placement=profile_placement(quant_model, c.provider, batch,
                                                                       quantized_nodes))
                   for c in verification.providers)
    return dataclasses.replace(verification, providers=checks)


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
