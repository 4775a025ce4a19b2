"""GPTQ rounding on a fixed per-channel int8 grid (numerics.gptq.gptq_channelwise): the output error it minimizes
falls against rounding to nearest where the inputs are correlated, groups are independent, pair limits hold."""

from __future__ import annotations

import numpy as np
import pytest

from onnxq.numerics.gptq import gptq_channelwise
from onnxq.numerics.pairs import pair_sum_violations


def _correlated(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    return rng.standard_normal((rows, 6)) @ rng.standard_normal((6, k)) + 0.1 * rng.standard_normal((rows, k))


def _output_error(w: np.ndarray, codes: np.ndarray, scale: np.ndarray, h: np.ndarray) -> float:
    d = w - codes * scale[:, None]
    return float(np.einsum("nk,kl,nl->", d, h, d))


def _nearest(w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(w / scale[:, None]), -128, 127)


def test_the_output_error_falls_on_correlated_inputs_and_the_grid_stays():
    rng = np.random.default_rng(0)
    x = _correlated(rng, 4000, 64)
    h = x.T @ x / len(x)
    w = rng.standard_normal((32, 64))
    scale = np.abs(w).max(1) / 127
    codes = gptq_channelwise(w, h, scale)
    assert codes.dtype == np.int8
    # Measured 0.114 of nearest's error on this seed: the bar leaves room for BLAS differences, not for no gain.
    assert _output_error(w, codes, scale, h) < 0.25 * _output_error(w, _nearest(w, scale), scale, h)


def test_uncorrelated_inputs_of_equal_weight_keep_rounding_to_nearest():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 16))
    scale = np.abs(w).max(1) / 127
    # A diagonal H spreads nothing: every code is the nearest (the damping only scales the diagonal).
    assert np.array_equal(gptq_channelwise(w, np.eye(16) * 3.0, scale), _nearest(w, scale))


def test_groups_are_rounded_each_on_its_own_inputs():
    rng = np.random.default_rng(2)
    hs = [(lambda x: x.T @ x / len(x))(_correlated(rng, 500, 9)) for _ in range(4)]
    w = rng.standard_normal((8, 9))  # 4 groups of 2 output channels (a depthwise multiplier of 2)
    scale = np.abs(w).max(1) / 127
    together = gptq_channelwise(w, np.stack(hs), scale)
    apart = np.concatenate([gptq_channelwise(w[2 * g:2 * g + 2], hs[g], scale[2 * g:2 * g + 2]) for g in range(4)])
    assert np.array_equal(together, apart)


def test_pairs_stay_within_the_limit_where_nearest_would_pass_it():
    rng = np.random.default_rng(3)
    x = _correlated(rng, 2000, 32)
    w = np.abs(rng.standard_normal((16, 32))) + 1.0  # same-sign pairs near the top of the range
    scale = np.abs(w).max(1) / 127
    assert pair_sum_violations(_nearest(w, scale).astype(np.int8), 1).any()
    codes = gptq_channelwise(w, x.T @ x / len(x), scale, pair_limit=128)
    assert not pair_sum_violations(codes, 1).any()


@pytest.mark.parametrize("k", [5, 256, 700])
def test_the_upper_cholesky_factor_of_the_inverse_is_found_without_inverting(rng, k):
    """U upper triangular with UᵀU = H⁻¹, H the damped hessian (by one Cholesky factorization and a triangular
    inverse by halves: 700 splits unevenly down to blocks solved whole), to float64's precision; in an order, the
    factor of H's rows and columns in it; the hessian given is left as it was."""
    from onnxq.numerics.gptq import _regularized, _upper_cholesky_of_inverse

    x = rng.normal(0, 1, (3 * k, k)) * rng.gamma(0.5, 1, k)  # channels of very different sizes
    h = x.T @ x / len(x)
    given = h.copy()
    u = _upper_cholesky_of_inverse(h)
    assert np.array_equal(u, np.triu(u)) and np.all(np.diag(u) > 0) and u.flags.c_contiguous
    np.testing.assert_allclose(u.T @ u @ _regularized(h), np.eye(k), atol=1e-9)
    order = rng.permutation(k)
    u = _upper_cholesky_of_inverse(h, order)
    np.testing.assert_allclose(u.T @ u @ _regularized(h[np.ix_(order, order)]), np.eye(k), atol=1e-9)
    assert np.array_equal(h, given)


def test_inputs_of_subnormal_magnitude_are_never_active_and_round_to_nearest():
    # A random-init MobileNetV2's activations reached 1e-22: XᵀX of 1e-43 (float32 subnormals, a few bits each) was
    # indefinite however damped, and the run ended in LinAlgError. Such inputs have nothing to fit.
    rng = np.random.default_rng(3)
    x = _correlated(rng, 500, 9).astype(np.float32) * np.float32(1e-22)
    h = (x.T @ x / len(x)).astype(np.float32)
    assert 0 < np.diag(h).max() < np.finfo(np.float32).tiny
    w = rng.standard_normal((8, 9))
    scale = np.abs(w).max(1) / 127
    assert np.array_equal(gptq_channelwise(w, h, scale), _nearest(w, scale))


def test_an_indefinite_hessian_rounds_to_nearest_rather_than_fail():
    # XᵀX is positive semi-definite; float32 accumulation can leave it indefinite past the damping's reach.
    rng = np.random.default_rng(4)
    q, _ = np.linalg.qr(rng.standard_normal((9, 9)))
    h = q @ np.diag([5.0, 4, 3, 2, 1, 1, 1, 1, -40.0]) @ q.T
    w = rng.standard_normal((8, 9))
    scale = np.abs(w).max(1) / 127
    assert np.array_equal(gptq_channelwise(w, h, scale), _nearest(w, scale))


@pytest.mark.parametrize("k", [9, 40, 77])
def test_a_large_hessian_is_factored_by_halves_as_numpy_factors_it_whole(rng, k, monkeypatch):
    """numpy's Cholesky ends the process (SIGSEGV) from K ≈ 16000 on: past _FACTORED_WHOLE the factor is built from
    halves in place — here forced from 8 on, so 77 splits unevenly three levels deep — and equals numpy's to
    float64's precision, on a reversed view too; an indefinite H still raises LinAlgError for the damping retries."""
    from onnxq.numerics import gptq

    monkeypatch.setattr(gptq, "_FACTORED_WHOLE", 8)
    monkeypatch.setattr(gptq, "_PRODUCT_ROWS", 5)  # products in row slices, the last one short
    x = rng.normal(0, 1, (3 * k, k)) * rng.gamma(0.5, 1, k)
    h = x.T @ x / len(x) + 0.01 * np.eye(k)
    lower = h.copy()
    gptq._cholesky_in_place(lower)
    np.testing.assert_allclose(lower, np.linalg.cholesky(h), rtol=1e-9, atol=1e-12)
    reversed_view = h.copy()[::-1, ::-1]  # negative strides, as _upper_cholesky_of_inverse factors JHJ
    gptq._cholesky_in_place(reversed_view)
    np.testing.assert_allclose(reversed_view, np.linalg.cholesky(h[::-1, ::-1]), rtol=1e-9, atol=1e-12)
    indefinite = h.copy()
    indefinite[-1, -1] = -1.0
    with pytest.raises(np.linalg.LinAlgError):
        gptq._cholesky_in_place(indefinite)
