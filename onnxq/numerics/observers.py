"""Observers fold one batch at a time into a small, mergeable summary; memory never grows with the data.

One TensorObserver serves every calibration method: exact min/max (MinMax), the per-batch extremes summed
(average MinMax), and, when a histogram method may be asked for, a Histogram (percentile, entropy, MSE).
"""

from __future__ import annotations

import math

import numpy as np

from onnxq.numerics.histogram import Histogram
from onnxq.numerics.methods import RANGE_METHODS, RangeRequest

__all__ = ["METHODS", "HISTOGRAM_METHODS", "TensorObserver"]

METHODS = tuple(RANGE_METHODS)
HISTOGRAM_METHODS = tuple(name for name, m in RANGE_METHODS.items() if m.needs_histogram)


class TensorObserver:
    def __init__(self, histogram_bins: int | None = None) -> None:
        self.min = math.inf
        self.max = -math.inf
        self.count = 0
        self.batches = 0
        # Average MinMax: the arithmetic mean of per-batch extremes. Unlike an exponential moving average it
        # does not depend on batch order, so shards merge to exactly the single-run value.
        self.batch_min_sum = 0.0
        self.batch_max_sum = 0.0
        self.histogram = Histogram(histogram_bins) if histogram_bins else None

    @property
    def empty(self) -> bool:
        return self.count == 0

    def observe(self, batch: np.ndarray) -> None:
        if batch.size == 0:
            return
        lo, hi = self.add_to_histogram(batch)
        self.observe_extremes(lo, hi, int(batch.size))

    def add_to_histogram(self, values: np.ndarray) -> tuple[float, float]:
        """Count a part of a batch into the histogram (when there is one) and return its min and max: the batch's
        extremes go to observe_extremes once it is whole (a batch run in pieces: calibration.runner)."""
        lo, hi = float(np.min(values)), float(np.max(values))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError("observed values are not finite (NaN or inf)")
        if self.histogram is not None:
            self.histogram.add(values, lo, hi)
        return lo, hi

    def observe_extremes(self, lo: float, hi: float, size: int) -> None:
        """Fold in one batch known only by its min, max and size (no histogram update)."""
        if size == 0:
            return
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError("observed values are not finite (NaN or inf)")
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        self.count += size
        self.batches += 1
        self.batch_min_sum += lo
        self.batch_max_sum += hi

    def merge(self, other: TensorObserver) -> None:
        if (self.histogram is None) != (other.histogram is None):
            raise ValueError("cannot merge a summary with a histogram and one without")
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        self.count += other.count
        self.batches += other.batches
        self.batch_min_sum += other.batch_min_sum
        self.batch_max_sum += other.batch_max_sum
        if self.histogram is not None:
            self.histogram.merge(other.histogram)

    def range(self, method: str = "minmax", *, qmin: int = 0, qmax: int = 255, symmetric: bool = False,
              percentile: float = 99.999) -> tuple[float, float]:
        """The clipping range the method picks for a quantizer of [qmin, qmax] (symmetric or not)."""
        if self.empty:
            raise ValueError("nothing observed")
        chosen = RANGE_METHODS.get(method)
        if chosen is None:
            raise ValueError(f"unknown calibration method {method!r}; known: {', '.join(RANGE_METHODS)}")
        if chosen.needs_histogram and self.histogram is None:
            raise ValueError(f"method {method!r} needs a histogram, and this summary was collected without one")
        return chosen.pick(self, RangeRequest(qmin, qmax, symmetric, percentile))

    def state(self) -> dict:
        return {
            "min": float(self.min).hex(), "max": float(self.max).hex(), "count": self.count,
            "batches": self.batches, "batch_min_sum": float(self.batch_min_sum).hex(),
            "batch_max_sum": float(self.batch_max_sum).hex(),
            "histogram": None if self.histogram is None else self.histogram.state(),
        }

    @classmethod
    def from_state(cls, state: dict) -> TensorObserver:
        o = cls()
        o.min, o.max = float.fromhex(state["min"]), float.fromhex(state["max"])
        o.count, o.batches = int(state["count"]), int(state["batches"])
        o.batch_min_sum = float.fromhex(state["batch_min_sum"])
        o.batch_max_sum = float.fromhex(state["batch_max_sum"])
        o.histogram = None if state["histogram"] is None else Histogram.from_state(state["histogram"])
        return o
