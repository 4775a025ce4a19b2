"""What every calibration statistic is: folded one batch at a time, merged across shards, saved and read back.

Statistics are monoids: observing shard A then shard B equals observing each alone and merging (exactly for
extremes, sums and histograms; a seeded row sample is re-drawn in proportion to the rows each side stands for).
That is what keeps calibration memory flat in the number of samples and lets `onnxq calibrate` run on shards
that `onnxq merge` combines. A new statistic implements this protocol; the calibration cache stores its state().
Implemented by numerics.observers.TensorObserver (min/max, per-batch extremes, histogram),
calibration.channels.ChannelStats (per-channel max |x|, a row sample) and calibration.magnitudes.LargestMagnitude
(max |x|); calibration.moment_sums.MomentSum folds XᵀX products alike.
"""

from __future__ import annotations

from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

__all__ = ["Collector"]

_C = TypeVar("_C", bound="Collector")  # typing.Self needs Python 3.11; onnxq supports 3.10


@runtime_checkable
class Collector(Protocol):
    def observe(self, batch: np.ndarray) -> None:
        """Fold one batch in; memory does not grow with the number of batches."""

    def merge(self: _C, other: _C) -> None:
        """Fold in another collector of the same statistic (another shard)."""

    def state(self) -> dict:
        """JSON-ready state (floats exact, as hex), for the calibration cache."""

    @classmethod
    def from_state(cls: type[_C], state: dict) -> _C:
        """The collector state() describes."""
