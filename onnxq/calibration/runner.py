"""Streamed calibration: one ORT session over a copy of the graph exposing the tensors to observe."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import numpy as np
import onnx_ir as ir

from onnxq.data.batching import SampleRuns, samples_in
from onnxq.calibration.exposed import BODY_WAYS, Exposed
from onnxq.data.specs import Batch
from onnxq.errors import CalibrationDataError, ort_reason
from onnxq.io.sessions import ORT_ERRORS
from onnxq.numerics import TensorObserver

from onnxq.calibration.channels import ChannelStats

__all__ = ["collect_observers"]

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]

# The whole values one calibration run returns (histograms, channel statistics), at most: a batch runs in pieces of
# samples, the count measured on the first sample. Xception (299 px, 91 MB of weights, 91 observed values): a batch
# of 8 peaked at 3.9 GB, of 2 at 1.2 GB. The statistics are those of the whole batch (per-batch extremes included).
OBSERVED_BUDGET = 256 << 20


def collect_observers(model: ir.Model, value_names: Iterable[str], batches: Iterable[Batch],
                      histogram_bins: int | None = None, progress: Progress | None = None,
                      channels: dict[str, ChannelStats] | None = None) -> dict[str, TensorObserver]:
    """One observer per named value, fed every batch. Memory: one run's outputs (a piece of a batch, within
    OBSERVED_BUDGET) plus fixed-size summaries.
    `channels`: per-channel statistics (for smoothing) to feed too, for some of the named values.

    Without histograms only each tensor's extremes are needed: ORT reduces them in the graph (multi-threaded,
    three scalars per tensor come back instead of the whole activation)."""
    names = list(dict.fromkeys(value_names))
    channels = channels or {}
    graph_inputs = {v.name for v in model.graph.inputs}
    fetched = [n for n in names if n not in graph_inputs]
    observers = {n: TensorObserver(histogram_bins) for n in names}
    reduce_in_graph = histogram_bins is None and not channels
    # Nothing computed to observe (weight-only plans, or only graph inputs): no session, the data still streams.
    exposed = _exposed(model, fetched, reduce_in_graph) if fetched else None
    seen, cut = 0, SampleRuns(OBSERVED_BUDGET)
    for batch in batches:
        if exposed is not None and reduce_in_graph:
            exposed, outputs = _run(exposed, batch, observers, histogram_bins)
            _observe_reduced(outputs, exposed.names, observers)
        elif exposed is not None:
            exposed = _observe_in_pieces(exposed, batch, cut, (observers, channels, histogram_bins))
        for name in names:
            if name in graph_inputs:
                _checked(name, observers[name].observe, batch[name])
                if name in channels:
                    _checked(name, channels[name].observe, batch[name])
        seen += 1
        if progress is not None:
            progress(samples_in(batch))
    in_bodies = exposed.in_bodies if exposed is not None else set()
    if not seen or any(o.empty for n, o in observers.items() if n not in in_bodies):
        raise CalibrationDataError("calibration data holds no samples — pass at least one sample per input")
    # A body's value may stay empty: never computed on the data (a branch not taken, no iteration).
    return observers


def _exposed(model: ir.Model, names: list[str], reduce_in_graph: bool, ways: tuple[str, ...] = BODY_WAYS) -> Exposed:
    """The exposing session, the bodies' values observed the first of `ways` that ORT builds (the last one's
    failure is raised)."""
    for way, after in zip(ways, ways[1:]):
        try:
            return Exposed(model, names, reduce_in_graph, way)
        except ORT_ERRORS as e:
            logger.warning("calibration: ONNX Runtime refuses the bodies' values %s (%s); trying %s", way,
                           ort_reason(e), after)
    return Exposed(model, names, reduce_in_graph, ways[-1])


def _run(exposed: Exposed, batch: Batch, observers: dict[str, TensorObserver],
         histogram_bins: int | None) -> tuple[Exposed, list[np.ndarray]]:
    """The batch's exposed values. Where ORT rejects the model with the bodies' values threaded out one way (a Scan
    or Loop whose iterations give flattened values of different sizes), the next way runs the batch again; with
    none left, the bodies' observers are emptied (their nodes go dynamic). A batch ORT rejects all the same is the
    data's fault."""
    try:
        return exposed, exposed.run(batch)
    except CalibrationDataError as e:
        ways = BODY_WAYS[BODY_WAYS.index(exposed.way) + 1:]
        if not exposed.threaded or not ways:
            raise
        logger.warning("calibration: ONNX Runtime rejects the bodies' values %s (%s); trying %s", exposed.way, e,
                       ways[0])
        if ways[0] == "none":
            for name in exposed.in_bodies:
                observers[name] = TensorObserver(histogram_bins)
        return _run(_exposed(exposed.model, exposed.requested, exposed.reduced, ways), batch, observers,
                    histogram_bins)


def _observe_in_pieces(exposed: Exposed, batch: Batch, cut: SampleRuns, sinks: tuple) -> Exposed:
    """One batch's whole values into their observers, a piece of samples a run (cut: within OBSERVED_BUDGET); each
    observer takes the batch's extremes once, as for a batch run whole. Returns the session (_run may replace it)."""
    observers, channels, histogram_bins = sinks
    extremes: dict[str, list] = {}

    def run(part: Batch) -> list[np.ndarray]:
        nonlocal exposed
        exposed, outputs = _run(exposed, part, observers, histogram_bins)
        return outputs

    runs = cut(batch, run, lambda outputs: sum(o.nbytes for o in outputs)) if exposed.takes_any_batch(batch) \
        else [run(batch)]
    for outputs in runs:
        _observe_part(outputs, exposed.names, extremes, observers, channels)
        del outputs  # before the next piece's are made
    for name, (lo, hi, size, observer) in extremes.items():
        if observers[name] is observer:  # not emptied since (a body's value, when its way out failed: _run)
            _checked(name, observer.observe_extremes, lo, hi, size)
    return exposed


def _observe_part(outputs: list[np.ndarray], names: list[str], extremes: dict[str, list],
                  observers: dict[str, TensorObserver], channels: dict[str, ChannelStats]) -> None:
    """A piece of a batch: its values into the histograms and channel statistics, its extremes into `extremes`."""
    for name, values in zip(names, outputs):
        if not values.size:
            continue
        lo, hi = _checked(name, observers[name].add_to_histogram, values)
        if name in channels:
            _checked(name, channels[name].observe, values)
        seen = extremes.get(name)
        if seen is None or seen[3] is not observers[name]:  # a first piece, or the observer emptied since
            seen = extremes[name] = [lo, hi, 0, observers[name]]
        seen[0], seen[1], seen[2] = min(seen[0], lo), max(seen[1], hi), seen[2] + int(values.size)


def _observe_reduced(outputs: list[np.ndarray], names: list[str], observers: dict[str, TensorObserver]) -> None:
    """One batch's extremes, reduced in the graph (three arrays a value: min, max, size), into their observers. A
    body's value comes as a bag (calibration.bodies): several executions' extremes; empty where it did not run."""
    for i, name in enumerate(names):
        lo, hi, size = outputs[3 * i:3 * i + 3]
        count = int(np.sum(size))
        if count:
            _checked(name, observers[name].observe_extremes, float(np.min(lo)), float(np.max(hi)), count)


def _checked(name: str, observe: Callable, *args):
    """observe(*args), its result returned; a ValueError (not finite) is the data's, in one line."""
    try:
        return observe(*args)
    except ValueError:
        raise CalibrationDataError(
            f"the model computes NaN or inf for '{name}' on a calibration batch — check those inputs") from None


