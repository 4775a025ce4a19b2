"""Second moments as collectors: per weight, the sum over batches of XᵀX (its packed upper triangle,
numerics.symmetric) or of its diagonal, and the rows it saw — folded a batch at a time, merged across shards and
stored in the calibration summary (calibration.summary) bit for bit, the sums being order-free
(numerics.order_free_sum). calibration.moments makes them; a 4-bit run reads their means.

State (the summary's "moments"): {"full": bool (XᵀX, or its diagonal), "weights": [[weight name, read transposed,
matrix index], …], "matrices": [{"readers": [value names], "rows": int, "sum": OrderFreeSum state}, …]} — weights
whose nodes read the same activations the same way share one matrix.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from onnxq.numerics.order_free_sum import OrderFreeSum
from onnxq.numerics.symmetric import add_upper, packed_upper

__all__ = ["MomentSum", "RunningMomentSum", "StoredMoments"]

# XᵀX means are float32, as GPTQ's reference code keeps them (GPTQ factors a float64 copy); diagonals float64.
_MEAN_DTYPE = {True: np.float32, False: np.float64}


class MomentSum:
    """One matrix's sum of XᵀX (packed) or of its diagonal over the batches, and the rows they hold."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self.total: OrderFreeSum | None = None
        self.rows = 0

    def observe(self, squares: np.ndarray, rows: int) -> None:
        """One batch's XᵀX ([K, K] or [G, K, K]) or diagonal, and its row count."""
        part = packed_upper(squares) if self.full else squares
        if self.total is None:
            self.total = OrderFreeSum(part.shape)
        self.total.add(part)
        self.rows += rows

    def merge(self, other: MomentSum) -> None:
        if other.full != self.full:
            raise ValueError("cannot merge a matrix's sum with a diagonal's")
        if other.total is not None:
            if self.total is None:
                self.total = OrderFreeSum(other.total.shape)
            self.total.merge(other.total)
        self.rows += other.rows

    def mean(self) -> np.ndarray | None:
        """The sum over the rows (None: no batch made rows), read-only: shared by the weights alike."""
        if self.total is None or not self.rows:
            return None
        matrix = self.total.value().astype(_MEAN_DTYPE[self.full])
        matrix /= self.rows
        matrix.setflags(write=False)
        return matrix

    def state(self) -> dict:
        return {"rows": self.rows, "sum": None if self.total is None else self.total.state()}

    @classmethod
    def from_state(cls, state: dict, full: bool) -> MomentSum:
        collector = cls(full)
        collector.rows = int(state["rows"])
        collector.total = None if state["sum"] is None else OrderFreeSum.from_state(state["sum"])
        return collector


class RunningMomentSum:
    """MomentSum's in-process twin for moments no summary stores (a Conv's, for GPTQ rounding in static mode: Conv
    takes no weight-only blocks): a float32 packed triangle summed in place, a quarter of an order-free sum's bytes
    and none of its conversions. ResNet-50's calibration held 3.0 GB and took 74 s with order-free sums of its
    Convs' XᵀX, 0.95 GB and 26 s so (AMD EPYC, 2 cores)."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self.total: np.ndarray | None = None
        self.rows = 0

    def observe(self, squares: np.ndarray, rows: int) -> None:
        if self.total is None:
            self.total = packed_upper(squares) if self.full else squares
        elif self.full:
            add_upper(self.total, squares)
        else:
            self.total += squares
        self.rows += rows

    def mean(self) -> np.ndarray | None:
        """The sum made its mean in place (a second set of matrices was ResNet-50's calibration peak), read-only."""
        if self.total is None or not self.rows:
            return None
        self.total /= self.rows
        self.total.setflags(write=False)
        return self.total


@dataclasses.dataclass
class StoredMoments:
    """The second moments a calibration kept: per weight key (name, read transposed), the index of its matrix;
    per matrix, the activations its weights' nodes read and its sum."""

    full: bool
    weights: dict[tuple[str, bool], int]
    readers: list[tuple[str, ...]]
    sums: list[MomentSum]

    def merge(self, other: StoredMoments) -> None:
        if (other.full, other.weights, other.readers) != (self.full, self.weights, self.readers):
            raise ValueError("the second moments are of other weights")
        for mine, theirs in zip(self.sums, other.sums):
            mine.merge(theirs)

    def means(self) -> dict[tuple[str, bool], np.ndarray]:
        """Each weight's mean matrix (or diagonal), weights alike sharing one array; a weight no batch made rows
        for is left out."""
        made = [s.mean() for s in self.sums]
        return {key: made[i] for key, i in self.weights.items() if made[i] is not None}

    def state(self) -> dict:
        return {"full": self.full, "weights": [[name, transposed, i] for (name, transposed), i in self.weights.items()],
                "matrices": [{"readers": list(r), **s.state()} for r, s in zip(self.readers, self.sums)]}

    @classmethod
    def from_state(cls, state: dict) -> StoredMoments:
        full = bool(state["full"])
        weights = {(str(name), bool(transposed)): int(i) for name, transposed, i in state["weights"]}
        matrices = state["matrices"]
        if any(not 0 <= i < len(matrices) for i in weights.values()):
            raise ValueError("a weight's matrix index is out of range")
        return cls(full, weights, [tuple(str(r) for r in m["readers"]) for m in matrices],
                   [MomentSum.from_state(m, full) for m in matrices])
