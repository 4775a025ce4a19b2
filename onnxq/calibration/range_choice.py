"""Activation ranges clipped where what reads them saturates (calibration.elementwise finds the per-element chain
that reads a tensor before the next product; numerics.saturation where that chain stops telling values apart, read
on a grid of 8192 bins over the calibration method's window — any method's, with or without histograms). The
window is only ever narrowed, and only by values the reader maps to one output, so the model computes the same
function of every value it still tells apart, on a finer step."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnxq.calibration.elementwise import elementwise_reader
from onnxq.io.sessions import ORT_ERRORS
from onnxq.numerics.saturation import saturation_bounds

__all__ = ["RangeChoice", "saturated_ranges", "GRID_BINS"]

# Bins of the grid the reader is read on: the clip lands within 1/8192 of the window of the saturation point.
GRID_BINS = 8192


@dataclasses.dataclass(frozen=True)
class RangeChoice:
    name: str
    before: tuple[float, float]
    after: tuple[float, float]
    reader: tuple[str, ...]  # the reader's op types


def saturated_ranges(model: ir.Model, ranges: dict[str, tuple[float, float]]) -> list[RangeChoice]:
    """The ranges that narrow: main-graph float32 activations whose reader saturates inside the window the
    calibration method chose."""
    values = {v.name: v for n in model.graph for v in n.outputs} | {v.name: v for v in model.graph.inputs}
    opsets = dict(model.opset_imports)
    choices = []
    for name, before in ranges.items():
        value = values.get(name)
        if value is None or value.dtype not in (None, ir.DataType.FLOAT) or not before[0] < before[1]:
            continue
        reader = elementwise_reader(model.graph, value, set(ranges))
        if not reader.nonlinear:
            continue
        edges = np.linspace(float(before[0]), float(before[1]), GRID_BINS + 1)
        try:
            outputs = reader.function(opsets)(((edges[:-1] + edges[1:]) / 2).astype(np.float32))
        except ORT_ERRORS:  # a type the graph left unnamed was not float32 after all: the method's window stays
            continue
        lo, hi = saturation_bounds(edges, outputs)
        after = (max(float(before[0]), lo), min(float(before[1]), hi))
        if after != tuple(map(float, before)) and after[0] < after[1]:
            choices.append(RangeChoice(name, tuple(map(float, before)), after,
                                       tuple(n.op_type for n in reader.nodes)))
    return choices
