"""Float-vs-quantized error metrics, accumulated batch by batch."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from onnxq.errors import UnsupportedModelError

__all__ = ["OutputMetrics", "MetricsAccumulator", "finite_or_none"]


def finite_or_none(x: float) -> float | None:
    """JSON has no NaN or infinity: such a figure is written as null."""
    return float(x) if math.isfinite(x) else None


@dataclasses.dataclass(frozen=True)
class OutputMetrics:
    samples: int
    max_abs_error: float
    mean_abs_error: float
    cosine_mean: float  # mean over samples of the per-sample cosine similarity
    cosine_min: float
    sqnr_db: float  # 10·log10(Σ ref² / Σ (ref − quant)²); inf when identical
    # NaN / ±inf values in the quantized outputs and in the float reference: any makes the figures above meaningless.
    nonfinite: int = 0
    reference_nonfinite: int = 0

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready: inf (identical outputs' SQNR) and NaN as null."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in dataclasses.asdict(self).items()}

    @property
    def finite(self) -> bool:
        return not self.nonfinite and not self.reference_nonfinite and not any(
            math.isnan(v) for v in (self.max_abs_error, self.mean_abs_error, self.cosine_mean, self.sqnr_db))


class MetricsAccumulator:
    def __init__(self) -> None:
        self.samples = 0
        self.count = 0
        self.max_abs = 0.0
        self.sum_abs = 0.0
        self.signal = 0.0
        self.noise = 0.0
        self.cosine_sum = 0.0
        self.cosine_min = 1.0
        self.nonfinite = 0
        self.reference_nonfinite = 0

    def add(self, reference: np.ndarray, quantized: np.ndarray) -> None:
        with np.errstate(invalid="ignore", over="ignore"):  # NaN / inf are counted, and fail the check
            self._add(np.asarray(reference, dtype=np.float64), np.asarray(quantized, dtype=np.float64))

    def _add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if ref.shape != got.shape:
            raise UnsupportedModelError(f"an output has shape {ref.shape} in the float model but {got.shape} in the "
                                        "quantized one — pass the float model and its own quantized form")
        self.nonfinite += int(np.count_nonzero(~np.isfinite(got)))
        self.reference_nonfinite += int(np.count_nonzero(~np.isfinite(ref)))
        diff = np.abs(ref - got)
        if diff.size:
            largest = float(diff.max())
            self.max_abs = largest if math.isnan(largest) else max(self.max_abs, largest)
        self.sum_abs += float(diff.sum())
        self.count += diff.size
        self.signal += float(np.square(ref).sum())
        self.noise += float(np.square(diff).sum())
        # A scalar or 1-D output is one sample; otherwise the first axis holds samples.
        rows_ref = ref.reshape(ref.shape[0], -1) if ref.ndim > 1 else ref.reshape(1, -1)
        rows_got = got.reshape(rows_ref.shape)
        cos = _cosine_rows(rows_ref, rows_got)
        self.cosine_sum += float(cos.sum())
        self.cosine_min = min(self.cosine_min, float(cos.min())) if cos.size else self.cosine_min
        self.samples += len(cos)

    def result(self) -> OutputMetrics:
        sqnr = math.inf if self.noise == 0 else 10 * math.log10(max(self.signal, 1e-300) / self.noise)
        return OutputMetrics(
            samples=self.samples,
            max_abs_error=self.max_abs,
            mean_abs_error=self.sum_abs / max(self.count, 1),
            cosine_mean=self.cosine_sum / max(self.samples, 1),
            cosine_min=self.cosine_min,
            sqnr_db=sqnr,
            nonfinite=self.nonfinite,
            reference_nonfinite=self.reference_nonfinite,
        )


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    dot = (a * b).sum(axis=1)
    both_zero = (na == 0) & (nb == 0)
    # Two all-zero rows agree perfectly; one zero row against a non-zero one does not.
    return np.where(both_zero, 1.0, dot / np.maximum(na * nb, 1e-300))
