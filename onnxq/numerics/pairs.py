"""Int8 weights that cannot saturate AVX2's U8S8 kernel: a limit on each K pair's same-sign sum.

MLAS's U8S8 GEMM on x86 without VNNI multiplies uint8 activations a by int8 weights b with vpmaddubsw, which adds
the products of K indices 2i and 2i+1 in int16 with saturation. With a in [0, 255], the pair sum
a0·b0 + a1·b1 stays inside int16 for every a exactly when the positive parts of (b0, b1) add to at most 128 and
the negative parts to at least -128 (255 · 128 = 32640 ≤ 32767). Only pairs of two large same-sign weights break
that, so the limit changes few weights, and by the least it can: such a pair is moved to the nearest integer
point on the line |b0 + b1| = 128 (the projection of its real values, rounded).

A channel with many large pairs would lose more to the limit than to a coarser scale, so quantize_pair_limited
also widens each channel's scale (by 1 to 2×; 2× is reduce_range's 7-bit weights, which never hit the limit) and
keeps, per channel, the widening with the least squared weight error.
"""

from __future__ import annotations

import numpy as np

from onnxq.numerics.affine import broadcast_along
from onnxq.numerics.qparams import QParams

__all__ = ["PAIR_LIMIT", "limit_pair_sums", "pair_sum_violations", "quantize_pair_limited", "gemm_view",
           "from_gemm_view"]

PAIR_LIMIT = 128


