"""Block scales on an 8-bit grid per output channel (double quantization, as QLoRA's and GGUF's k-quants store
theirs): scale = low + step × code, code 0..255, low and step float16 values per output channel. A file stores a byte
per block instead of float16's two — 4.25 bits a 4-bit weight at block 32 instead of 4.5 — and ORT folds the
Cast · Mul · Add that decode them at load (passes.forms.scale_storage), so its kernels read float32 scales as before.

Numerics: the grid spans the scales the clip search chose (numerics.blockwise, on float16's grid), and each block
then takes the grid value of least (importance-weighted) reconstruction error among the five nearest its chosen
scale — the grid's steps (~0.5–1 % of a scale on SmolLM2's weights) are finer than the clip search's 2.5 %, so the
blocks' error is as low or lower than on float16's grid (round to nearest on SmolLM2's weights: −1 … −2 % at 4
bits, −49 % on its 8-bit lm_head).
Decoding is two float32 roundings (the product, then the sum), as ORT's Mul and Add compute them, so the values the
codes were chosen against are the values the kernels read.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["ScaleGrid", "grid_of", "worth_a_grid", "GRID_CODES", "NEIGHBOURS"]

GRID_CODES = 255  # the top code: 256 values a channel
NEIGHBOURS = (-2, -1, 0, 1, 2)  # grid codes tried around each block's chosen scale (numerics.blockwise)
_HALF_MAX = float(np.finfo(np.float16).max)
_COARSER = 2.0 ** -6  # the most a step's rounding may widen it
_HALF_EPSILON = 2.0 ** -11  # float16's relative precision


@dataclasses.dataclass(frozen=True)
class ScaleGrid:
    """Per output channel n: scale = low[n] + step[n] × code; low and step hold float16 values (float32 arrays
    [N, 1]), step 0 where a channel has one scale."""

    low: np.ndarray
    step: np.ndarray

    def values(self, codes: np.ndarray) -> np.ndarray:
        product = codes.astype(np.float32) * self.step  # rounded once, as ORT's Mul
        return (product + self.low).astype(np.float32)  # and once more, as its Add

    def codes(self, scales: np.ndarray) -> np.ndarray:
        """uint8 codes of scales on the grid (the nearest grid value's otherwise)."""
        step = np.where(self.step > 0, self.step, np.float32(1.0))
        codes = np.where(self.step > 0, np.rint((scales - self.low) / step), 0.0)
        return np.clip(codes, 0, GRID_CODES).astype(np.uint8)

    def near(self, scales: np.ndarray, offset: int) -> np.ndarray:
        """The grid's values `offset` codes from those of scales (clipped to the grid), never exactly 0 — a block's
        codes divide by its scale: a code over (under, at the top) where the value is 0."""
        codes = np.clip(self.codes(scales).astype(np.int16) + offset, 0, GRID_CODES)
        values = self.values(codes)
        zero = values == 0
        if np.any(zero):
            values = np.where(zero, self.values(np.where(codes < GRID_CODES, codes + 1, codes - 1)), values)
        return values

    @staticmethod
    def joined(grids: list[ScaleGrid]) -> ScaleGrid:
        return ScaleGrid(np.concatenate([g.low for g in grids]), np.concatenate([g.step for g in grids]))


# A grid costs its channel 4 bytes (low and step) and saves a byte a block, and its weight six nodes (~600 bytes
# of graph): it is used where it saves at least this much.
_LEAST_SAVED = 4096


def worth_a_grid(channels: int, blocks: int) -> bool:
    """Whether a weight of `channels` output channels of `blocks` blocks each is stored smaller on a grid."""
    return channels * (blocks - 4) >= _LEAST_SAVED


def grid_of(scales: np.ndarray, live: np.ndarray) -> ScaleGrid | None:
    """The grid per row of scales [N, n_blocks] spanning its live blocks' scales (a block of zeros takes any
    scale). low is rounded down and step up on float16's grid, so that the span covers every live scale. None where
    float16 cannot hold a row's ends, or where rounding a step up widened it by more than 2^-6 of itself and more than
    float16's precision of the row's scales (a subnormal step of scales near float16's smallest normals): the scales
    are then stored as they are."""
    dead = ~live.any(axis=1, keepdims=True)
    low = np.where(dead, 1.0, np.where(live, scales, np.inf).min(axis=1, keepdims=True))
    high = np.where(dead, 1.0, np.where(live, scales, -np.inf).max(axis=1, keepdims=True))
    if max(np.max(np.abs(low)), np.max(np.abs(high))) >= _HALF_MAX:
        return None
    low16 = _rounded(low, down=True)
    exact = (high.astype(np.float64) - low16) / GRID_CODES
    step16 = _rounded(exact, down=False)
    top = np.full(low.shape, GRID_CODES)
    short = ScaleGrid(low16.astype(np.float32), step16.astype(np.float32)).values(top) < high
    step16 = np.where(short, np.nextafter(step16, np.float16(np.inf)), step16)  # float32's roundings fell short
    grid = ScaleGrid(low16.astype(np.float32), step16.astype(np.float32))
    # a step rounded up by little, or by less than float16's own precision of the row's scales (a row of one scale;
    # the subnormal steps of 8-bit scales)
    widened = grid.step - exact
    ends = np.maximum(np.abs(low), np.abs(high))
    fine = np.isfinite(grid.step) & ((widened <= exact * _COARSER) | (widened <= ends * _HALF_EPSILON))
    if not np.all(fine) or np.any(grid.values(top) < high):
        return None
    return grid


def _rounded(values: np.ndarray, down: bool) -> np.ndarray:
    """values (float64 or float32) on float16's grid, rounded toward -inf (down) or +inf."""
    half = values.astype(np.float16)
    off = half.astype(np.float64) > values if down else half.astype(np.float64) < values
    return np.where(off, np.nextafter(half, np.float16(-np.inf if down else np.inf)), half)
