"""Per-token (per-row) symmetric activation quantization, the seed notebooks' formula.

scale = max|x| over the last axis / 127 (one scale per row of [tokens, channels]), q = clamp(round_half_even(x /
scale), -127, 127). A row of zeros gets the smallest normal float32 scale instead of 0, so that x / scale stays 0.
The ONNX graph (passes/insert_dynamic.py) computes exactly these float32 operations in this order.
"""

from __future__ import annotations

import numpy as np

__all__ = ["per_token_quantize", "PER_TOKEN_ZERO_POINT", "MIN_SCALE"]

MIN_SCALE = np.float32(np.finfo(np.float32).tiny)
# Stored as uint8 with this zero point (q + 128 ∈ [1, 255]): ORT's fast CPU kernel is U8S8.
PER_TOKEN_ZERO_POINT = 128


def per_token_quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q int8 [..., K], scale float32 [..., 1]) for x [..., K]."""
    x = np.asarray(x, dtype=np.float32)
    scale = np.divide(np.max(np.abs(x), axis=-1, keepdims=True), np.float32(127), dtype=np.float32)
    scale = np.maximum(scale, MIN_SCALE)
    q = np.rint(np.divide(x, scale, dtype=np.float32))
    return np.clip(q, -127, 127).astype(np.int8), scale
