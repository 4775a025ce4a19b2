"""QuantizeLinear / DequantizeLinear exactly as the ONNX spec defines them (round half to even, saturate)."""

from __future__ import annotations

import numpy as np

from onnxq.numerics.qparams import QParams

__all__ = ["quantize", "dequantize", "broadcast_along"]

_DTYPE_LIMITS = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def broadcast_along(values: np.ndarray, ndim: int, axis: int | None) -> np.ndarray:
    """Per-axis values shaped to broadcast against an ndim-array along `axis` (per-tensor values as they are)."""
    if axis is None:
        return values
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)


def quantize(x: np.ndarray, qparams: QParams) -> np.ndarray:
    """y = saturate(round_half_even(x / scale) + zero_point), computed in float32 like ONNX Runtime.

    Rounding, the zero-point shift and saturation stay in float32, in place: a rounded float32 is an exact
    integer, adding a zero point up to 255 stays exact below 2**24, and anything larger saturates anyway.
    This keeps the temporaries to one float32 array (an embedding table is tens of MB).
    """
    x = np.asarray(x, dtype=np.float32)
    scale = broadcast_along(qparams.scale.astype(np.float32), x.ndim, qparams.axis)
    zero_point = broadcast_along(qparams.zero_point.astype(np.float32), x.ndim, qparams.axis)
    lo, hi = _DTYPE_LIMITS[qparams.dtype]
    y = np.divide(x, scale, dtype=np.float32)
    np.rint(y, out=y)
    y += zero_point
    np.clip(y, lo, hi, out=y)
    return y.astype(qparams.dtype)


def dequantize(q: np.ndarray, qparams: QParams) -> np.ndarray:
    """x = (q - zero_point) * scale, in float32."""
    q = np.asarray(q)
    scale = broadcast_along(qparams.scale.astype(np.float32), q.ndim, qparams.axis)
    zero_point = broadcast_along(qparams.zero_point.astype(np.float32), q.ndim, qparams.axis)
    return ((q.astype(np.float32) - zero_point) * scale).astype(np.float32)
