"""Calibration: the streamed ORT runner, the statistics it collects, and their summaries (the calibration cache)."""

from onnxq.calibration.runner import collect_observers
from onnxq.calibration.summary import CalibrationSummary, model_fingerprint

__all__ = ["collect_observers", "CalibrationSummary", "model_fingerprint"]
