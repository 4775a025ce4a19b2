"""Calibration by request: what to observe, stated once by planning as data (value × kind: range with or without a
histogram, per-channel statistics, second moments, largest magnitudes), and the one function that observes it over
the data and returns the statistics as a summary. calibration_api.calibration_request makes a run's request from its
plans, once; ranges are then a pure function of request, statistics and config (ranges.request_ranges)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import onnx_ir as ir

from onnxq.data.batching import SampleCounter
from onnxq.calibration.channels import ChannelStats
from onnxq.calibration.magnitudes import collect_magnitudes
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
    the activations their nodes read.
    in_bodies: those of `ranges` inside If / Loop / Scan bodies only, whose range exists where the data computed them
    (a branch never taken has none); every other range must come out.
    magnitudes: float values whose largest |x| float16 compute reads (calibration.magnitudes)."""

    ranges: tuple[str, ...]
    histogram_bins: int | None
    channels: Mapping[str, int] = dataclasses.field(default_factory=dict)
    moments: Mapping[WeightKey, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    full_moments: bool = True
    in_bodies: frozenset[str] = frozenset()
    magnitudes: tuple[str, ...] = ()

    @property
    def observed(self) -> list[str]:
        """The values whose extremes are observed: the ranges', then the channel statistics' (once each)."""
        return list(dict.fromkeys([*self.ranges, *self.channels]))


def observe(model: ir.Model, request: CalibrationRequest, batches: Callable[[], Iterable[Batch]],
            progress: Callable[[int], None] | None, fingerprint: str) -> CalibrationSummary:
    """The statistics the request names, over the batches (a fresh pass each call): one pass for the ranges and
    channel statistics, one for the magnitudes (each reduced in its own graph), then one per chunk of second moments
    (calibration.moments)."""
    counter = SampleCounter(batches())
    channels = {n: ChannelStats(axis=axis) for n, axis in request.channels.items()}
    observers, passed = {}, False
    if request.observed or not request.magnitudes:
        observers = collect_observers(model, request.observed, counter, request.histogram_bins, progress, channels)
        passed = True
    summary = CalibrationSummary(fingerprint, observers, 0, request.histogram_bins, channels)
    if request.magnitudes:
        summary.magnitudes = collect_magnitudes(model, request.magnitudes, batches() if passed else counter)
    summary.samples = counter.samples
    if request.moments:
        readers = {key: list(names) for key, names in request.moments.items()}
        summary.moments = WeightMoments(model, readers, batches, request.full_moments).stored()
    return summary
