"""Calibration: data sources, the streamed ORT runner, and summaries (the calibration cache)."""

from onnxq.calibration.batching import (Batches, Holdout, SampleCounter, exact_batches, first_samples,
                                        fixed_batch_size, samples_in)
from onnxq.calibration.data import iter_batches, validate_batch, validated_batches
from onnxq.calibration.specs import Batch, DataSource, InputSpec, input_specs
from onnxq.calibration.runner import collect_observers
from onnxq.calibration.summary import CalibrationSummary, model_fingerprint

__all__ = [
    "Batch", "Batches", "DataSource", "Holdout", "InputSpec", "SampleCounter", "input_specs", "iter_batches",
    "validate_batch", "validated_batches", "samples_in", "exact_batches", "first_samples", "fixed_batch_size", "collect_observers",
    "CalibrationSummary", "model_fingerprint",
]
