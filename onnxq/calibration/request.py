"""Calibration by request: what to observe, stated once by planning as data (value × kind: range with or without a
histogram, per-channel statistics, second moments), and the one function that observes it over the data and
returns the statistics as a summary. Ranges are then a pure function of plans, statistics and config."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import onnx_ir as ir

from onnxq.data.batching import SampleCounter
from onnxq.calibration.channels import ChannelStats
from onnxq.calibration.moments import WeightKey, WeightMoments
from onnxq.calibration.runner import collect_observers
from onnxq.data.specs import Batch
from onnxq.calibration.summary import CalibrationSummary

__all__ = ["CalibrationRequest", "observe"]


@dataclasses.dataclass(frozen=True)
class CalibrationRequest:
    """ranges: values whose extremes are observed, with histograms of histogram_bins (None: extremes only).
    channels: values whose per-channel statistics SmoothQuant reads, by their channel axis.
    moments: weights (name, read transposed) whose activations' XᵀX (full_moments) or its diagonal is summed, by
    the activations their nodes read."""

    ranges: tuple[str, ...]
    histogram_bins: int | None
    channels: Mapping[str, int] = dataclasses.field(default_factory=dict)
    moments: Mapping[WeightKey, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    full_moments: bool = True

    @property
    def observed(self) -> list[str]:
        """The values whose extremes are observed: the ranges', then the channel statistics' (once each)."""
        return list(dict.fromkeys([*self.ranges, *self.channels]))


def observe(model: ir.Model, request: CalibrationRequest, batches: Callable[[], Iterable[Batch]],
            progress: Callable[[int], None] | None, fingerprint: str) -> CalibrationSummary:
    """The statistics the request names, over the batches (a fresh pass each call): one pass for the ranges and
    channel statistics, then one per chunk of second moments (calibration.moments)."""
    counter = SampleCounter(batches())
    channels = {n: ChannelStats(axis=axis) for n, axis in request.channels.items()}
    observers = collect_observers(model, request.observed, counter, request.histogram_bins, progress, channels)
    summary = CalibrationSummary(fingerprint, observers, counter.samples, request.histogram_bins, channels)
    if request.moments:
        readers = {key: list(names) for key, names in request.moments.items()}
        summary.moments = WeightMoments(model, readers, batches, request.full_moments).stored()
    return summary
