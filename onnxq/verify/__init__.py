"""Verification: float vs quantized on ONNX Runtime, every output, with tolerances."""

from onnxq.verify.check import OutputCheck, Verification, verify_models
from onnxq.verify.metrics import MetricsAccumulator, OutputMetrics
from onnxq.verify.sessions import make_session, optimized_op_counts
from onnxq.verify.synthetic import synthetic_batches

__all__ = [
    "OutputCheck", "Verification", "verify_models", "MetricsAccumulator", "OutputMetrics", "make_session",
    "optimized_op_counts", "synthetic_batches",
]
