"""Properties of the numerics over generated ranges and values (hypothesis, derandomized so CI is reproducible):
round trip within half a step inside the range, zero exact, saturation outside, scales positive and finite,
per-axis equal to per-tensor slice by slice — for the int8 affine scheme and the 4 / 8-bit blocks."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnxq.numerics.affine import dequantize, quantize
from onnxq.numerics.blockwise import dequantize_blockwise, quantize_blockwise
from onnxq.numerics.qparams import choose_qparams, qrange

EPS = float(np.finfo(np.float32).eps)
PROPERTY = settings(max_examples=200, derandomize=True, deadline=None)
LIMIT = float(np.float32(1e30))
finite = st.floats(min_value=-LIMIT, max_value=LIMIT, allow_nan=False, allow_infinity=False, width=32)
schemes = st.sampled_from([(np.int8, True), (np.int8, False), (np.uint8, False)])


def _covered(qp) -> tuple[np.ndarray, np.ndarray]:
    """The real interval the integer range maps onto."""
    lo, hi = _limits(qp.dtype)
    scale, zp = qp.scale.astype(np.float64), qp.zero_point.astype(np.float64)
    return (lo - zp) * scale, (hi - zp) * scale


def _limits(dtype) -> tuple[int, int]:
    return (-128, 127) if np.dtype(dtype) == np.int8 else (0, 255)


@PROPERTY
@given(finite, finite, schemes)
def test_scale_is_positive_and_finite_and_zero_is_exact(a, b, scheme):
    dtype, symmetric = scheme
    qp = choose_qparams(min(a, b), max(a, b), dtype, symmetric)
    assert np.isfinite(qp.scale) and qp.scale > 0
    qmin, qmax = qrange(dtype, symmetric)
    assert qmin <= int(qp.zero_point) <= qmax
    assert dequantize(quantize(np.zeros(3, np.float32), qp), qp).tolist() == [0.0, 0.0, 0.0]


@PROPERTY
@given(finite, finite, schemes, st.lists(st.floats(0, 1), min_size=1, max_size=32))
def test_round_trip_within_half_a_step_inside_the_range(a, b, scheme, fractions):
    dtype, symmetric = scheme
    qp = choose_qparams(min(a, b), max(a, b), dtype, symmetric)
    low, high = _covered(qp)
    x = (low + np.asarray(fractions) * (high - low)).astype(np.float32)
    x = np.clip(x, np.float32(low), np.float32(high))  # float32 rounding must not step outside
    error = np.abs(dequantize(quantize(x, qp), qp).astype(np.float64) - x)
    scale = float(qp.scale)
    # half a step, plus float32 rounding of x / scale and of the product (a few ulps of the magnitude)
    assert np.all(error <= scale / 2 + 4 * EPS * np.maximum(np.abs(x), scale * 255))


@PROPERTY
@given(finite, finite, schemes, st.floats(1.0001, 1e6))
def test_values_outside_the_range_saturate(a, b, scheme, factor):
    dtype, symmetric = scheme
    qp = choose_qparams(min(a, b), max(a, b), dtype, symmetric)
    low, high = _covered(qp)
    lo, hi = _limits(dtype)
    beyond = np.array([high * factor + float(qp.scale), low * factor - float(qp.scale)], np.float64)
    beyond = np.clip(beyond, -3e38, 3e38).astype(np.float32)
    q = quantize(beyond, qp)
    assert int(q[0]) == hi and int(q[1]) == lo


@PROPERTY
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 6)), elements=finite), schemes,
       st.integers(0, 1))
def test_per_axis_equals_per_tensor_on_each_slice(x, scheme, axis):
    dtype, symmetric = scheme
    other = tuple(i for i in range(x.ndim) if i != axis)
    qp = choose_qparams(x.min(axis=other), x.max(axis=other), dtype, symmetric, axis=axis)
    q = quantize(x, qp)
    for i in range(x.shape[axis]):
        piece = np.take(x, i, axis=axis)
        alone = choose_qparams(piece.min(), piece.max(), dtype, symmetric)
        assert alone.scale == qp.scale[i] and alone.zero_point == qp.zero_point[i]
        assert np.array_equal(np.take(q, i, axis=axis), quantize(piece, alone))


@PROPERTY
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 70), st.integers(1, 4)),
                  elements=st.floats(-1e6, 1e6, allow_nan=False, width=32)),
       st.booleans(), st.sampled_from([4, 8]))
def test_blocks_round_trip_within_half_a_step_zero_exact_scales_finite(w, symmetric, bits):
    """Inside each block's representable range [(0 - zp) s, (top - zp) s] within half a step, beyond it (the side
    opposite a symmetric block's extreme has one step fewer) the nearest end; zero exact; scales finite and not
    zero (a symmetric block's scale carries the sign of its extreme, m / -8, as in onnxruntime's MLAS)."""
    q = quantize_blockwise(w, 16, symmetric, clip_ratios=(1.0,), bits=bits)  # no clipping
    assert np.all(np.isfinite(q.scales)) and np.all(q.scales != 0)
    k = w.shape[0]
    scale = np.repeat(q.scales, 16, axis=1)[:, :k].T.astype(np.float64)  # [K, N]
    zp = (np.float64(1 << (bits - 1)) if q.zero_points is None
          else np.repeat(q.zero_points, 16, axis=1)[:, :k].T.astype(np.float64))
    ends = (0 - zp) * scale, ((1 << bits) - 1 - zp) * scale
    low, high = np.minimum(*ends), np.maximum(*ends)
    scale = np.abs(scale)
    got = dequantize_blockwise(q).astype(np.float64)
    slack = 4 * EPS * np.maximum(np.abs(w), scale * (1 << bits))
    inside = (w >= low) & (w <= high)
    assert np.all(np.abs(got - w)[inside] <= (scale / 2 + slack)[inside])
    assert np.all(np.abs(got - np.clip(w, low, high))[~inside] <= slack[~inside])
    zeros = quantize_blockwise(np.zeros_like(w), 16, symmetric, bits=bits)
    assert not dequantize_blockwise(zeros).any()
