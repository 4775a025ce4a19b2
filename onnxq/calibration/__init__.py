"""Calibration: data sources and the streamed ORT runner."""

from onnxq.calibration.data import Batch, DataSource, Holdout, InputSpec, input_specs, iter_batches, validate_batch
from onnxq.calibration.runner import calibrate_minmax

__all__ = [
    "Batch", "DataSource", "Holdout", "InputSpec", "input_specs", "iter_batches", "validate_batch",
    "calibrate_minmax",
]
