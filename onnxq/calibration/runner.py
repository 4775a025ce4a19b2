"""Streamed calibration: one ORT session over a copy of the graph exposing the tensors to observe."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.calibration.batching import SampleRuns, samples_in
from onnxq.calibration.bodies import BodyValues
from onnxq.calibration.specs import Batch, sample_axis
from onnxq.errors import CalibrationDataError, ort_reason
from onnxq.io import OrtModel
from onnxq.io.sessions import ORT_ERRORS, session_options
from onnxq.irquery import model_names
from onnxq.numerics import TensorObserver
from onnxq.targets.providers import CPU_PROVIDER

if TYPE_CHECKING:  # channels.py runs sessions through this module
    from onnxq.calibration.channels import ChannelStats

__all__ = ["collect_observers", "Exposed", "BODY_WAYS"]

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]

# How bodies' values leave their bodies, best first (calibration.bodies): a Loop's bags stacked per iteration
# (linear cost), carried in an accumulator (iterations of any size), or not at all (their nodes go dynamic).
BODY_WAYS = ("stacked", "carried", "none")

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


class Exposed:
    """A session whose outputs are the named values (or their min, max and size); the model's own outputs and
    whatever only they need are dropped. Values of If / Loop / Scan bodies come out as bags (calibration.bodies);
    `in_bodies` names them."""

    def __init__(self, model: ir.Model, names: list[str], reduce_in_graph: bool, way: str = BODY_WAYS[0]) -> None:
        self.model, self.requested, self.reduced, self.way = model, names, reduce_in_graph, way
        exposed = model.clone()
        taken = model_names(exposed)
        threads = BodyValues(exposed, taken, loops_stack=way == "stacked")
        values = {v.name: v for node in exposed.graph.all_nodes() for v in node.outputs if v.name in names}
        values.update({v.name: v for graph in threads.owner_graphs() for v in graph.inputs if v.name in names})
        missing = [n for n in names if n not in values]
        if missing:
            raise ValueError(f"values not produced by any node: {missing[:3]}")
        exposed.graph.outputs.clear()
        self.in_bodies, self.names = set(), []  # names: those exposed, in output order
        for n in names:
            body = threads.graph_of(values[n])
            if body is not None:
                self.in_bodies.add(n)
                if way == "none" or not threads.observable(body):  # its observer stays empty: the node goes dynamic
                    continue
                exposed.graph.outputs.extend(threads.bags(values[n], body, reduce_in_graph))
            elif reduce_in_graph:
                exposed.graph.outputs.extend(threads.extremes(values[n], exposed.graph))
            else:
                exposed.graph.outputs.append(values[n])
            self.names.append(n)
        RemoveUnusedNodesPass()(exposed)
        self.output_names = [v.name for v in exposed.graph.outputs]
        # Optimizations off: fused kernels would hide the tensors we observe. Nothing left to expose (every value
        # in a body, and the bodies' values dropped): no session.
        self.session = OrtModel(exposed).session(session_options(optimize=False), [CPU_PROVIDER]) \
            if self.output_names else None

    def takes_any_batch(self, batch: Batch) -> bool:
        """Whether the session takes any number of samples: no input it reads has a fixed size over 1 on its
        samples axis, and every input of the batch has that axis (a scalar fed as it is cannot be cut)."""
        for name, array in batch.items():
            axis = sample_axis(batch, name)
            if axis is not None and np.ndim(array) <= axis:
                return False
        for spec in self.session.get_inputs() if self.session is not None else ():
            axis = sample_axis(batch, spec.name) if spec.name in batch else None
            if axis is not None and len(spec.shape) > axis and isinstance(spec.shape[axis], int) \
                    and spec.shape[axis] > 1:
                return False
        return self.session is not None

    @property
    def threaded(self) -> bool:
        """Whether values of bodies are threaded out (calibration.bodies)."""
        return any(n in self.in_bodies for n in self.names)

    def run(self, batch: Batch) -> list[np.ndarray]:
        if self.session is None:
            return []
        try:
            return self.session.run(self.output_names, batch)
        except ORT_ERRORS as e:
            raise CalibrationDataError(f"ONNX Runtime rejected a calibration batch: {ort_reason(e)} — check that the "
                                       "data's values are ones the float model runs on (token ids within its "
                                       "vocabulary, the shapes it takes)") from None

