import numpy as np
import pytest

from onnxq.numerics import choose_qparams, dequantize, quantize, qrange


@pytest.mark.parametrize("dtype,symmetric", [(np.int8, True), (np.int8, False), (np.uint8, True), (np.uint8, False)])
def test_zero_is_exactly_representable(dtype, symmetric, rng):
    for _ in range(50):
        lo, hi = sorted(rng.normal(0, 5, 2))
        qp = choose_qparams(lo, hi, dtype, symmetric)
        assert dequantize(quantize(np.zeros(3, np.float32), qp), qp).tolist() == [0.0, 0.0, 0.0]


def test_asymmetric_uint8_formula():
    qp = choose_qparams(-1.0, 3.0, np.uint8, symmetric=False)
    assert qp.scale == pytest.approx(4.0 / 255, rel=1e-7)
    assert int(qp.zero_point) == 64  # round(0 - (-1) / (4/255)) = round(63.75)
    assert qp.zero_point.dtype == np.uint8


def test_symmetric_int8_uses_narrow_range_and_zero_point_zero():
    qp = choose_qparams(-2.0, 1.0, np.int8, symmetric=True)
    assert qrange(np.int8, True) == (-127, 127)
    assert qp.scale == pytest.approx(2.0 / 127, rel=1e-7)
    assert int(qp.zero_point) == 0
    assert quantize(np.array([-2.0, 2.0], np.float32), qp).tolist() == [-127, 127]


def test_symmetric_uint8_zero_point_is_128():
    qp = choose_qparams(-1.0, 1.0, np.uint8, symmetric=True)
    assert int(qp.zero_point) == 128


def test_range_is_extended_to_include_zero():
    qp = choose_qparams(2.0, 4.0, np.uint8, symmetric=False)  # all positive: range becomes [0, 4]
    assert qp.scale == pytest.approx(4.0 / 255, rel=1e-7)
    assert int(qp.zero_point) == 0


@pytest.mark.parametrize("lo,hi", [(0.0, 0.0), (3.0, 3.0), (-1e-45, 1e-45), (0.0, 1e-40), (-7.5, -7.5)])
@pytest.mark.parametrize("dtype,symmetric", [(np.int8, True), (np.uint8, False)])
def test_degenerate_ranges_give_valid_finite_scale(lo, hi, dtype, symmetric):
    qp = choose_qparams(lo, hi, dtype, symmetric)
    assert np.isfinite(qp.scale) and qp.scale > 0
    x = np.array([lo, hi, 0.0], np.float32)
    y = dequantize(quantize(x, qp), qp)
    assert np.all(np.isfinite(y))
    # Values are either reproduced within one step or the range is below float32's normal range.
    assert np.max(np.abs(y - x)) <= max(float(qp.scale), 1e-30)


def test_per_axis_with_constant_and_zero_channels():
    rmin = np.array([0.0, 2.0, -1.0], np.float32)
    rmax = np.array([0.0, 2.0, 1.0], np.float32)
    qp = choose_qparams(rmin, rmax, np.int8, symmetric=True, axis=1)
    assert qp.scale.shape == (3,) and np.all(qp.scale > 0)
    assert qp.scale[0] == 1.0  # all-zero channel: any scale is exact; 1.0 avoids division by zero
    assert qp.scale[1] == pytest.approx(2.0 / 127, rel=1e-7)


def test_non_finite_range_is_rejected():
    with pytest.raises(ValueError, match="not finite"):
        choose_qparams(0.0, np.inf, np.uint8, symmetric=False)


def test_quantization_error_is_at_most_half_a_step(rng):
    x = rng.normal(0, 3, 10_000).astype(np.float32)
    qp = choose_qparams(x.min(), x.max(), np.uint8, symmetric=False)
    err = np.abs(dequantize(quantize(x, qp), qp) - x)
    assert err.max() <= 0.5 * float(qp.scale) * (1 + 1e-5)
