"""Pure numpy quantization numerics: choose qparams, quantize, dequantize, observe ranges."""

from onnxq.numerics.affine import dequantize, quantize
from onnxq.numerics.histogram import Histogram
from onnxq.numerics.observers import HISTOGRAM_METHODS, METHODS, TensorObserver
from onnxq.numerics.qparams import QParams, choose_qparams, qrange

__all__ = [
    "QParams", "choose_qparams", "qrange", "quantize", "dequantize", "Histogram", "TensorObserver", "METHODS",
    "HISTOGRAM_METHODS",
]
