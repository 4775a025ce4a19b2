"""Where what reads a tensor stops telling its values apart: a hardswish sends everything below −3 to 0, a ReLU6
everything above 6 to 6, a HardSigmoid both sides to 0 and 1. Clipping the tensor's quantization range there
changes nothing the reader sees, and the step shrinks for the values it does see (a Conv's output before PP-LCNet's
affine + hardswish: −34 … 38 observed, −2 … 38 read apart — a step 1.8× finer)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["saturation_bounds"]


def saturation_bounds(edges: np.ndarray, outputs: Sequence[np.ndarray]) -> tuple[float, float]:
    """From the reader's outputs at the centres of a grid's bins (the bins given by their n + 1 edges): every
    value below the lower bound reads as the first bin does, every value above the upper bound as the last. The
    lower bound is the left edge of the last bin from the bottom whose centre reads exactly as the first bin's centre
    (all values below that edge lie below that centre: they read alike where the reader is constant between
    centres that read alike, as a saturation is); the upper bound likewise from the top. A reader that tells the
    end bins apart gives the grid's own ends."""
    def reads_as(o: np.ndarray, end: int) -> np.ndarray:
        o = np.asarray(o, np.float64)
        return o == o[end]
    low = _leading_run([reads_as(o, 0) for o in outputs])
    high = _leading_run([reads_as(o, -1)[::-1] for o in outputs])
    n = len(edges) - 1
    return float(edges[max(low, 1) - 1]), float(edges[n - max(high, 1) + 1])


def _leading_run(flags: Sequence[np.ndarray]) -> int:
    """How many leading entries are True in every array."""
    together = np.logical_and.reduce([np.asarray(f, bool) for f in flags])
    false = np.flatnonzero(~together)
    return len(together) if len(false) == 0 else int(false[0])