def _pairs(q: np.ndarray, k_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Views of the even and odd K rows (an odd last row pairs with the kernel's zero padding: no pair)."""
    q = np.moveaxis(q, k_axis, 0)
    even = q[0:q.shape[0] - 1:2]
    return even, q[1::2]


def pair_sum_violations(q: np.ndarray, k_axis: int, limit: int = PAIR_LIMIT) -> np.ndarray:
    """Boolean [K // 2, ...]: the pairs whose same-sign sum exceeds the limit (those that can saturate)."""
    even, odd = _pairs(q, k_axis)
    if limit >= 127:
        # A mixed-sign pair, or one with a zero, sums to within [-128, 127]: beyond ±limit only a same-sign
        # pair can go, and its sum is then its same-sign sum. One int16 add instead of four.
        total = np.add(even, odd, dtype=np.int16)
        return (total > limit) | (total < -limit)
    even, odd = even.astype(np.int16), odd.astype(np.int16)  # |sums| ≤ 256: int16 holds them
    positive = np.maximum(even, 0) + np.maximum(odd, 0)
    negative = np.minimum(even, 0) + np.minimum(odd, 0)
    return (positive > limit) | (negative < -limit)


def limit_pair_sums(q: np.ndarray, real: np.ndarray, k_axis: int, limit: int = PAIR_LIMIT) -> np.ndarray:
    """q (int8) with every K pair's same-sign sum within ±limit. `real` is x / scale (the unrounded values).

    A violating pair has both values of one sign (a mixed pair is bounded by one value, ≤ 127): its real values
    (r0, r1) are projected onto |r0 + r1| = limit and rounded so that the integers add to exactly ±limit."""
    out = np.array(q, copy=True)
    _limit_in_place(out, real, k_axis, limit)
    return out


def _limit_in_place(q: np.ndarray, real: np.ndarray, k_axis: int, limit: int) -> None:
    bad = pair_sum_violations(q, k_axis, limit)
    if not bad.any():
        return
    q_even, q_odd = _pairs(q, k_axis)  # views into q
    r_even, r_odd = _pairs(real, k_axis)
    sign = np.sign(q_even[bad].astype(np.int32))
    a0 = np.clip(np.abs(r_even[bad].astype(np.float64)), 0, 127)
    a1 = np.clip(np.abs(r_odd[bad].astype(np.float64)), 0, 127)
    # Projection onto a0 + a1 = limit keeps a0 - a1: a0' = (a0 - a1 + limit) / 2; both stay in [1, 127].
    new0 = np.clip(np.rint((a0 - a1 + limit) / 2), limit - 127, 127)
    q_even[bad] = (sign * new0).astype(q.dtype)
    q_odd[bad] = (sign * (limit - new0)).astype(q.dtype)


# Scale widenings tried per channel: 1 (full range, pairs limited) to 2 (7 bits: the limit never binds).
_WIDENINGS = np.linspace(1.0, 2.0, 11)


# Weights quantized at once: each float32 temporary stays under 16 MB (VGG-19's fc6, 103 M weights, took 1.3 GB of
# temporaries whole, the run's peak).
_CHUNK_VALUES = 1 << 22


def quantize_pair_limited(x: np.ndarray, qparams: QParams, k_axis: int) -> tuple[np.ndarray, QParams]:
    """Symmetric int8 weights whose K pairs cannot saturate, with the per-channel scale widening (1-2×) of least
    squared weight error. Returns the int8 array and its qparams (scales widened, zero points unchanged). Per
    channel, a few channels at a time: each channel's choice is its own, so the result is the same."""
    if np.any(qparams.zero_point != 0):
        raise ValueError("pair-limited weights must be symmetric (zero point 0)")
    x = np.asarray(x, dtype=np.float32)
    axis = qparams.axis
    if axis is None or x.size <= _CHUNK_VALUES:
        return _pair_limited(x, qparams, k_axis)
    step = max(1, _CHUNK_VALUES * x.shape[axis] // x.size)
    q, scales = np.empty(x.shape, np.int8), np.empty(x.shape[axis], np.float32)
    for start in range(0, x.shape[axis], step):
        channels = slice(start, start + step)
        part = tuple(channels if i == axis else slice(None) for i in range(x.ndim))
        codes, chosen = _pair_limited(x[part], QParams(qparams.scale[channels], qparams.zero_point[channels], axis),
                                      k_axis)
        q[part], scales[channels] = codes, chosen.scale
    return q, QParams(scales, qparams.zero_point, axis)


def _pair_limited(x: np.ndarray, qparams: QParams, k_axis: int) -> tuple[np.ndarray, QParams]:
    axis = qparams.axis
    other_axes = tuple(i for i in range(x.ndim) if i != axis) if axis is not None else None
    best_q = best_scale = best_err = None
    q = np.empty(x.shape, np.int8)
    for widening in _WIDENINGS:
        scale = (qparams.scale.astype(np.float64) * widening).astype(np.float32)
        real = x / broadcast_along(scale, x.ndim, axis)  # as quantize() computes it (zero point 0)
        rounded = np.rint(real)
        np.clip(rounded, -128, 127, out=rounded)
        q[...] = rounded
        del rounded
        _limit_in_place(q, real, k_axis, PAIR_LIMIT)
        real -= q  # the rounding error in units of the scale; its square times scale² is the weight error
        err = np.square(real, out=real).sum(axis=other_axes) * np.square(scale.astype(np.float64))
        if best_err is None:
            best_q, best_scale, best_err = q.copy(), scale, err
            continue
        better = err < best_err
        np.copyto(best_q, q, where=broadcast_along(better, x.ndim, axis))
        best_scale = np.where(better, scale, best_scale)
        best_err = np.where(better, err, best_err)
    return best_q, QParams(np.asarray(best_scale, dtype=np.float32), qparams.zero_point, axis)


def gemm_view(weight: np.ndarray) -> np.ndarray:
    """A Conv weight [M, C/group, *kernel] as the [M, K] matrix MLAS's im2col GEMM reads: K over (kernel taps,
    input channels), input channels fastest — so K pairs are two channels of one tap, or, with an odd channel count,
    the last channel of a tap and the first of the next (measured on ORT's QLinearConv, tests/handlers/test_conv.py)."""
    return np.moveaxis(weight, 1, -1).reshape(weight.shape[0], -1)


def from_gemm_view(matrix: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """gemm_view's inverse: the [M, K] matrix back in the weight's own shape."""
    return np.ascontiguousarray(np.moveaxis(matrix.reshape(shape[0], *shape[2:], shape[1]), -1, 1))
