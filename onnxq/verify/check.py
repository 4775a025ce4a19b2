"""Run the float and quantized models on the same inputs and gate every output on tolerances."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterable
from pathlib import Path

from onnxq.calibration.data import Batch
from onnxq.config import Tolerance
from onnxq.verify.metrics import MetricsAccumulator, OutputMetrics
from onnxq.verify.sessions import ModelSource, make_session, op_counts

__all__ = ["OutputCheck", "Verification", "verify_models"]


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    name: str
    metrics: OutputMetrics
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclasses.dataclass(frozen=True)
class Verification:
    provider: str
    data: str  # where the inputs came from, in words
    outputs: tuple[OutputCheck, ...]
    kernels: dict[str, int] | None  # op types after ORT's optimizer (None when not checked)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    @property
    def samples(self) -> int:
        return max((o.metrics.samples for o in self.outputs), default=0)

    def to_dict(self) -> dict:
        return {
            "provider": self.provider,
            "data": self.data,
            "samples": self.samples,
            "passed": self.passed,
            "outputs": {o.name: {**o.metrics.to_dict(), "passed": o.passed, "failures": list(o.failures)}
                        for o in self.outputs},
            "kernels": self.kernels,
        }


def failures_for(metrics: OutputMetrics, tolerance: Tolerance) -> tuple[str, ...]:
    found = []
    if tolerance.min_cosine is not None and not metrics.cosine_mean >= tolerance.min_cosine:
        found.append(f"cosine {metrics.cosine_mean:.4f} < {tolerance.min_cosine}")
    if tolerance.min_sqnr_db is not None and not metrics.sqnr_db >= tolerance.min_sqnr_db:
        found.append(f"SQNR {metrics.sqnr_db:.1f} dB < {tolerance.min_sqnr_db} dB")
    if tolerance.max_abs_error is not None and not metrics.max_abs_error <= tolerance.max_abs_error:
        found.append(f"max abs error {metrics.max_abs_error:.4g} > {tolerance.max_abs_error}")
    return tuple(found)


def verify_models(float_model: ModelSource, quant_model: ModelSource, batches: Iterable[Batch],
                  tolerance: Tolerance, data: str, check_kernels: bool = True,
                  provider: str = "CPUExecutionProvider") -> Verification:
    """The float model without graph optimizations is the reference; the quantized model runs as deployed
    (all optimizations on, so ORT's fused integer kernels are what is measured, and, with check_kernels, what is
    counted: ORT writes the graph it optimized, which is read back)."""
    with tempfile.TemporaryDirectory(prefix="onnxq-verify-") as scratch:
        optimized = str(Path(scratch) / "optimized.onnx") if check_kernels else None
        reference = make_session(float_model, optimize=False, provider=provider)
        quantized = make_session(quant_model, optimize=True, provider=provider, optimized_model_path=optimized)
        kernels = op_counts(optimized) if check_kernels else None
    names = [o.name for o in reference.get_outputs()]
    accumulators = {n: MetricsAccumulator() for n in names}
    for batch in batches:
        expected = reference.run(names, batch)
        got = quantized.run(names, batch)
        for name, e, g in zip(names, expected, got):
            accumulators[name].add(e, g)
    outputs = tuple(OutputCheck(n, m, failures_for(m, tolerance))
                    for n, m in ((n, accumulators[n].result()) for n in names))
    return Verification(provider=provider, data=data, outputs=outputs, kernels=kernels)
