"""Per-channel activation statistics for smoothing: max |x| per input channel (the last axis of a MatMul's
activation, axis 1 of a Conv's) and a bounded, seeded sample of rows (one value per channel), streamed batch by
batch (memory does not grow with the data); the named values of a model batch by batch, for these and for the
second moments (calibration.moments)."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import onnx_ir as ir

from onnxq.data.batching import SampleRuns
from onnxq.data.specs import Batch
from onnxq.calibration.exposed import Exposed
from onnxq.errors import CalibrationDataError

__all__ = ["ChannelStats", "collect_channel_stats", "values_per_batch", "VALUES_BUDGET"]

# The computed values one run of values_per_batch returns, at most: a batch is run in pieces (SmoothQuant's
# statistics of SmolLM2-135M are 392 kB a token: 400 MB for a batch of 8 windows of 128 tokens, which with ORT's
# own buffers set the smoothing's peak).
VALUES_BUDGET = 64 << 20


class ChannelStats:
    """max |x_j|, min x_j and max x_j per channel, and up to max_rows rows (reservoir sampling, seeded: the same
    data gives the same sample). Mergeable (shards): the extremes exactly, the rows re-drawn from both samples in
    proportion to the rows each stands for. Stored in the calibration cache (rows as base64 float32 bytes).
    `axis`: the channel axis of the observed arrays (a row is one position along the others)."""

    def __init__(self, max_rows: int = 256, seed: int = 0, axis: int = -1) -> None:
        self.axis = axis
        self.absmax: np.ndarray | None = None
        # Per channel min and max: what a per-tensor range of the smoothed activation spans (low / s, high / s).
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None
        self.rows: np.ndarray | None = None
        self.seen = 0
        self.max_rows = max_rows
        self._rng = np.random.default_rng(seed)

    def observe(self, x: np.ndarray) -> None:
        x = np.moveaxis(np.asarray(x, dtype=np.float32), self.axis, -1)
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] == 0:
            return
        if not np.all(np.isfinite(rows)):
            raise ValueError("observed values are not finite (NaN or inf)")
        low, high = rows.min(axis=0), rows.max(axis=0)
        self.low = low if self.low is None else np.minimum(self.low, low)
        self.high = high if self.high is None else np.maximum(self.high, high)
        self.absmax = np.maximum(-self.low, self.high)
        self._sample(rows)

    def merge(self, other: ChannelStats) -> None:
        if self.absmax is None or other.absmax is None or self.absmax.shape != other.absmax.shape \
                or self.axis != other.axis:
            raise ValueError("cannot merge channel statistics of different or empty tensors")
        self.absmax = np.maximum(self.absmax, other.absmax)
        self.low, self.high = np.minimum(self.low, other.low), np.maximum(self.high, other.high)
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
                "axis": self.axis, "low": [float(v).hex() for v in self.low],
                "high": [float(v).hex() for v in self.high],
                "rows": base64.b64encode(np.ascontiguousarray(self.rows, "<f4").tobytes()).decode("ascii")}

    @classmethod
    def from_state(cls, state: dict) -> ChannelStats:
        stats = cls(int(state["max_rows"]), axis=int(state.get("axis", -1)))
        stats.absmax = np.array([float.fromhex(v) for v in state["absmax"]], np.float32)
        # A cache written before min and max were kept: the symmetric bounds, as smoothing assumed then.
        stats.low = np.array([float.fromhex(v) for v in state["low"]], np.float32) if "low" in state else -stats.absmax
        stats.high = np.array([float.fromhex(v) for v in state["high"]], np.float32) if "high" in state \
            else stats.absmax
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
        # Reservoir sampling (Algorithm R) for the rest: each row seen so far is kept with equal probability. The
        # draws are made at once (the same numbers as one draw per row), and where two rows draw one slot the
        # later wins, as in the row-by-row loop; a Conv activation brings ~10⁵ rows per batch.
        first = max(room, 0)
        slots = self._rng.integers(0, self.seen + np.arange(first, rows.shape[0]) + 1)
        taken = np.flatnonzero(slots < self.max_rows)[::-1]
        kept_slots, last = np.unique(slots[taken], return_index=True)
        self.rows[kept_slots] = rows[first + taken[last]]
        self.seen += rows.shape[0]


def collect_channel_stats(model: ir.Model, channel_axes: Mapping[str, int], batches: Iterable[Batch],
                          max_rows: int = 256) -> dict[str, ChannelStats]:
    """One ChannelStats per named value (computed by the model, or a graph input) on its channel axis, fed every
    batch."""
    names = list(channel_axes)
    stats = {n: ChannelStats(max_rows, axis=axis) for n, axis in channel_axes.items()}
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
    """For each batch — in pieces of at most VALUES_BUDGET bytes of computed values, measured on the first sample,
    each batch cut from its start alike — the named values: computed by one ORT session of the model, or the
    batch's own inputs."""
    graph_inputs = {v.name for v in model.graph.inputs}
    fetched = [n for n in names if n not in graph_inputs]
    exposed = Exposed(model, fetched, reduce_in_graph=False) if fetched else None

    def values(batch: Batch) -> dict[str, np.ndarray]:
        computed = dict(zip(exposed.names, exposed.run(batch))) if exposed is not None else {}
        return computed | {n: batch[n] for n in names if n in graph_inputs}

    cut = SampleRuns(VALUES_BUDGET, aligned=True)
    for batch in batches:
        if exposed is None or not exposed.takes_any_batch(batch):
            yield values(batch)
        else:
            yield from cut(batch, values, lambda got: sum(got[n].nbytes for n in exposed.names))
