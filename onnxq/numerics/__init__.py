"""Pure numpy quantization numerics: choose qparams, quantize, dequantize, observe ranges."""

from onnxq.numerics.affine import dequantize, quantize
from onnxq.numerics.observers import MinMaxObserver
from onnxq.numerics.qparams import QParams, choose_qparams, qrange

__all__ = ["QParams", "choose_qparams", "qrange", "quantize", "dequantize", "MinMaxObserver"]
