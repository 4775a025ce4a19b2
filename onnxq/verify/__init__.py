"""Verification: float vs quantized on ONNX Runtime, every output, on each provider, with tolerances."""

from onnxq.verify.check import (OutputCheck, ProviderCheck, Reference, Verification, resolve_providers,
                                verify_models, with_placement)
from onnxq.verify.metrics import MetricsAccumulator, OutputMetrics
from onnxq.verify.kernels.placement import Placement, profile_placement, quantized_nodes

__all__ = [
    "OutputCheck", "ProviderCheck", "Reference", "Verification", "resolve_providers", "verify_models", "with_placement",
    "MetricsAccumulator", "OutputMetrics", "Placement", "profile_placement", "quantized_nodes",
]
