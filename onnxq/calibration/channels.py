"""Per-channel activation statistics for smoothing: max |x| per input channel (the last axis) and a bounded,
seeded sample of rows, streamed batch by batch (memory does not grow with the data); the named values of a model
batch by batch, for these and for the second moments (calibration.moments)."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnxq.calibration.specs import Batch
from onnxq.calibration.runner import session_exposing
from onnxq.errors import CalibrationDataError, whole_message

__all__ = ["ChannelStats", "collect_channel_stats", "values_per_batch"]


class ChannelStats:
    """max |x_j| per channel, and up to max_rows rows (reservoir sampling, seeded: the same data gives the same
    sample). Mergeable (shards): the maxima exactly, the rows re-drawn from both samples in proportion to the rows
    each stands for. Stored in the calibration cache (rows as base64 float32 bytes)."""

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

    def merge(self, other: ChannelStats) -> None:
        if self.absmax is None or other.absmax is None or self.absmax.shape != other.absmax.shape:
            raise ValueError("cannot merge channel statistics of different or empty tensors")
        self.absmax = np.maximum(self.absmax, other.absmax)
        rows = np.concatenate([self.rows, other.rows])
        if rows.shape[0] > self.max_rows:
            weights = np.concatenate([np.full(len(self.rows), self.seen / len(self.rows)),
                                      np.full(len(other.rows), other.seen / len(other.rows))])
            rng = np.random.default_rng(self.seen + other.seen)  # seeded by the data's size: deterministic
            keep = np.sort(rng.choice(rows.shape[0], self.max_rows, replace=False, p=weights / weights.sum()))
            rows = rows[keep]
        self.rows = rows
        self.seen += other.seen

    def state(self) -> dict:
        return {"absmax": [float(v).hex() for v in self.absmax], "seen": self.seen, "max_rows": self.max_rows,
                "rows": base64.b64encode(np.ascontiguousarray(self.rows, "<f4").tobytes()).decode("ascii")}

    @classmethod
    def from_state(cls, state: dict) -> ChannelStats:
        stats = cls(int(state["max_rows"]))
        stats.absmax = np.array([float.fromhex(v) for v in state["absmax"]], np.float32)
        stats.seen = int(state["seen"])
        rows = np.frombuffer(base64.b64decode(state["rows"]), "<f4").astype(np.float32)
        stats.rows = rows.reshape(-1, stats.absmax.size)
        return stats

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
    stats = {n: ChannelStats(max_rows) for n in names}
    for arrays in values_per_batch(model, names, batches):
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


def values_per_batch(model: ir.Model, names: list[str], batches: Iterable[Batch]) -> Iterator[dict[str, np.ndarray]]:
    """For each batch, the named values: computed by one ORT session of the model, or the batch's own inputs."""
    graph_inputs = {v.name for v in model.graph.inputs}
    fetched = [n for n in names if n not in graph_inputs]
    session, output_names = session_exposing(model, fetched, reduce_in_graph=False) if fetched else (None, [])
    for batch in batches:
        try:
            outputs = session.run(output_names, batch) if session is not None else []
        except (ort.capi.onnxruntime_pybind11_state.InvalidArgument,
                ort.capi.onnxruntime_pybind11_state.Fail) as e:
            raise CalibrationDataError("ONNX Runtime rejected a calibration batch: "
                                       f"{whole_message(e).removeprefix('[ONNXRuntimeError] : ')}") from None
        yield dict(zip(fetched, outputs)) | {n: batch[n] for n in names if n in graph_inputs}
