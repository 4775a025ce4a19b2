"""Streamed calibration: one ORT session over a copy of the graph exposing the tensors to observe."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import onnx_ir as ir
import onnxruntime as ort
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.calibration.batching import samples_in
from onnxq.calibration.specs import Batch
from onnxq.errors import CalibrationDataError, whole_message
from onnxq.io import OrtModel
from onnxq.io.sessions import session_options
from onnxq.irquery import unique_name
from onnxq.numerics import TensorObserver

if TYPE_CHECKING:  # channels.py runs sessions through this module
    from onnxq.calibration.channels import ChannelStats

__all__ = ["collect_observers"]

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]


def collect_observers(model: ir.Model, value_names: Iterable[str], batches: Iterable[Batch],
                      histogram_bins: int | None = None, progress: Progress | None = None,
                      channels: dict[str, ChannelStats] | None = None) -> dict[str, TensorObserver]:
    """One observer per named value, fed every batch. Memory: one batch's outputs plus fixed-size summaries.
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
    session, output_names = session_exposing(model, fetched, reduce_in_graph) if fetched else (None, [])
    name = ""
    for batch in batches:
        try:
            outputs = session.run(output_names, batch) if session is not None else []
        except (ort.capi.onnxruntime_pybind11_state.InvalidArgument,
                ort.capi.onnxruntime_pybind11_state.Fail) as e:
            raise CalibrationDataError(f"ONNX Runtime rejected a calibration batch: {_ort_reason(e)}") from None
        try:
            if reduce_in_graph:
                for i, name in enumerate(fetched):
                    lo, hi, size = outputs[3 * i:3 * i + 3]
                    observers[name].observe_extremes(float(lo), float(hi), int(size))
            else:
                for name, array in zip(fetched, outputs):
                    observers[name].observe(array)
                    if name in channels:
                        channels[name].observe(array)
            for name in names:
                if name in graph_inputs:
                    observers[name].observe(batch[name])
                    if name in channels:
                        channels[name].observe(batch[name])
        except ValueError:
            raise CalibrationDataError(
                f"the model computes NaN or inf for '{name}' on a calibration batch — check those inputs") from None
        if progress is not None:
            progress(samples_in(batch))
    if any(o.empty for o in observers.values()):
        raise CalibrationDataError("calibration data holds no samples — pass at least one sample per input")
    return observers


def session_exposing(model: ir.Model, names: list[str],
                      reduce_in_graph: bool) -> tuple[ort.InferenceSession, list[str]]:
    """A session whose outputs are the named values (or their min, max and size); the model's own outputs and
    whatever only they need are dropped."""
    exposed = model.clone()
    values = {}
    for node in exposed.graph:
        for out in node.outputs:
            if out.name in names:
                values[out.name] = out
    missing = [n for n in names if n not in values]
    if missing:
        raise ValueError(f"values not produced by any node: {missing[:3]}")
    exposed.graph.outputs.clear()
    if reduce_in_graph:
        taken = {v.name for node in exposed.graph for v in node.outputs} | {v.name for v in exposed.graph.inputs}
        taken |= {node.name for node in exposed.graph}
        for n in names:
            for op in ("ReduceMin", "ReduceMax", "Size"):
                attributes = {} if op == "Size" else {"keepdims": 0}
                name = unique_name(f"{n}_onnxq_{op}", taken)
                node = ir.node(op, [values[n]], attributes, name=name,
                               outputs=[ir.Value(name=unique_name(f"{name}_output", taken))])
                exposed.graph.append(node)
                exposed.graph.outputs.append(node.outputs[0])
    else:
        exposed.graph.outputs.extend(values[n] for n in names)
    RemoveUnusedNodesPass()(exposed)
    # Optimizations off: fused kernels would hide the tensors we observe.
    session = OrtModel(exposed).session(session_options(optimize=False), ["CPUExecutionProvider"])
    return session, [v.name for v in exposed.graph.outputs]


def _ort_reason(error: Exception) -> str:
    return whole_message(error).removeprefix("[ONNXRuntimeError] : ")
