"""Range methods: how an observed tensor's clipping range is chosen, one registry entry each. A new method is one
function here with @range_method — the config, the command line (--method), calibration summaries and the
pipeline all read this registry."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from onnxq.numerics.thresholds import entropy_range, mse_range, percentile_range

__all__ = ["RangeRequest", "RangeMethod", "RANGE_METHODS", "range_method"]


@dataclasses.dataclass(frozen=True)
class RangeRequest:
    """The quantizer the range is for: its integer range [qmin, qmax], symmetric or not; the percentile method's
    percentile."""

    qmin: int = 0
    qmax: int = 255
    symmetric: bool = False
    percentile: float = 99.999


@dataclasses.dataclass(frozen=True)
class RangeMethod:
    name: str
    needs_histogram: bool
    # (a TensorObserver, the request) → (low, high)
    pick: Callable[[Any, RangeRequest], tuple[float, float]]


RANGE_METHODS: dict[str, RangeMethod] = {}


def range_method(name: str, needs_histogram: bool = False):
    def register(pick: Callable[[Any, RangeRequest], tuple[float, float]]):
        if name in RANGE_METHODS:
            raise ValueError(f"range method {name!r} is already registered")
        RANGE_METHODS[name] = RangeMethod(name, needs_histogram, pick)
        return pick

    return register


@range_method("minmax")
def _minmax(observer, request: RangeRequest) -> tuple[float, float]:
    """The observed extremes."""
    return observer.min, observer.max


@range_method("avgminmax")
def _average_minmax(observer, request: RangeRequest) -> tuple[float, float]:
    """The mean of per-batch extremes (order-free, so shards merge exactly)."""
    return observer.batch_min_sum / observer.batches, observer.batch_max_sum / observer.batches


@range_method("percentile", needs_histogram=True)
def _percentile(observer, request: RangeRequest) -> tuple[float, float]:
    """Clip (100 − percentile) / 2 % of the values on each side."""
    return percentile_range(observer.histogram, request.percentile)


@range_method("entropy", needs_histogram=True)
def _entropy(observer, request: RangeRequest) -> tuple[float, float]:
    """The window whose quantization keeps the distribution closest in KL divergence (TensorRT's)."""
    return entropy_range(observer.histogram, request.qmax - request.qmin + 1)


@range_method("mse", needs_histogram=True)
def _mse(observer, request: RangeRequest) -> tuple[float, float]:
    """The window of least expected quantization error."""
    return mse_range(observer.histogram, request.qmin, request.qmax, request.symmetric)
