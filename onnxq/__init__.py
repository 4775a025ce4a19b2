"""onnxq: float ONNX models to verified int8 ONNX models for ONNX Runtime."""

from onnxq.calibration import CalibrationSummary
from onnxq.calibration_api import calibrate, merge_calibrations
from onnxq.config import BlockConfig, CalibrationConfig, QScheme, QuantConfig, Tolerance, VerifyConfig
from onnxq.errors import OnnxqError
from onnxq.pipeline import QuantResult, quantize
from onnxq.report import QuantReport
from onnxq.verify.api import verify

__version__ = "0.1.0"

__all__ = [
    "quantize", "verify", "calibrate", "merge_calibrations", "CalibrationSummary", "QuantConfig", "QScheme", "BlockConfig", "CalibrationConfig", "VerifyConfig", "Tolerance", "QuantResult",
    "QuantReport", "OnnxqError", "__version__",
]
