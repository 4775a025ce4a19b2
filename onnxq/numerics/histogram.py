"""A streaming histogram whose bins lie on a grid anchored at 0 with a power-of-two width.

Why this grid: the width is always the smallest power of two that fits the range seen so far into `max_bins`
bins, so it depends on that range alone, never on the order the data came in. Coarsening from width w to 2w maps
bin k to floor(k / 2) exactly. Hence observing batches in any order, or in shards merged afterwards, gives
bit-identical counts — the same as one np.histogram of all the data on the final grid.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Histogram"]

# Bins finer than float32's resolution at the largest magnitude carry no information.
_MANTISSA_BITS = 24


class Histogram:
    def __init__(self, max_bins: int = 8192) -> None:
        if max_bins < 2:
            raise ValueError("max_bins must be >= 2")
        self.max_bins = max_bins
        self.exponent: int | None = None  # bin width 2**exponent; None while only zeros were seen
        self.offset = 0  # grid index of counts[0]
        self.counts = np.zeros(1, dtype=np.int64)  # with exponent None: counts[0] holds the zeros
        # Exact extremes of everything counted: the grid is a function of these alone.
        self.min = math.inf
        self.max = -math.inf

    # -- geometry ---------------------------------------------------------------------------------------------

    @property
    def width(self) -> float:
        return 0.0 if self.exponent is None else math.ldexp(1.0, self.exponent)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def edges(self) -> np.ndarray:
        """Bin edges (len(counts) + 1 values)."""
        return (self.offset + np.arange(len(self.counts) + 1, dtype=np.float64)) * self.width

    def _exponent_for(self, lo: float, hi: float) -> int | None:
        """The smallest power-of-two exponent that fits [lo, hi] into max_bins bins (None for [0, 0])."""
        magnitude = max(abs(lo), abs(hi))
        if magnitude == 0.0:
            return None
        exponent = math.frexp(magnitude)[1] - 1 - _MANTISSA_BITS
        span = hi - lo
        if span > 0:
            exponent = max(exponent, math.ceil(math.log2(span / self.max_bins)) - 1)
        while math.floor(math.ldexp(hi, -exponent)) - math.floor(math.ldexp(lo, -exponent)) + 1 > self.max_bins:
            exponent += 1
        return exponent

    # -- updates ----------------------------------------------------------------------------------------------

    def _coarsen_to(self, exponent: int) -> None:
        if self.exponent is None:
            self.exponent = exponent  # only zeros so far: they stay in bin 0 at any width
            return
        steps = exponent - self.exponent
        if steps <= 0:
            return
        index = self.offset + np.arange(len(self.counts))
        coarse = index >> steps  # floor division by 2**steps, exact for negative indices too
        new_offset = int(coarse[0])
        self.counts = np.bincount(coarse - new_offset, weights=self.counts).astype(np.int64)
        self.offset = new_offset
        self.exponent = exponent

    def _cover(self, lo_index: int, hi_index: int) -> None:
        """Grow the counts array to cover grid indices [lo_index, hi_index]."""
        if not self.counts.any():  # nothing counted yet: the placeholder bin need not be kept
            self.counts, self.offset = np.zeros(hi_index - lo_index + 1, dtype=np.int64), lo_index
            return
        first = min(self.offset, lo_index)
        last = max(self.offset + len(self.counts) - 1, hi_index)
        if first == self.offset and last == self.offset + len(self.counts) - 1:
            return
        grown = np.zeros(last - first + 1, dtype=np.int64)
        grown[self.offset - first:self.offset - first + len(self.counts)] = self.counts
        self.counts, self.offset = grown, first

    def _refit(self, lo: float, hi: float) -> None:
        """Extend the exact range by [lo, hi]; re-grid (coarsen, grow) so that it covers the new range."""
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        needed = self._exponent_for(self.min, self.max)
        if needed is None:
            return
        if self.exponent is None or needed > self.exponent:
            self._coarsen_to(needed)
        scale = math.ldexp(1.0, -self.exponent)
        self._cover(math.floor(self.min * scale), math.floor(self.max * scale))

    def add(self, values: np.ndarray, lo: float | None = None, hi: float | None = None) -> None:
        """Count finite values (lo/hi: their min and max, when the caller already has them)."""
        values = np.asarray(values)
        if values.size == 0:
            return
        lo = float(values.min()) if lo is None else lo
        hi = float(values.max()) if hi is None else hi
        self._refit(lo, hi)
        if self.exponent is None:
            self.counts[0] += values.size
            return
        index = self._grid_index(values)
        index -= self.offset
        self.counts += np.bincount(index, minlength=len(self.counts))

    def _grid_index(self, values: np.ndarray) -> np.ndarray:
        """floor(x / 2**e) for each value, exactly: in float32 where the scale only grows them (e <= 0: a product by
        a power of two that cannot underflow, nor overflow on the grid's few thousand bins), five times faster on a
        Conv's activations; else in float64, which keeps x / 2**e exact where float32 would underflow."""
        if values.dtype in (np.float32, np.float16) and self.exponent <= 0:
            scaled = values.astype(np.float32, copy=False).ravel() * np.float32(math.ldexp(1.0, -self.exponent))
            return np.floor(scaled, out=scaled).astype(np.int64)
        return np.floor(values.astype(np.float64).ravel() * math.ldexp(1.0, -self.exponent)).astype(np.int64)

    def merge(self, other: Histogram) -> None:
        if other.max_bins != self.max_bins:
            raise ValueError(f"cannot merge histograms of {self.max_bins} and {other.max_bins} max bins")
        if other.total == 0:
            return
        self._refit(other.min, other.max)
        other = other.copy()
        if self.exponent is None:  # both hold only zeros
            self.counts[0] += other.counts[0]
            return
        other._coarsen_to(self.exponent)
        start = other.offset - self.offset
        self.counts[start:start + len(other.counts)] += other.counts

    def copy(self) -> Histogram:
        h = Histogram(self.max_bins)
        h.exponent, h.offset, h.counts = self.exponent, self.offset, self.counts.copy()
        h.min, h.max = self.min, self.max
        return h

    # -- serialisation ----------------------------------------------------------------------------------------

    def state(self) -> dict:
        """JSON-ready state; floats as exact hex strings so that a saved histogram reloads bit for bit."""
        return {"max_bins": self.max_bins, "exponent": self.exponent, "offset": self.offset,
                "min": float(self.min).hex(), "max": float(self.max).hex(), "counts": self.counts.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> Histogram:
        h = cls(int(state["max_bins"]))
        h.exponent = None if state["exponent"] is None else int(state["exponent"])
        h.offset = int(state["offset"])
        h.counts = np.asarray(state["counts"], dtype=np.int64)
        h.min, h.max = float.fromhex(state["min"]), float.fromhex(state["max"])
        return h
