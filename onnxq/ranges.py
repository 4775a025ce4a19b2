"""Activation ranges for quantize(): from a calibration cache or calibration passes, on the float graph or, after
SmoothQuant, on the smoothed one. A cache always describes the float model (its fingerprint), with the smoothing
statistics when smoothing wrote or asked for it. What a run needs is its CalibrationRequest, made once from its
plans (calibration_api.calibration_request); its ranges are a pure function of that request, the statistics and
the config (request_ranges)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx_ir as ir

from onnxq.calibration import CalibrationSummary, model_fingerprint
from onnxq.calibration.moment_sums import StoredMoments
from onnxq.calibration.request import CalibrationRequest, observe
from onnxq.data.stream import DataStream, check_reusable
from onnxq.calibration_api import cache_request
from onnxq.config import QuantConfig
from onnxq.errors import ConfigError
from onnxq.numerics import qrange

__all__ = ["calibrated_ranges", "smoothing_cache", "smoothed_ranges", "cached_moments", "load_cache", "request_ranges",
           "Ranges"]

Ranges = dict[str, tuple[float, float]]


def calibrated_ranges(reference: ir.Model, work: ir.Model, request: CalibrationRequest, config: QuantConfig,
                      stream: DataStream, cache, progress) -> tuple[Ranges, CalibrationSummary, str | None]:
    """Ranges of the requested activations, from the cache or a calibration pass (which may write the cache); the
    summary they came from; and a note when they came from the cache."""
    summary = load_cache(cache, reference)
    if summary is not None:
        if stream.source is not None:  # the data only supplies the held-back samples
            for _ in stream.batches():
                pass
        note = f"ranges from calibration cache {cache} ({summary.samples} samples)"
        return request_ranges(summary, request, config), summary, note
    batches = stream.batches() if stream.source is not None else None
    summary = _calibrate(reference, work, request, config, batches, cache is not None, progress)
    if cache is not None:
        summary.save(cache)
    return request_ranges(summary, request, config), summary, None


def request_ranges(summary: CalibrationSummary, request: CalibrationRequest, config: QuantConfig) -> Ranges:
    """The ranges of every requested activation (a missing one: an error), but a body's where the data computed it
    (steps.calibrate plans the others again, dynamic)."""
    scheme = config.activations
    qmin, qmax = qrange(scheme.np_dtype, scheme.symmetric)
    observers = summary.observers
    names = [n for n in request.ranges
             if n not in request.in_bodies or (n in observers and not observers[n].empty)]
    return summary.ranges(names, config.calibration.method, qmin=qmin, qmax=qmax, symmetric=scheme.symmetric,
                          percentile=config.calibration.percentile)


def smoothing_cache(reference: ir.Model, work: ir.Model, config: QuantConfig, stream: DataStream,
                    cache) -> tuple[CalibrationSummary | None, str | None]:
    """The float model's calibration cache with smoothing statistics: read when it exists, else written now (every
    candidate activation and the smoothing statistics, one pass); None without a cache. And a note."""
    summary = load_cache(cache, reference)
    if summary is not None:
        return summary, f"smoothing statistics from calibration cache {cache} ({summary.samples} samples)"
    if cache is None:
        return None, None
    check_reusable(stream.source, "smoothing with a calibration cache to write")
    summary = observe(work, cache_request(work, config, channels=True, moments=False), stream.batches, None,
                      model_fingerprint(reference))
    summary.save(cache)
    return summary, None


def smoothed_ranges(work: ir.Model, request: CalibrationRequest, config: QuantConfig, stream: DataStream,
                    progress) -> tuple[Ranges, int]:
    """Static ranges on the smoothed graph, from the calibration data."""
    if stream.source is None:
        if request.ranges:
            raise ConfigError("static ranges after smoothing come from the smoothed graph and the calibration "
                              "cache holds the float model's: pass --calib DATA too, or use --activations per-token")
        return {}, 0
    summary = observe(work, request, stream.batches, progress, "")
    return request_ranges(summary, request, config), summary.samples


def cached_moments(cache, reference: ir.Model) -> StoredMoments | None:
    """The 4-bit weights' second moments of the calibration cache; None without a cache or moments in it."""
    summary = load_cache(cache, reference)
    return None if summary is None else summary.moments


def load_cache(cache, reference: ir.Model) -> CalibrationSummary | None:
    """The cached summary, checked against the model; None when there is none to read yet."""
    if cache is None or (not isinstance(cache, CalibrationSummary) and not Path(cache).is_file()):
        return None
    summary = cache if isinstance(cache, CalibrationSummary) else CalibrationSummary.load(cache)
    summary.check_model(model_fingerprint(reference), str(cache) if not isinstance(cache, CalibrationSummary)
                        else "(object)")
    return summary


def _calibrate(reference: ir.Model, model: ir.Model, request: CalibrationRequest, config: QuantConfig, batches,
               writes_cache: bool, progress: Callable[[int], None] | None) -> CalibrationSummary:
    """A summary written to a cache covers every candidate activation with histograms (and is tied to the model
    by its fingerprint), so that it serves any later method or setting; otherwise only what this run requested."""
    if writes_cache:
        return observe(model, cache_request(model, config, channels=False, moments=False), lambda: batches, progress,
                       model_fingerprint(reference))
    return observe(model, request, lambda: batches, progress, "")
