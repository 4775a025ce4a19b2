"""Sums of float arrays whose result does not depend on the order of the addends, nor on how they were split into
partial sums merged afterwards: what lets GPTQ's XᵀX sums of shards merge into the single-process sum bit for bit
(a float sum is not associative: ((a + b) + c) ≠ (a + (b + c)) in its last bits).

Each element is kept as two int64 bins on a fixed binary grid (a reproducible "binned" sum, as ReproBLAS does):
bin j holds the bits of the addends between 2**(j·W) and 2**((j+1)·W), as an exact integer. An element's two bins
are the top one its largest addend reaches (its anchor) and the one below; bits of the addends below that are
dropped. Integer additions are exact and commutative, and what is dropped depends only on the final anchor (the
largest addend, an order-free maximum), so any order of additions and merges gives the same bins. Each element is
exact to at least W = 40 bits below its largest addend (float32 addends have 24); a bin takes 2**23 addends (batches)
before it could overflow. Memory: 18 bytes an element (two int64 bins and an int16 anchor).
"""

from __future__ import annotations

import base64

import numpy as np

__all__ = ["OrderFreeSum", "BYTES_PER_ELEMENT"]

_W = 40  # bits a bin holds
_NONE = np.int16(-(1 << 14))  # the anchor of an element nothing (or only zeros) was added to
_MASK = np.int64((1 << _W) - 1)
_MAX_ADDENDS = 1 << (62 - _W)  # |bin| < addends · 2**W stays below 2**62
BYTES_PER_ELEMENT = 2 * 8 + 2


def _shifted_right(values: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """values >> shift for shifts of any size (values ≥ 0, below 2**53: a shift past 63 gives 0; only elements
    whose value is 0 have a shift below 0)."""
    return np.right_shift(values, np.clip(shift, 0, 63))


class OrderFreeSum:
    """The sum of float arrays of one shape (float32 or float64 addends), the same bits whatever the order of add()
    and merge(). value() gives it as float64."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = tuple(shape)
        self.anchor = np.full(self.shape, _NONE, np.int16)
        self.top = np.zeros(self.shape, np.int64)
        self.low = np.zeros(self.shape, np.int64)
        self.addends = 0

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, np.float64)
        if values.shape != self.shape:
            raise ValueError(f"adding shape {values.shape} to a sum of shape {self.shape}")
        if not np.all(np.isfinite(values)):
            raise ValueError("added values are not finite (NaN or inf)")
        self._count(1)
        fraction, exponent = np.frexp(values)  # values = fraction · 2**exponent, 0.5 ≤ |fraction| < 1
        mantissa = np.abs(np.ldexp(fraction, 53)).astype(np.int64)  # exact: |values| = mantissa · 2**(exponent - 53)
        exponent = exponent.astype(np.int64)
        bin_of = np.where(mantissa > 0, (exponent - 1) // _W, np.int64(_NONE))  # the bin of the top bit
        self._raise_anchor(np.maximum(self.anchor, bin_of).astype(np.int16))
        # The addend's bits relative to the bottom of the top bin (shift < 0: right) and of the bin below.
        to_top = exponent - 53 - self.anchor.astype(np.int64) * _W
        to_low = to_top + _W
        top = _shifted_right(mantissa, -to_top)  # to_top ≤ W - 53 < 0: always a right shift
        kept = np.where(to_low < _W, np.left_shift(np.bitwise_and(
            mantissa, np.left_shift(np.int64(1), np.clip(_W - to_low, 0, 62)) - 1), np.clip(to_low, 0, 62)), 0)
        low = np.where(to_low >= 0, kept, np.bitwise_and(_shifted_right(mantissa, -to_low), _MASK))
        sign = np.where(values < 0, -1, 1).astype(np.int64)
        self.top += sign * top
        self.low += sign * low

    def merge(self, other: OrderFreeSum) -> None:
        if other.shape != self.shape:
            raise ValueError(f"merging a sum of shape {other.shape} into one of shape {self.shape}")
        self._count(other.addends)
        anchor = np.maximum(self.anchor, other.anchor)
        self._raise_anchor(anchor)
        top, low = other._aligned(anchor)
        self.top += top
        self.low += low

    def value(self) -> np.ndarray:
        """The sum as float64 (each bin rounded to float64 once, then added: deterministic)."""
        base = self.anchor.astype(np.int64) * _W
        return np.ldexp(self.top.astype(np.float64), base) + np.ldexp(self.low.astype(np.float64), base - _W)

    def state(self) -> dict:
        return {"shape": list(self.shape), "addends": self.addends, "anchor": _encoded(self.anchor, "<i2"),
                "top": _encoded(self.top, "<i8"), "low": _encoded(self.low, "<i8")}

    @classmethod
    def from_state(cls, state: dict) -> OrderFreeSum:
        total = cls(tuple(int(d) for d in state["shape"]))
        total.addends = int(state["addends"])
        total.anchor = _decoded(state["anchor"], "<i2", total.shape).astype(np.int16)
        total.top = _decoded(state["top"], "<i8", total.shape).astype(np.int64)
        total.low = _decoded(state["low"], "<i8", total.shape).astype(np.int64)
        return total

    def _count(self, addends: int) -> None:
        self.addends += addends
        if self.addends >= _MAX_ADDENDS:
            raise ValueError(f"an order-free sum takes at most {_MAX_ADDENDS} addends")

    def _raise_anchor(self, anchor: np.ndarray) -> None:
        """Move each element's bins up to `anchor` (≥ its own): the bins that fall below are dropped."""
        self.top, self.low = self._aligned(anchor)
        self.anchor = anchor

    def _aligned(self, anchor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rise = anchor.astype(np.int64) - self.anchor.astype(np.int64)
        top = np.where(rise == 0, self.top, 0)
        low = np.where(rise == 0, self.low, np.where(rise == 1, self.top, 0))
        return top, low


def _encoded(array: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype).tobytes()).decode("ascii")


def _decoded(text: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype).reshape(shape)
