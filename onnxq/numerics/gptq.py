"""GPTQ (Frantar et al., 2022) for block-wise 4-bit (or 8-bit) weights: columns of W (input channels k) quantized one at a time,
the error of each spread over the columns not yet quantized through the inverse Hessian of the layer's
least-squares loss, H = XᵀX / n over calibration rows. Each block's scale (and zero point) is chosen when the
quantization reaches the block, on the weights as updated so far, by the clip search of numerics.blockwise
weighted by diag(H). Pure numpy; float64 for the Cholesky factors.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from onnxq.numerics.blockwise import (BlockQuantized, ScaleSearch, block_scales, by_rows, grid_scales,
                                      symmetric_zero_point)
from onnxq.numerics.scale_grid import ScaleGrid, grid_of

__all__ = ["gptq_blockwise", "gptq_channelwise", "DAMPING"]

# Added to H's diagonal, as a fraction of its mean: keeps the inverse well conditioned (the paper's 1 %).
DAMPING = 0.01
_LAZY = 128  # columns updated together before the rest of W (the paper's lazy batch)
_SOLVED_WHOLE = 256  # a triangular block this small is inverted by one solve (LAPACK on the whole block)
# numpy's Cholesky (OpenBLAS 0.3.31, numpy 2.4) ends the process with SIGSEGV from K ≈ 16000 on under the default
# 8 MiB stack (15360 ran, 16000 did not; FCN-ResNet50's 3×3 Conv over 2048 channels, K = 18432, ended that way;
# Llama-70B's down projections have 28672): larger matrices are factored by halves, in place, each LAPACK call at
# most this size (12000 measured safe; smaller keeps numpy's copies of the block small).
_FACTORED_WHOLE = 2048
_PRODUCT_ROWS = 1024  # rows of a block product computed at a time: its temporaries stay small
_NEVER_ACTIVE = float(np.finfo(np.float32).tiny)


def gptq_blockwise(weight: np.ndarray, hessian: np.ndarray, block_size: int, symmetric: bool,
                   search: ScaleSearch = ScaleSearch(), act_order: bool = False, bits: int = 4) -> BlockQuantized:
    """weight: float [K, N] (MatMul's B); hessian: [K, K], XᵀX / n of the activation feeding it.

    act_order: columns taken in order of decreasing XᵀX diagonal (the paper's "act order"), the block scales then
    fixed beforehand on the original weights ("static groups"), so blocks stay contiguous along K. search: the
    blocks' clip ratios and whether their scales lie on a grid per output channel: act_order's static scales are
    fitted on it before any code is chosen; without act_order each scale moves to the grid value nearest it once
    the codes are chosen (a grid fixed beforehand did not span the updated blocks: +12 % output error on a test
    layer).
    Every output channel is fitted on its own (the errors spread along its row only), so they are taken a slice at a
    time (numerics.blockwise.by_rows): W in float64 whole was 226 MB for SmolLM2's lm_head."""
    importance, zero = _error_weights(np.diag(hessian))
    order = (np.argsort(-_regularized_diagonal(np.diag(hessian)), kind="stable") if act_order
             else np.arange(weight.shape[0]))
    h_inv = _upper_cholesky_of_inverse(hessian, order if act_order else None)
    fit = _Fit(h_inv, order, importance, zero, block_size, symmetric, search.for_weight(*weight.shape, block_size),
               act_order, bits)
    return by_rows(lambda rows: _gptq_rows(rows, fit), weight, 8 * weight.shape[0])


@dataclasses.dataclass(frozen=True)
class _Fit:
    """What every slice of output channels shares: H⁻¹'s factor in the columns' order, the error weights, the
    inputs always 0, the block format."""
    h_inv: np.ndarray
    order: np.ndarray
    importance: np.ndarray
    zero: np.ndarray
    block_size: int
    symmetric: bool
    search: ScaleSearch
    act_order: bool
    bits: int


def _gptq_rows(weight: np.ndarray, fit: _Fit) -> BlockQuantized:
    """GPTQ on the output channels of weight [K, n] (a slice of W's)."""
    k, n = weight.shape
    block_size, h_inv, order = fit.block_size, fit.h_inv, fit.order
    n_blocks = -(-k // block_size)
    w = np.array(weight.T, dtype=np.float64)
    w[:, fit.zero] = 0.0  # nothing to fit
    scales = np.ones((n, n_blocks), np.float32)
    zero_points = None if fit.symmetric else np.zeros((n, n_blocks), np.uint8)
    grid = None
    if fit.act_order:
        scales, zero_points, grid = _static_groups(w, fit)
        w = w[:, order]
    middle, top = symmetric_zero_point(fit.bits), (1 << fit.bits) - 1
    codes = np.zeros((n, n_blocks * block_size), np.uint8)
    lazy = max(_LAZY, block_size)  # a multiple of block_size: no block straddles two lazy batches
    for start in range(0, k, lazy):
        end = min(start + lazy, k)
        w1 = w[:, start:end].copy()
        errors = np.zeros_like(w1)
        h1 = h_inv[start:end, start:end]
        for i in range(end - start):
            column = order[start + i]
            block = column // block_size
            if not fit.act_order and column % block_size == 0:  # this block's parameters, from the weights so far
                s, z = _block_parameters(w1[:, i:i + block_size], column, fit)
                scales[:, block] = s
                if zero_points is not None:
                    zero_points[:, block] = z
            scale = scales[:, block].astype(np.float64)
            zero_point = middle if zero_points is None else zero_points[:, block].astype(np.float64)
            code = np.clip(np.rint(w1[:, i] / scale) + zero_point, 0, top)
            codes[:, column] = code
            error = (w1[:, i] - (code - zero_point) * scale) / h1[i, i]
            w1[:, i:] -= np.outer(error, h1[i, i:])
            errors[:, i] = error
        w[:, end:] -= errors @ h_inv[start:end, end:]
    pad = middle if zero_points is None else zero_points[:, -1:]
    codes[:, k:] = pad  # padding past K dequantizes to 0
    if fit.search.grid and not fit.act_order:
        scales, grid = _snapped(scales, codes.reshape(n, n_blocks, block_size), middle if zero_points is None
                                else zero_points)
    return BlockQuantized(codes.reshape(n, n_blocks, block_size), scales, zero_points, k, block_size, fit.bits, grid)


def _snapped(scales: np.ndarray, codes: np.ndarray, zero_points) -> tuple[np.ndarray, ScaleGrid | None]:
    """Scales chosen as GPTQ went, moved to the nearest value of a grid spanning them (the codes kept): the grid
    of the blocks whose codes are not all the zero point's."""
    zero = np.asarray(zero_points, np.uint8)
    live = (codes != (zero[..., None] if zero.ndim else zero)).any(axis=-1)
    grid = grid_of(scales, live)
    return (scales, None) if grid is None else (grid.near(scales, 0), grid)


def _block_parameters(columns: np.ndarray, column: int, fit: _Fit) -> tuple[np.ndarray, np.ndarray | None]:
    """The scale (and zero point) per row of the block starting at `column`, from its columns as updated so far
    (the lazy batch's columns from there on: a block never straddles two batches)."""
    k = len(fit.importance)
    stop = min(column + fit.block_size, k)
    group = np.zeros((columns.shape[0], 1, fit.block_size), np.float32)
    group[:, 0, :stop - column] = columns[:, :stop - column]
    weights = np.zeros((1, 1, fit.block_size), np.float32)
    weights[0, 0, :stop - column] = fit.importance[column:stop]
    s, z = block_scales(group, fit.symmetric, weights, fit.search.ratios, fit.bits)
    return s[:, 0], None if z is None else z[:, 0]


def _static_groups(w: np.ndarray, fit: _Fit) -> tuple[np.ndarray, np.ndarray | None, ScaleGrid | None]:
    """act_order's block scales, fixed beforehand on the original weights w [n, K], and their grid (search.grid)."""
    n, k = w.shape
    n_blocks = -(-k // fit.block_size)
    blocks = np.zeros((n, n_blocks * fit.block_size), np.float32)
    blocks[:, :k] = w
    channel_weight = np.zeros(n_blocks * fit.block_size, np.float32)
    channel_weight[:k] = fit.importance
    return grid_scales(blocks.reshape(n, n_blocks, fit.block_size), fit.symmetric,
                       channel_weight.reshape(1, n_blocks, fit.block_size), fit.search, fit.bits)


def _error_weights(diagonal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each input's weight in the blocks' clip search, the inputs always 0 beside others that are not — their
    weights are zeroed: the blocks fit the rest). Where no input's mean square is a float32 normal, the squares
    underflowed (a random-init MobileNetV2's classifier read activations of 1e-24: its XᵀX all 0) and nothing is
    known: equal weights, nothing zeroed — every weight was zeroed."""
    if not np.max(diagonal, initial=0.0) > _NEVER_ACTIVE:
        return np.ones(len(diagonal), np.float32), np.zeros(len(diagonal), bool)
    return diagonal.astype(np.float32), ~(diagonal > 0)


def _regularized(hessian: np.ndarray, extra: float = 0.0) -> np.ndarray:
    """H in float64, inputs never active (nothing spreads to or from them: their weights round to nearest) with a
    unit diagonal, damped by DAMPING of its mean diagonal (then by `extra` of the damped one's). Never active: a mean
    square under float32's smallest normal (values under 1e-19, stored as subnormals with a few bits of precision,
    or 0) — a random-init MobileNetV2's 1e-43 diagonal was indefinite however damped."""
    h = np.array(hessian, dtype=np.float64)
    dead = ~(np.diag(h) > _NEVER_ACTIVE)  # NaN too
    h[dead, :], h[:, dead] = 0.0, 0.0
    h[dead, dead] = 1.0
    h[np.diag_indices(h.shape[0])] += DAMPING * np.mean(np.diag(h))
    if extra:
        h[np.diag_indices(h.shape[0])] += extra * np.mean(np.diag(h))
    return h


def _regularized_diagonal(diagonal: np.ndarray) -> np.ndarray:
    """The diagonal of _regularized(H) from H's: the order act_order takes, without a K×K copy."""
    d = np.array(diagonal, dtype=np.float64)
    d[~(d > _NEVER_ACTIVE)] = 1.0
    return d + DAMPING * np.mean(d)


def _upper_cholesky_of_inverse(hessian: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """U upper triangular with H⁻¹ = UᵀU, H the damped hessian (_regularized), its rows and columns in `order`: row i
    of U holds what column i's error does to the columns after it. Without forming H⁻¹: with J the reversal of the
    order, JHJ = LLᵀ gives H⁻¹ = (J L⁻ᵀ J)(J L⁻¹ J), so U = J L⁻¹ J — one Cholesky factorization and one triangular
    inverse, ~K³ flops where inverting H and factoring the inverse took ~5 K³ (K = 4608: 8.1 s → 2.2 s a matrix).
    Both run in place in H's damped copy, through its reversed view, which then holds U itself: beside it only
    blocks of a quarter of its size (K = 6912: 1.48 GB over the call with a copy per step, numpy's and ours).
    Where float rounding left the damped H indefinite, damped more (10x, 100x); failing that, U = I: each column
    rounds to nearest, its error spread nowhere."""
    for extra in (0.0, 10 * DAMPING, 100 * DAMPING):
        work = _regularized(hessian if order is None else hessian[np.ix_(order, order)], extra)
        try:
            _cholesky_in_place(work[::-1, ::-1])
        except np.linalg.LinAlgError:
            continue
        _invert_lower_in_place(work[::-1, ::-1])
        return work
    return np.eye(hessian.shape[0])


def _row_slices(rows: int):
    return (slice(start, start + _PRODUCT_ROWS) for start in range(0, rows, _PRODUCT_ROWS))


def _cholesky_in_place(a: np.ndarray) -> None:
    """a (symmetric positive definite) overwritten by L, lower triangular with LLᵀ = a, by halves above
    _FACTORED_WHOLE: [[A, Bᵀ], [B, C]] gives L₁₁ = chol(A), L₂₁ = B L₁₁⁻ᵀ, L₂₂ = chol(C − L₂₁L₂₁ᵀ). LinAlgError
    where a (or a Schur complement, in float) is not positive definite, as numpy's."""
    k = a.shape[0]
    if k <= _FACTORED_WHOLE:
        a[...] = np.linalg.cholesky(a)
        return
    half = k // 2
    top, below, corner = a[:half, :half], a[half:, :half], a[half:, half:]
    _cholesky_in_place(top)
    top_inverse = np.tril(top)
    _invert_lower_in_place(top_inverse)
    for rows in _row_slices(k - half):
        below[rows] = below[rows] @ top_inverse.T
    del top_inverse
    factor = np.ascontiguousarray(below)
    for rows in _row_slices(k - half):
        corner[rows] -= factor[rows] @ factor.T
    del factor
    _cholesky_in_place(corner)
    a[:half, half:] = 0.0


def _invert_lower_in_place(a: np.ndarray) -> None:
    """a (lower triangular) overwritten by its inverse, by halves: [[A, 0], [C, D]]⁻¹ = [[A⁻¹, 0], [−D⁻¹CA⁻¹, D⁻¹]],
    the off-diagonal block two matrix products (numpy has no triangular solve)."""
    k = a.shape[0]
    if k <= _SOLVED_WHOLE:
        a[...] = np.tril(np.linalg.solve(np.tril(a), np.eye(k)))
        return
    half = k // 2
    _invert_lower_in_place(a[:half, :half])
    _invert_lower_in_place(a[half:, half:])
    product = a[half:, :half] @ a[:half, :half]
    corner = a[half:, half:]
    for rows in _row_slices(k - half):
        a[half:, :half][rows] = -(corner[rows] @ product)


def gptq_channelwise(weight: np.ndarray, hessian: np.ndarray, scale: np.ndarray,
                     pair_limit: int | None = None) -> np.ndarray:
    """GPTQ's rounding on a fixed per-channel int8 grid: the scales stay those of rounding to nearest (the same
    kernels, the same ranges), only the way each weight rounds changes — K columns in order, each one's rounding
    error spread over those not yet rounded through H⁻¹. Learned rounding on calibration data in closed form.

    weight: float [N, K], a row per output channel, K as the kernel reads it (numerics.pairs.gemm_view for Conv).
    hessian: [K, K], or [G, K, K] for a grouped Conv (group g: rows g·N/G … , its own inputs' XᵀX / n).
    scale: [N], symmetric (zero point 0). pair_limit: each K pair (2i, 2i+1) kept within it (numerics.pairs) — the
    second rounded within what the first, already rounded, leaves; its error spread like any other.
    Returns int8 [N, K]."""
    n, k = weight.shape
    h = np.asarray(hessian).reshape(-1, k, k)  # each group made float64 by _regularized, one at a time
    groups = h.shape[0]
    w = np.array(weight, np.float64).reshape(groups, n // groups, k)
    s = np.asarray(scale, np.float64).reshape(groups, n // groups)
    factors = [_upper_cholesky_of_inverse(h_g) for h_g in h]
    u = factors[0][None] if groups == 1 else np.stack(factors)
    codes = np.zeros(w.shape, np.float64)
    for start in range(0, k, _LAZY):
        end = min(start + _LAZY, k)
        w1, u1 = w[:, :, start:end].copy(), u[:, start:end, start:end]
        errors = np.zeros_like(w1)
        for i in range(end - start):
            code = np.clip(np.rint(w1[:, :, i] / s), -128, 127)
            if pair_limit is not None and (start + i) % 2:
                code = _within_pair_limit(codes[:, :, start + i - 1], code, pair_limit)
            codes[:, :, start + i] = code
            errors[:, :, i] = (w1[:, :, i] - code * s) / u1[:, i, i][:, None]
            w1[:, :, i:] -= errors[:, :, i, None] * u1[:, None, i, i:]
        w[:, :, end:] -= errors @ u[:, start:end, end:]
    return codes.reshape(n, k).astype(np.int8)


def _within_pair_limit(first: np.ndarray, second: np.ndarray, limit: int) -> np.ndarray:
    """The second code of each pair, moved toward 0 where the pair's same-sign sum would pass the limit."""
    over = (np.sign(first) == np.sign(second)) & (np.abs(first + second) > limit)
    return np.where(over, np.sign(second) * (limit - np.abs(first)), second)
