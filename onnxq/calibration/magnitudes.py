"""The largest magnitude each float value of a model reaches on some data: what float16 compute needs to know
(passes.float16.plan keeps float32 where a value goes past float16's range).

ORT reduces each value in the graph (|x| → its maximum, one scalar per value and batch), so the memory is one
batch's activations at a time, however many values are watched. A value that is NaN or infinite somewhere (a mask
of -inf) reads as infinite: float16 holds infinities, but such a value says the arithmetic around it is at the edge
of float32's range already, so it stays float32. An empty value reads as 0.
Each value's maximum is a collector (LargestMagnitude: observe / merge / state, numerics.collector.Collector), exact
and order-free: shards merge into the maximum of all the data bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import onnx_ir as ir

from onnxq.data.specs import Batch
from onnxq.io import OrtModel
from onnxq.io.sessions import session_options
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["LargestMagnitude", "largest_magnitudes", "collect_magnitudes"]


class LargestMagnitude:
    """max |x| of one value over the batches: 0 before any element, infinite once a NaN or infinity was seen."""

    def __init__(self) -> None:
        self.largest = 0.0

    def observe(self, batch: np.ndarray) -> None:
        """A batch of the value, or its max |x| reduced in the graph: a scalar is an array too."""
        batch = np.asarray(batch)
        if batch.size:
            self._fold(float(np.max(np.abs(batch))))

    def merge(self, other: LargestMagnitude) -> None:
        self._fold(other.largest)

    def _fold(self, value: float) -> None:
        self.largest = math.inf if not math.isfinite(value) else max(self.largest, value)

    def state(self) -> dict:
        return {"largest": self.largest.hex()}

    @classmethod
    def from_state(cls, state: dict) -> LargestMagnitude:
        collector = cls()
        collector.largest = float.fromhex(state["largest"])
        return collector


def largest_magnitudes(model: ir.Model, names: Iterable[str], batches: Iterable[Batch]) -> dict[str, float]:
    """max |x| over the batches for each named float value of the main graph (a clone of the model is run)."""
    return {n: c.largest for n, c in collect_magnitudes(model, names, batches).items()}


def collect_magnitudes(model: ir.Model, names: Iterable[str],
                       batches: Iterable[Batch]) -> dict[str, LargestMagnitude]:
    """Each named float value of the main graph's LargestMagnitude over the batches (values the main graph does
    not compute are left out): ORT reduces each to its max |x| in a clone of the model."""
    watched = model.clone()
    values = {v.name: v for node in watched.graph for v in node.outputs if v.name}
    names = [n for n in dict.fromkeys(names) if n in values]
    outputs = [_largest(watched.graph, values[n]) for n in names]
    watched.graph.outputs.extend(outputs)
    session = OrtModel(watched).session(session_options(optimize=False), [CPU_PROVIDER])
    wanted = [o.name for o in outputs]
    collectors = {n: LargestMagnitude() for n in names}
    for batch in batches:
        for name, found in zip(names, session.run(wanted, batch)):
            collectors[name].observe(found)
    return collectors


def _largest(graph: ir.Graph, value: ir.Value) -> ir.Value:
    """max |value| as a scalar: Abs, flattened, a 0 appended (an empty value reduces to it), ReduceMax."""
    base = f"{value.name}__onnxq"
    flat_shape = _constant(graph, f"{base}_flat_shape", np.array([-1], np.int64))
    zero = _constant(graph, f"{base}_zero", np.zeros(1, np.float32))
    magnitude = _node("Abs", [value], f"{base}_abs")
    flat = _node("Reshape", [magnitude.outputs[0], flat_shape], f"{base}_flat")
    padded = _node("Concat", [flat.outputs[0], zero], f"{base}_padded", {"axis": 0})
    largest = _node("ReduceMax", [padded.outputs[0]], f"{base}_largest", {"keepdims": 0})
    graph.insert_after(value.producer(), [magnitude, flat, padded, largest])
    out = largest.outputs[0]
    out.type, out.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape([])
    return out


def _node(op_type: str, inputs: list[ir.Value], name: str, attributes: dict | None = None) -> ir.Node:
    return ir.node(op_type, inputs, attributes or {}, outputs=[ir.Value(name=name)], name=name)


def _constant(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    graph.register_initializer(value)
    return value
