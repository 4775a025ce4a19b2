"""Activation ranges for quantize(): from a calibration cache or calibration passes, on the float graph or, after
SmoothQuant, on the smoothed one. A cache always describes the float model (its fingerprint), with the smoothing
statistics when smoothing wrote or asked for it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx_ir as ir

from onnxq.calibration import CalibrationSummary, model_fingerprint
from onnxq.calibration.moment_sums import StoredMoments
from onnxq.data.stream import DataStream, check_reusable
from onnxq.calibration_api import activations_to_observe, smoothable_activations, summarize
from onnxq.config import QuantConfig
from onnxq.errors import ConfigError
from onnxq.handlers import NodePlan
from onnxq.passes.forms.quantize import needed_ranges
from onnxq.numerics import qrange

__all__ = ["calibrated_ranges", "smoothing_cache", "smoothed_ranges", "cached_moments", "load_cache", "Ranges"]

Ranges = dict[str, tuple[float, float]]


def calibrated_ranges(reference: ir.Model, work: ir.Model, plans: list[NodePlan], config: QuantConfig,
                      stream: DataStream, cache, progress) -> tuple[Ranges, CalibrationSummary, str | None]:
    """Ranges of the planned activations, from the cache or a calibration pass (which may write the cache); the
    summary they came from; and a note when they came from the cache."""
    summary = load_cache(cache, reference)
    if summary is not None:
        if stream.source is not None:  # the data only supplies the held-back samples
            for _ in stream.batches():
                pass
        note = f"ranges from calibration cache {cache} ({summary.samples} samples)"
        return _ranges(summary, plans, config), summary, note
    batches = stream.batches() if stream.source is not None else None
    summary = _calibrate(reference, work, plans, config, batches, cache is not None, progress)
    if cache is not None:
        summary.save(cache)
    return _ranges(summary, plans, config), summary, None


def _ranges(summary: CalibrationSummary, plans: list[NodePlan], config: QuantConfig) -> Ranges:
    """The ranges of every main-graph activation (missing: an error), and of each subgraph's the data computed
    (steps.calibrate plans the others again, dynamic)."""
    scheme = config.activations
    qmin, qmax = qrange(scheme.np_dtype, scheme.symmetric)
    observers = summary.observers
    names = needed_ranges([p for p in plans if not p.scope], config)
    names += [n for n in needed_ranges([p for p in plans if p.scope], config)
              if n in observers and not observers[n].empty]
    return summary.ranges(list(dict.fromkeys(names)), config.calibration.method, qmin=qmin, qmax=qmax,
                          symmetric=scheme.symmetric, percentile=config.calibration.percentile)


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
    summary = summarize(work, activations_to_observe(work, config, every_candidate=True), stream.batches(),
                        config.calibration.histogram_bins, None, model_fingerprint(reference),
                        smoothable_activations(work, config))
    summary.save(cache)
    return summary, None


def smoothed_ranges(work: ir.Model, plans: list[NodePlan], config: QuantConfig, stream: DataStream,
                    progress) -> tuple[Ranges, int]:
    """Static ranges on the smoothed graph, from the calibration data."""
    names = needed_ranges(plans, config)
    if stream.source is None:
        if names:
            raise ConfigError("static ranges after smoothing come from the smoothed graph and the calibration "
                              "cache holds the float model's: pass --calib DATA too, or use --activations per-token")
        return {}, 0
    bins = config.calibration.histogram_bins if config.calibration.needs_histogram else None
    summary = summarize(work, names, stream.batches(), bins, progress, "")
    return _ranges(summary, plans, config), summary.samples


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


def _calibrate(reference: ir.Model, model: ir.Model, plans: list[NodePlan], config: QuantConfig, batches,
               writes_cache: bool, progress: Callable[[int], None] | None) -> CalibrationSummary:
    """A summary written to a cache covers every candidate activation with histograms (and is tied to the model
    by its fingerprint), so that it serves any later method or setting; otherwise only what this run needs."""
    if writes_cache:
        return summarize(model, activations_to_observe(model, config, every_candidate=True), batches,
                         config.calibration.histogram_bins, progress, model_fingerprint(reference))
    bins = config.calibration.histogram_bins if config.calibration.needs_histogram else None
    return summarize(model, needed_ranges(plans, config), batches, bins, progress, "")
