"""QuantizeLinear / DequantizeLinear exactly as the ONNX spec defines them (round half to even, saturate)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxq.numerics.qparams import QParams

__all__ = ["quantize", "dequantize", "broadcast_along"]

_DTYPE_LIMITS = {np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
                 for t in (np.int8, np.uint8, np.int16, np.uint16)}
# quantize's float32 temporary, at most (a piece of the first axis; at least one row).
_PIECE_BYTES = 8 << 20


def broadcast_along(values: np.ndarray, ndim: int, axis: int | None) -> np.ndarray:
    """Per-axis values shaped to broadcast against an ndim-array along `axis` (per-tensor values as they are)."""
    if axis is None:
        return values
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)


def quantize(x: np.ndarray, qparams: QParams, after_piece: Callable[[], None] | None = None) -> np.ndarray:
    """y = saturate(round_half_even(x / scale) + zero_point), computed in float32 like ONNX Runtime.

    Rounding, the zero-point shift and saturation stay in float32, in place: a rounded float32 is an exact
    integer, adding a zero point up to 255 stays exact below 2**24, and anything larger saturates anyway.
    A large x is taken _PIECE_BYTES of its first axis at a time, so that the float32 temporary is one piece, not
    the whole (an embedding table or an lm_head is 113 MB for SmolLM2); after_piece is called after each (the
    caller drops a memory-mapped source's pages there).
    """
    x = np.asarray(x, dtype=np.float32)
    scale = broadcast_along(qparams.scale.astype(np.float32), x.ndim, qparams.axis)
    zero_point = broadcast_along(qparams.zero_point.astype(np.float32), x.ndim, qparams.axis)
    if x.ndim == 0:
        return _quantized(x, scale, zero_point, qparams.dtype)
    out = np.empty(x.shape, qparams.dtype)
    step = max(1, _PIECE_BYTES // max(x[:1].nbytes, 1))
    for start in range(0, x.shape[0], step):
        rows = slice(start, start + step)
        out[rows] = _quantized(x[rows], _rows(scale, rows, x.shape[0]), _rows(zero_point, rows, x.shape[0]),
                               qparams.dtype)
        if after_piece is not None:
            after_piece()
    return out


def _rows(values: np.ndarray, rows: slice, count: int) -> np.ndarray:
    """The part of broadcastable per-axis values that goes with `rows` of the first axis (all of it along others)."""
    return values[rows] if values.ndim and values.shape[0] == count and count > 1 else values


def _quantized(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, dtype: np.dtype) -> np.ndarray:
    lo, hi = _DTYPE_LIMITS[np.dtype(dtype)]
    y = np.divide(x, scale, dtype=np.float32)
    np.rint(y, out=y)
    y += zero_point
    np.clip(y, lo, hi, out=y)
    return y.astype(dtype)


def dequantize(q: np.ndarray, qparams: QParams) -> np.ndarray:
    """x = (q - zero_point) * scale, in float32."""
    q = np.asarray(q)
    scale = broadcast_along(qparams.scale.astype(np.float32), q.ndim, qparams.axis)
    zero_point = broadcast_along(qparams.zero_point.astype(np.float32), q.ndim, qparams.axis)
    return ((q.astype(np.float32) - zero_point) * scale).astype(np.float32)
