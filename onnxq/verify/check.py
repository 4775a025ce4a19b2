"""Run the float model (CPU, the reference) and the quantized model on each provider on the same inputs, and
gate every output on its tolerance; also gate the quantized model's agreement across providers."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxq.calibration.batching import Batches, samples_in
from onnxq.calibration.specs import Batch
from onnxq.config import PROVIDER_ALIASES, VerifyConfig
from onnxq.io import load_model, page_out
from onnxq.verify.coverage import Coverage, CoverageRun
from onnxq.verify.metrics import MetricsAccumulator
from onnxq.verify.outcome import OutputCheck, failures_for
from onnxq.verify.placement import Placement, profile_placement
from onnxq.verify.sessions import ModelSource, make_session

__all__ = ["OutputCheck", "ProviderCheck", "Verification", "Reference", "verify_models", "with_placement",
           "resolve_providers", "failures_for"]

# Float reference outputs are kept in memory up to this size, so that repeated checks (fallback) run the float
# model once; above it they are recomputed per check.
_REFERENCE_CACHE_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class ProviderCheck:
    provider: str
    outputs: tuple[OutputCheck, ...]  # quantized on this provider vs float on CPU
    placement: Placement | None

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def to_dict(self) -> dict:
        return {"provider": self.provider, "passed": self.passed,
                "outputs": {o.name: o.to_dict() for o in self.outputs},
                "placement": None if self.placement is None else self.placement.to_dict()}


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


class Reference:
    """The float model's outputs on the verification batches (CPU, no graph optimizations), computed once and
    kept while small enough."""

    def __init__(self, float_model: ModelSource, batches: Batches | Sequence[Batch]) -> None:
        self.float_model = float_model
        self.session = make_session(float_model, optimize=False)
        self.names = [o.name for o in self.session.get_outputs()]
        self.batches = batches if isinstance(batches, Batches) else Batches.held(batches)
        self._cache: list[list[np.ndarray]] | None = []
        self._cached_bytes = 0
        self._samples: int | None = None

    def __iter__(self):
        samples = 0
        for i, batch in enumerate(self.batches):
            samples += samples_in(batch)
            if self._cache is not None and i < len(self._cache):
                yield batch, self._cache[i]
                continue
            outputs = self.session.run(self.names, batch)
            if self._cache is not None:
                self._cached_bytes += sum(o.nbytes for o in outputs)
                if self._cached_bytes <= _REFERENCE_CACHE_BYTES:
                    self._cache.append(outputs)
                else:
                    self._cache = None
            yield batch, outputs
        self._samples = samples

    @property
    def samples(self) -> int:
        """Samples in the batches (counted by the last full pass; a pass without running the model if none)."""
        if self._samples is None:
            self._samples = sum(samples_in(b) for b in self.batches)
        return self._samples

    def prefetch(self) -> None:
        """Compute the outputs now; when they are all kept, page the float weights out, so that the quantized
        sessions that follow are not resident beside them (they come back from the file if needed again). Stops
        as soon as they are too big to keep: they will be computed batch by batch during the check."""
        for _ in self:
            if self._cache is None:
                return
        if isinstance(self.float_model, ir.Model):
            page_out(self.float_model)


def verify_models(reference: Reference, quant_model: ModelSource, config: VerifyConfig, data: str,
                  quantized_nodes: Mapping[str, str] | None = None, target: str = "portable") -> Verification:
    """With quantized_nodes (name → op type), also profile one batch per provider to report placement.

    target: the CPUs the model is meant for; each is checked by running, by the exact quantization or by
    emulation (verify.coverage), and gates like the providers do."""
    providers, unavailable = resolve_providers(config.providers)
    reference.prefetch()
    sessions = {p: make_session(quant_model, optimize=True, provider=p) for p in providers}
    accumulators = {p: {n: MetricsAccumulator() for n in reference.names} for p in providers}
    agreement = {p: {n: MetricsAccumulator() for n in reference.names} for p in providers[1:]}
    coverage = CoverageRun(quant_model if isinstance(quant_model, ir.Model) else load_model(quant_model),
                           reference.names, config, target)
    for batch, expected in reference:
        got = {p: s.run(reference.names, batch) for p, s in sessions.items()}
        coverage.add(batch, expected, got["CPUExecutionProvider"])
        for p in providers:
            for name, e, g in zip(reference.names, expected, got[p]):
                accumulators[p][name].add(e, g)
        for p in providers[1:]:
            for name, c, g in zip(reference.names, got["CPUExecutionProvider"], got[p]):
                agreement[p][name].add(c, g)
    checks = tuple(ProviderCheck(p, tuple(OutputCheck(n, m, failures_for(m, config.tolerance_for(n)))
                                          for n, m in ((n, a.result()) for n, a in accumulators[p].items())), None)
                   for p in providers)
    agreed = {p: tuple(OutputCheck(n, m, failures_for(m, config.provider_agreement))
                       for n, m in ((n, a.result()) for n, a in agreement[p].items())) for p in agreement}
    verification = Verification(data, reference.samples, checks, agreed, tuple(unavailable),
                                coverage.result(checks[0].outputs))
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
