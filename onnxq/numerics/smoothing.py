"""SmoothQuant's migration of activation outliers into the weights (Xiao et al., 2023), pure numpy.

For the activation X [rows, K] of one or more linear layers with weights W_i [K, N_i], per input channel j:
s_j = max|X_j|^α / max_i max|W_i[j, :]|^(1−α); then (X / s) · (s · W) = X · W exactly in real arithmetic, and α
moves the quantization difficulty from the activation (α → 1) to the weights (α → 0).
"""

from __future__ import annotations

import numpy as np

__all__ = ["smoothing_scales", "awq_scales", "ALPHA_GRID", "CONV_ALPHA_GRID", "AWQ_ALPHA_GRID"]

# The α values `smooth = "auto"` tries per layer (the paper's useful range), besides leaving the layer unsmoothed.
ALPHA_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# For Conv, also α = 1 (the activation's channels equalised outright): a depthwise Conv's per-channel weights take
# any s without loss, so full equalisation is the natural choice there.
CONV_ALPHA_GRID = (*ALPHA_GRID, 1.0)
# AWQ's grid (Lin et al., 2024: s_j = mean|X_j|^α, α in [0, 1)): the paper's 20 points halved — neighbours differ
# by less than a 256-row sample's noise.
AWQ_ALPHA_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# Scales are kept within [1e-4, 1e4]: a channel that is (almost) always zero would otherwise get a huge divisor.
_LIMIT = 1e4


def smoothing_scales(activation_absmax: np.ndarray, weight_absmax: np.ndarray, alpha: float) -> np.ndarray:
    """s [K] (float32) from max|X_j| [K] and max|W[j, :]| [K]; channels where either is 0 keep s_j = 1."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    a = np.asarray(activation_absmax, dtype=np.float64)
    w = np.asarray(weight_absmax, dtype=np.float64)
    if a.shape != w.shape or a.ndim != 1:
        raise ValueError(f"activation and weight maxima must be 1-D of one length, got {a.shape} and {w.shape}")
    live = (a > 0) & (w > 0) & np.isfinite(a) & np.isfinite(w)
    s = np.ones_like(a)
    s[live] = a[live] ** alpha / w[live] ** (1.0 - alpha)
    return np.clip(s, 1.0 / _LIMIT, _LIMIT).astype(np.float32)


def awq_scales(activation_meanabs: np.ndarray, alpha: float) -> np.ndarray:
    """AWQ's s [K] (float32) from mean|X_j| [K]: s_j = mean|X_j|^α, divided by the geometric middle of its extremes
    so the weights' magnitudes stay centred (the paper's normalisation); channels never active keep s_j = 1."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    m = np.asarray(activation_meanabs, dtype=np.float64)
    if m.ndim != 1:
        raise ValueError(f"activation means must be 1-D, got {m.shape}")
    live = (m > 0) & np.isfinite(m)
    s = np.ones_like(m)
    if live.any():
        s[live] = m[live] ** alpha
        s[live] /= np.sqrt(s[live].max() * s[live].min())
    return np.clip(s, 1.0 / _LIMIT, _LIMIT).astype(np.float32)
