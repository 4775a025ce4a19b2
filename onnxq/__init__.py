"""onnxq: float ONNX models to verified int8 ONNX models for ONNX Runtime.

    result = onnxq.quantize("model.onnx", "calib.npz")
    result.save("model.int8.onnx")
    print(result.summary())

The names below are the public API; the submodules (onnxq.config, onnxq.verify, ...) stay importable by name."""

from onnxq.calibration import CalibrationSummary
from onnxq.calibration_api import calibrate, merge_calibrations
from onnxq.config import BlockConfig, CalibrationConfig, DataConfig, QScheme, QuantConfig, Tolerance, VerifyConfig
from onnxq.errors import OnnxqError
from onnxq.pipeline import QuantResult, quantize
from onnxq.report.record import QuantReport
from onnxq.verify.api import verify

__version__ = "0.1.0"

__all__ = [
    "quantize", "verify", "calibrate", "merge_calibrations", "QuantResult", "QuantReport", "QuantConfig",
    "QScheme", "BlockConfig", "CalibrationConfig", "DataConfig", "VerifyConfig", "Tolerance", "CalibrationSummary",
    "OnnxqError",
    "__version__",
]


def __dir__() -> list[str]:
    """dir(onnxq) lists the public API only, not the submodules its imports bound as attributes."""
    return sorted(__all__)
