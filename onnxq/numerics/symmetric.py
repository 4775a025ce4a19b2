"""Symmetric matrices (XᵀX sums) kept as their packed upper triangle: row i's entries i … K−1, one row after another
(LAPACK's packed "U" storage, row-major), K(K+1)/2 values instead of K². Leading axes are kept: a grouped Conv's
[G, K, K] packs to [G, K(K+1)/2]. Each row is one slice copy (K of them: 3 ms at K = 1536, against 120 ms for the
product a calibration batch makes), and no index array is held (one of K = 8192 would be 134 MB).

Packing is exact for a matrix that is exactly symmetric — NumPy computes X.T @ X by BLAS's syrk and mirrors its
upper triangle — and sums, means and unpacking keep every value bit for bit."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["packed_upper", "add_upper", "unpacked", "packed_width"]


def _row_starts(k: int) -> np.ndarray:
    """Where each row's entries start in the packed axis; k + 1 values, the last the packed length."""
    return np.concatenate([[0], np.cumsum(np.arange(k, 0, -1))])


def packed_width(length: int) -> int:
    """K of a packed axis of K(K+1)/2 values."""
    k = (math.isqrt(8 * length + 1) - 1) // 2
    if k * (k + 1) // 2 != length:
        raise ValueError(f"{length} values are not a packed triangle")
    return k


def packed_upper(matrix: np.ndarray) -> np.ndarray:
    """matrix [..., K, K] → its upper triangle [..., K(K+1)/2] (a new array)."""
    k = matrix.shape[-1]
    packed = np.empty((*matrix.shape[:-2], k * (k + 1) // 2), matrix.dtype)
    starts = _row_starts(k)
    for i in range(k):
        packed[..., starts[i]:starts[i + 1]] = matrix[..., i, i:]
    return packed


def add_upper(packed: np.ndarray, matrix: np.ndarray) -> None:
    """packed += the upper triangle of matrix [..., K, K], in place."""
    k = matrix.shape[-1]
    starts = _row_starts(k)
    for i in range(k):
        packed[..., starts[i]:starts[i + 1]] += matrix[..., i, i:]


def unpacked(packed: np.ndarray) -> np.ndarray:
    """The full symmetric matrix [..., K, K] of a packed upper triangle [..., K(K+1)/2] (a new array)."""
    k = packed_width(packed.shape[-1])
    matrix = np.empty((*packed.shape[:-1], k, k), packed.dtype)
    starts = _row_starts(k)
    for i in range(k):
        row = packed[..., starts[i]:starts[i + 1]]
        matrix[..., i, i:] = row
        matrix[..., i:, i] = row
    return matrix
