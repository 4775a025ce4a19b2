"""Block scales on an 8-bit grid per output channel (numerics.scale_grid): every scale decodes exactly from its
byte, the grid covers every live scale, and the blocks fitted on it lose nothing against float16's grid."""

from __future__ import annotations

import numpy as np
import pytest

import onnxq.numerics.blockwise as blockwise
from onnxq.numerics.blockwise import ScaleSearch, dequantize_blockwise, quantize_blockwise
from onnxq.numerics.gptq import gptq_blockwise
from onnxq.numerics.scale_grid import GRID_CODES, ScaleGrid, grid_of


def _on_grid(quantized) -> bool:
    grid = quantized.scale_grid
    return grid is not None and np.array_equal(grid.values(grid.codes(quantized.scales)), quantized.scales)


def test_the_grid_spans_each_row_s_live_scales_with_float16_ends(rng):
    scales = (rng.normal(0, 0.01, (40, 18)) * rng.uniform(0.1, 10, (40, 1))).astype(np.float32)
    live = rng.random((40, 18)) > 0.1
    live[5] = False  # a row of zero blocks: any scale
    grid = grid_of(scales, live)
    for part in (grid.low, grid.step):
        assert np.array_equal(part.astype(np.float16).astype(np.float32), part)  # float16 holds both
    top = grid.values(np.full((40, 1), GRID_CODES))
    inside = np.where(live, (scales >= grid.low) & (scales <= top), True)
    assert inside.all()
    rows = live.any(axis=1)
    span = np.where(live, scales, np.nan)[rows]
    # the step is the span over 255 within float16's rounding (2^-10) and float32's (a few ulps of the ends)
    width = np.nanmax(span, axis=1) - np.nanmin(span, axis=1)
    np.testing.assert_allclose(grid.step[rows, 0], width / GRID_CODES, rtol=2e-3)


def test_a_row_of_one_scale_and_scales_float16_cannot_step_through(rng):
    one = np.full((2, 4), 0.0123, np.float32)  # one block a row (K = the block size), or equal scales
    grid = grid_of(one, np.ones((2, 4), bool))
    assert np.abs(grid.values(grid.codes(one)) - one).max() <= 0.0123 * 2.0 ** -11  # float16's precision
    tiny = rng.uniform(1e-9, 2e-9, (3, 8)).astype(np.float32)  # its step would be a float16 subnormal
    assert grid_of(tiny, np.ones((3, 8), bool)) is None
    assert grid_of(np.full((1, 2), 7e4, np.float32), np.ones((1, 2), bool)) is None  # beyond float16


def test_a_grid_value_of_exactly_zero_is_never_a_scale():
    grid = ScaleGrid(np.array([[-1.0]], np.float32), np.array([[0.5]], np.float32))  # code 2 decodes to 0
    assert grid.near(np.array([[0.0]], np.float32), 0)[0, 0] == 0.5


@pytest.mark.parametrize("bits,symmetric", [(4, True), (4, False), (8, True)])
def test_round_to_nearest_on_the_grid_loses_nothing_against_float16_s_grid(rng, bits, symmetric):
    """The grid's steps (~1 % of a scale) are finer than the clip search's 2.5 %: each block's error is as low or
    lower. Measured with this seed (squared error, grid / float16): int4 0.987, uint4 0.994, 8-bit 0.930 (SmolLM2's
    weights: 4-bit 0.98–0.99, its 8-bit lm_head 0.51)."""
    w = (rng.standard_normal((512, 384)) * rng.uniform(0.2, 2.0, 384)).astype(np.float32)
    plain = quantize_blockwise(w, 32, symmetric, bits=bits)
    fitted = quantize_blockwise(w, 32, symmetric, bits=bits, scale_grid=True)
    assert _on_grid(fitted) and plain.scale_grid is None
    assert (fitted.zero_points is None) == symmetric
    error = [float(np.sum((dequantize_blockwise(q) - w) ** 2)) for q in (plain, fitted)]
    assert error[1] <= error[0]


@pytest.mark.parametrize("act_order", [True, False])
@pytest.mark.parametrize("symmetric", [True, False])
def test_gptq_on_the_grid_keeps_its_output_error(rng, act_order, symmetric):
    """GPTQ's scales on the grid (act_order: fitted before the codes; else moved to it after them): the output
    error (w - ŵ)ᵀH(w - ŵ) within 2 % of float16's grid (measured 0.994, 1.002, 1.001, 1.000)."""
    k, n = 256, 1024
    x = rng.standard_normal((1000, k)) @ (rng.normal(0, 0.3, (k, k)) + np.eye(k))
    h = x.T @ x / len(x)
    w = rng.normal(0, 0.05, (k, n)).astype(np.float32)
    results = [gptq_blockwise(w, h, 32, symmetric, ScaleSearch(grid=grid), act_order) for grid in (False, True)]
    assert _on_grid(results[1])
    errors = [np.trace((w - dequantize_blockwise(q)).T @ h @ (w - dequantize_blockwise(q))) for q in results]
    assert errors[1] <= 1.02 * errors[0]


def test_the_grid_of_slices_of_output_channels_is_the_whole_weight_s(rng, monkeypatch):
    w = rng.standard_normal((512, 384)).astype(np.float32)
    whole = quantize_blockwise(w, 32, True, scale_grid=True)
    monkeypatch.setattr(blockwise, "_ROW_SLICE_BYTES", 4 * 512 * 7)  # 7 rows a slice, the last of 6
    sliced = quantize_blockwise(w, 32, True, scale_grid=True)
    np.testing.assert_array_equal(sliced.codes, whole.codes)
    np.testing.assert_array_equal(sliced.scales, whole.scales)
    np.testing.assert_array_equal(sliced.scale_grid.step, whole.scale_grid.step)


def test_a_weight_too_small_to_gain_keeps_float16_s_grid(rng):
    """A grid costs 4 bytes a channel and six nodes a weight: a weight of 4 blocks a channel (K = 128) or of few
    channels keeps its scales on float16's grid."""
    for shape in ((128, 4096), (512, 256)):
        w = rng.standard_normal(shape).astype(np.float32)
        assert quantize_blockwise(w, 32, True, scale_grid=True).scale_grid is None
    assert quantize_blockwise(rng.standard_normal((512, 342)).astype(np.float32), 32, True,
                              scale_grid=True).scale_grid is not None  # 342 × 12 blocks saved ≥ 4096 bytes


def test_a_channel_of_zeros_takes_any_grid_value_and_stays_zero(rng):
    """A channel whose blocks are all 0 has no scale to span (its grid is low 1, step 0) and dequantizes to 0; the
    other channels keep their grids."""
    w = rng.standard_normal((512, 384)).astype(np.float32)
    w[:, 7] = 0.0
    w[:64, 9] = 0.0  # two zero blocks of a live channel: outside its span, any value of it
    for symmetric in (True, False):
        q = quantize_blockwise(w, 32, symmetric, scale_grid=True)
        assert _on_grid(q) and not np.any(q.scales == 0)
        restored = dequantize_blockwise(q)
        assert np.all(restored[:, 7] == 0) and np.all(restored[:64, 9] == 0)
