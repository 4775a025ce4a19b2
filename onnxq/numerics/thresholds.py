"""Clipping ranges from a Histogram: percentile, entropy (KL divergence, TensorRT's method) and MSE.

Each search is vectorised over all candidate ranges with prefix sums; no Python loop over bins or candidates
beyond fixed-size chunks. Candidates follow onnxruntime's parameterisation: a threshold T on |x| gives the window
[max(min, -T), min(max, T)], so a one-sided tensor (a GELU output) is clipped on its long side only.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from onnxq.numerics.histogram import Histogram

__all__ = ["percentile_range", "entropy_range", "mse_range", "candidate_windows"]

# Candidates evaluated at once in the entropy search: bounds the [candidates, levels] temporaries.
_CHUNK = 256
# Smoothing mass per non-empty bin (in counts) so that KL stays finite where q is zero (TensorRT smooths too).
_EPSILON = 1e-4


def _quantile(h: Histogram, cdf: np.ndarray, target: float) -> float:
    """The value below which `target` counts lie, interpolating linearly inside the bin."""
    i = int(np.searchsorted(cdf, target, side="left"))
    i = min(i, len(h.counts) - 1)
    before = cdf[i - 1] if i > 0 else 0.0
    inside = h.counts[i]
    fraction = 0.0 if inside == 0 else (target - before) / inside
    return (h.offset + i + fraction) * h.width


def percentile_range(h: Histogram, percentile: float) -> tuple[float, float]:
    """Two-sided: (100 - percentile) / 2 percent of the values are clipped on each side."""
    if not 0.0 < percentile <= 100.0:
        raise ValueError("percentile must be in (0, 100]")
    if h.exponent is None:
        return 0.0, 0.0
    cdf = np.cumsum(h.counts, dtype=np.float64)
    cut = (100.0 - percentile) / 200.0 * cdf[-1]
    lo = _quantile(h, cdf, cut)
    hi = _quantile(h, cdf, cdf[-1] - cut)
    return max(h.min, min(lo, h.max)), min(h.max, max(hi, h.min))


def candidate_windows(h: Histogram) -> tuple[np.ndarray, np.ndarray]:
    """Windows [max(min, -T), min(max, T)] for T on every bin edge of |x| up to max(|min|, |max|).

    Thresholds below the smallest |x| give empty windows and are skipped, so there are at most about
    max_bins candidates (the observed range spans at most max_bins bins)."""
    magnitude = max(abs(h.min), abs(h.max))
    inner = 0.0 if h.min <= 0.0 <= h.max else min(abs(h.min), abs(h.max))
    first = max(1, math.floor(inner / h.width))
    last = max(first, math.ceil(magnitude / h.width))
    thresholds = np.arange(first, last + 1, dtype=np.float64) * h.width
    lo = np.maximum(h.min, -thresholds)
    hi = np.minimum(h.max, thresholds)
    keep = lo <= hi
    windows = np.unique(np.stack([lo[keep], hi[keep]], axis=1), axis=0)
    if len(windows) == 0:
        return np.array([h.min]), np.array([h.max])
    return windows[:, 0], windows[:, 1]


def _grid(lo: np.ndarray, hi: np.ndarray, qmin: int, qmax: int, symmetric: bool) -> tuple[np.ndarray, ...]:
    """The representable range and step of the quantizer chosen for each window (0 always included)."""
    if symmetric:
        bound = np.maximum(-np.minimum(lo, 0.0), np.maximum(hi, 0.0))
        g_lo, g_hi = -bound, bound
    else:
        g_lo, g_hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    return g_lo, g_hi, (g_hi - g_lo) / (qmax - qmin)


def mse_range(h: Histogram, qmin: int, qmax: int, symmetric: bool) -> tuple[float, float]:
    """The window minimising the expected squared quantization error over the histogram.

    Error = clipping error of the tails (bin centres to the range limits) + step² / 12 per value inside.
    """
    if h.exponent is None:
        return 0.0, 0.0
    counts = h.counts.astype(np.float64)
    centres = (h.offset + np.arange(len(counts)) + 0.5) * h.width
    p0 = np.concatenate([[0.0], np.cumsum(counts)])
    p1 = np.concatenate([[0.0], np.cumsum(counts * centres)])
    p2 = np.concatenate([[0.0], np.cumsum(counts * centres**2)])
    lo, hi = candidate_windows(h)
    g_lo, g_hi, step = _grid(lo, hi, qmin, qmax, symmetric)
    left = np.searchsorted(centres, g_lo, side="left")  # bins clipped up to g_lo
    right = np.searchsorted(centres, g_hi, side="right")  # bins from here on clipped down to g_hi
    left_error = p2[left] - 2 * g_lo * p1[left] + g_lo**2 * p0[left]
    right_error = (p2[-1] - p2[right]) - 2 * g_hi * (p1[-1] - p1[right]) + g_hi**2 * (p0[-1] - p0[right])
    inside = p0[right] - p0[left]
    error = left_error + right_error + inside * step**2 / 12.0
    best = int(np.argmin(error))
    return float(lo[best]), float(hi[best])


def entropy_range(h: Histogram, levels: int) -> tuple[float, float]:
    """The window whose `levels`-level quantization keeps the distribution closest in KL divergence.

    TensorRT's construction: p is the histogram inside the window with the clipped tails folded into its edge
    bins; q merges the window's bins into `levels` groups and spreads each group's count evenly over its
    non-empty bins. Windows narrower than `levels` bins are not candidates.
    """
    if h.exponent is None:
        return 0.0, 0.0
    counts = h.counts.astype(np.float64)
    n_bins = len(counts)
    lo, hi = candidate_windows(h)
    a = np.floor(lo / h.width).astype(np.int64) - h.offset
    b = np.floor(hi / h.width).astype(np.int64) - h.offset + 1
    a, b = np.clip(a, 0, n_bins), np.clip(b, 0, n_bins)
    valid = (b - a) >= levels
    if not valid.any():
        return h.min, h.max
    lo, hi, a, b = lo[valid], hi[valid], a[valid], b[valid]
    total = counts.sum()
    p0 = np.concatenate([[0.0], np.cumsum(counts)])
    nonzero = np.concatenate([[0], np.cumsum(counts > 0)])
    with np.errstate(divide="ignore", invalid="ignore"):
        xlogx = np.where(counts > 0, counts * np.log(counts), 0.0)
    plogp = np.concatenate([[0.0], np.cumsum(xlogx)])
    sums = _PrefixSums(counts, p0, nonzero, plogp, total)
    divergence = np.concatenate([_kl_chunk(a[i:i + _CHUNK], b[i:i + _CHUNK], sums, levels)
                                 for i in range(0, len(a), _CHUNK)])
    best = int(np.argmin(divergence))
    return float(lo[best]), float(hi[best])


def _xlogx(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log(x), 0.0)


class _PrefixSums(NamedTuple):
    """The histogram and its prefix sums (index i: bins before i), shared by every chunk of windows."""

    counts: np.ndarray
    p0: np.ndarray  # counts
    nonzero: np.ndarray  # non-empty bins
    plogp: np.ndarray  # count · log count
    total: float


def _kl_chunk(a: np.ndarray, b: np.ndarray, sums: _PrefixSums, levels: int) -> np.ndarray:
    """KL divergence of each window [a, b) (bin indices) quantized to `levels` levels."""
    counts, p0, nonzero, plogp, total = sums
    width = b - a
    # Group j of a window covers bins [bounds[:, j], bounds[:, j + 1]).
    bounds = a[:, None] + (np.arange(levels + 1)[None, :] * width[:, None]) // levels
    left_out = p0[a]
    right_out = total - p0[b]
    sliced = p0[bounds[:, 1:]] - p0[bounds[:, :-1]]  # group sums of the window without the tails
    nnz = (nonzero[bounds[:, 1:]] - nonzero[bounds[:, :-1]]).astype(np.float64)
    first, last = counts[a], counts[b - 1]
    nnz[:, 0] += (first == 0) & (left_out > 0)
    nnz[:, -1] += (last == 0) & (right_out > 0)
    p_mass = sliced.copy()
    p_mass[:, 0] += left_out
    p_mass[:, -1] += right_out
    # Σ p log p: interior bins from the prefix sums, the two edge bins (tails folded in) directly.
    interior = plogp[np.maximum(b - 1, a + 1)] - plogp[a + 1]
    p_log_p = interior + _xlogx(first + left_out) + _xlogx(last + right_out)
    q_group = sliced + _EPSILON * nnz
    q_total = q_group.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_bin_q = np.where(nnz > 0, q_group / nnz, 1.0)
        p_log_q = (p_mass * np.log(per_bin_q)).sum(axis=1)
    return (p_log_p - p_log_q) / total - math.log(total) + np.log(q_total)
