"""Calibration: data sources, the streamed ORT runner, and summaries (the calibration cache)."""

from onnxq.calibration.data import (Batch, DataSource, Holdout, InputSpec, SampleCounter, input_specs, iter_batches,
                                    samples_in, validate_batch, validated_batches)
from onnxq.calibration.runner import collect_observers
from onnxq.calibration.summary import CalibrationSummary, model_fingerprint

__all__ = [
    "Batch", "DataSource", "Holdout", "InputSpec", "SampleCounter", "input_specs", "iter_batches", "validate_batch",
    "validated_batches", "samples_in", "collect_observers", "CalibrationSummary", "model_fingerprint",
]
