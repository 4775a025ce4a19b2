"""Observers fold one batch at a time into a small running summary; memory never grows with the data."""

from __future__ import annotations

import numpy as np

__all__ = ["MinMaxObserver"]


class MinMaxObserver:
    """Running minimum and maximum of everything observed (per tensor)."""

    def __init__(self) -> None:
        self.min = np.inf
        self.max = -np.inf
        self.count = 0

    def observe(self, batch: np.ndarray) -> None:
        if batch.size == 0:
            return
        self.min = min(self.min, float(np.min(batch)))
        self.max = max(self.max, float(np.max(batch)))
        self.count += int(batch.size)

    def merge(self, other: MinMaxObserver) -> None:
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.count += other.count

    @property
    def empty(self) -> bool:
        return self.count == 0

    def range(self) -> tuple[float, float]:
        if self.empty:
            raise ValueError("nothing observed")
        return self.min, self.max
