"""Choosing scale and zero point from a real range (ONNX affine quantization)."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["QParams", "choose_qparams", "qrange"]

# A scale below this (or zero) would make x / scale overflow or lose all precision; such a range holds
# nothing but (near-)zeros, which any scale represents exactly, so 1.0 is used instead.
_MIN_SCALE = float(np.finfo(np.float32).tiny)
# The integer types of per-tensor and per-axis Q/DQ (16-bit: activations for accelerators, opset 21).
_QUANTIZED = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))


@dataclasses.dataclass(frozen=True)
class QParams:
    """Scale and zero point, per tensor (axis None, 0-d arrays) or per axis (1-d arrays)."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    def __post_init__(self) -> None:
        if self.scale.shape != self.zero_point.shape:
            raise ValueError(f"scale {self.scale.shape} and zero point {self.zero_point.shape} differ in shape")
        if (self.axis is None) != (self.scale.ndim == 0):
            raise ValueError("per-tensor qparams are 0-d; per-axis qparams are 1-d with an axis")

    @property
    def dtype(self) -> np.dtype:
        return self.zero_point.dtype


def qrange(dtype: np.dtype | type, symmetric: bool) -> tuple[int, int]:
    """The integer range used. Symmetric signed types drop their lowest value ([-127, 127] for int8) so that +x and
    -x map to +q and -q."""
    dtype = np.dtype(dtype)
    if dtype not in _QUANTIZED:
        raise ValueError(f"unsupported quantized dtype {dtype}; use int8, uint8, int16 or uint16")
    info = np.iinfo(dtype)
    return (int(info.min) + 1, int(info.max)) if symmetric and info.min < 0 else (int(info.min), int(info.max))


def choose_qparams(
    rmin: np.ndarray | float,
    rmax: np.ndarray | float,
    dtype: np.dtype | type,
    symmetric: bool,
    axis: int | None = None,
) -> QParams:
    """Scale and zero point covering [rmin, rmax] extended to include 0, so that 0 is exact.

    rmin/rmax are scalars (per tensor) or 1-d arrays (per axis, then `axis` is required).
    """
    dtype = np.dtype(dtype)
    lo = np.minimum(np.asarray(rmin, dtype=np.float64), 0.0)
    hi = np.maximum(np.asarray(rmax, dtype=np.float64), 0.0)
    if lo.shape != hi.shape:
        raise ValueError(f"rmin {lo.shape} and rmax {hi.shape} differ in shape")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError("range is not finite (NaN or inf in the observed values)")
    if (axis is None) != (lo.ndim == 0):
        raise ValueError("pass scalars for per-tensor qparams, 1-d arrays with an axis for per-axis")
    qmin, qmax = qrange(dtype, symmetric)
    if symmetric:
        absmax = np.maximum(-lo, hi)
        scale = (absmax / ((qmax - qmin) / 2.0)).astype(np.float32)
        scale = np.where(scale < _MIN_SCALE, np.float32(1.0), scale).astype(np.float32)
        zero_point = np.full(scale.shape, round((qmin + qmax) / 2.0), dtype=dtype)
    else:
        scale = ((hi - lo) / float(qmax - qmin)).astype(np.float32)
        scale = np.where(scale < _MIN_SCALE, np.float32(1.0), scale).astype(np.float32)
        zp = np.rint(qmin - lo / scale.astype(np.float64))
        zero_point = np.clip(zp, qmin, qmax).astype(dtype)
    return QParams(scale=np.asarray(scale), zero_point=np.asarray(zero_point), axis=axis)
