"""Verification: float vs quantized on ONNX Runtime, every output, on each provider, with tolerances."""

from onnxq.verify.check import (OutputCheck, ProviderCheck, Reference, Verification, resolve_providers,
                                verify_models, with_placement)
from onnxq.verify.metrics import MetricsAccumulator, OutputMetrics
from onnxq.verify.placement import Placement, profile_placement, quantized_nodes
from onnxq.verify.sessions import make_session
from onnxq.verify.synthetic import synthetic_batches

__all__ = [
    "OutputCheck", "ProviderCheck", "Reference", "Verification", "resolve_providers", "verify_models", "with_placement",
    "MetricsAccumulator", "OutputMetrics", "Placement", "profile_placement", "quantized_nodes", "make_session",
    "synthetic_batches",
]
