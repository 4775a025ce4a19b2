"""Per-channel activation statistics for smoothing: max |x| per input channel (the last axis) and a bounded,
seeded sample of rows, streamed batch by batch (memory does not grow with the data)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxq.calibration.data import Batch
from onnxq.calibration.runner import session_exposing
from onnxq.errors import CalibrationDataError

__all__ = ["ChannelStats", "collect_channel_stats"]


class ChannelStats:
    """max |x_j| per channel, and up to max_rows rows (reservoir sampling, seeded: the same data gives the same
    sample)."""

    def __init__(self, max_rows: int = 256, seed: int = 0) -> None:
        self.absmax: np.ndarray | None = None
        self.rows: np.ndarray | None = None
        self.seen = 0
        self.max_rows = max_rows
        self._rng = np.random.default_rng(seed)

    def observe(self, x: np.ndarray) -> None:
        rows = np.asarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
        if rows.shape[0] == 0:
            return
        if not np.all(np.isfinite(rows)):
            raise ValueError("observed values are not finite (NaN or inf)")
        batch_max = np.abs(rows).max(axis=0)
        self.absmax = batch_max if self.absmax is None else np.maximum(self.absmax, batch_max)
        self._sample(rows)

    def _sample(self, rows: np.ndarray) -> None:
        if self.rows is None:
            self.rows = np.empty((0, rows.shape[1]), np.float32)
        room = self.max_rows - self.rows.shape[0]
        if room > 0:
            self.rows = np.concatenate([self.rows, rows[:room]])
        # Reservoir sampling (Algorithm R) for the rest: each row seen so far is kept with equal probability.
        for i in range(max(room, 0), rows.shape[0]):
            j = int(self._rng.integers(0, self.seen + i + 1))
            if j < self.max_rows:
                self.rows[j] = rows[i]
        self.seen += rows.shape[0]


def collect_channel_stats(model: ir.Model, value_names: Iterable[str], batches: Iterable[Batch],
                          max_rows: int = 256) -> dict[str, ChannelStats]:
    """One ChannelStats per named value (computed by the model, or a graph input), fed every batch."""
    names = list(dict.fromkeys(value_names))
    graph_inputs = {v.name for v in model.graph.inputs}
    fetched = [n for n in names if n not in graph_inputs]
    stats = {n: ChannelStats(max_rows) for n in names}
    session, output_names = session_exposing(model, fetched, reduce_in_graph=False) if fetched else (None, [])
    for batch in batches:
        try:
            outputs = session.run(output_names, batch) if session is not None else []
        except (ort.capi.onnxruntime_pybind11_state.InvalidArgument,
                ort.capi.onnxruntime_pybind11_state.Fail) as e:
            raise CalibrationDataError(f"ONNX Runtime rejected a calibration batch: {str(e).splitlines()[0]}") \
                from None
        arrays = dict(zip(fetched, outputs)) | {n: batch[n] for n in names if n in graph_inputs}
        for name, array in arrays.items():
            try:
                stats[name].observe(array)
            except ValueError:
                raise CalibrationDataError(
                    f"the model computes NaN or inf for '{name}' on a calibration batch — check those inputs") \
                    from None
    if any(s.absmax is None for s in stats.values()):
        raise CalibrationDataError("calibration data holds no samples — pass at least one sample per input")
    return stats
