"""Each twin pair's local error summed in the sensitivity's switch model itself: Σ float² and Σ (quantized − float)²
as two scalar outputs per pair, instead of fetching both twins' values to sum them here (SmolLM2's 300 pairs are
150 MB a window: what held its sensitivity over 1.5× of the model's size)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxq.passes.graph.builder import GraphBuilder

__all__ = ["LocalSums", "add_local_sums"]


def add_local_sums(graph: ir.Graph, pairs: Sequence[tuple[ir.Value, ir.Value] | None]) -> list[tuple[str, str]]:
    """For each (quantized, float) pair of the graph, Σ float² and Σ (quantized − float)² made graph outputs (in
    float32, or float64 for a float64 pair: numpy's sums of the values took the same precision); their names, or
    ("", "") where no pair is given. The sums are put right after the quantized twin's producer: at the graph's end,
    every pair would live through the whole run (a stable sort keeps them where they are)."""
    builder = GraphBuilder(graph)
    names = []
    for pair in pairs:
        if pair is None:
            names.append(("", ""))
            continue
        nodes: list[ir.Node] = []
        quantized, floating = (_widened(builder, value, nodes) for value in pair)
        base = f"{pair[1].name}_onnxq_local"
        difference = _made(builder, "Sub", [quantized, floating], f"{base}_difference", nodes)
        signal = _made(builder, "ReduceSumSquare", [floating], f"{base}_signal", nodes, keepdims=0)
        noise = _made(builder, "ReduceSumSquare", [difference], f"{base}_noise", nodes, keepdims=0)
        anchor = pair[0].producer()
        if anchor is not None and anchor.graph is graph:
            graph.insert_after(anchor, nodes)
        else:
            graph.extend(nodes)
        graph.outputs.extend((signal, noise))
        names.append((signal.name, noise.name))
    return names


def _widened(builder: GraphBuilder, value: ir.Value, nodes: list[ir.Node]) -> ir.Value:
    """The value in float32 (float64 kept): a float16 pair's sum of squares would overflow at 65504."""
    if value.dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE):
        return value
    return _made(builder, "Cast", [value], f"{value.name}_onnxq_float32", nodes, to=ir.DataType.FLOAT.value)


def _made(builder: GraphBuilder, op_type: str, inputs: list[ir.Value], base: str, nodes: list[ir.Node],
          **attributes) -> ir.Value:
    """A node's output; the node joins `nodes`, to be put in the graph by the caller."""
    node = builder.node(op_type, inputs, base, None, attributes=attributes)
    nodes.append(node)
    node.outputs[0].dtype = ir.DataType.DOUBLE if inputs[0].dtype == ir.DataType.DOUBLE else ir.DataType.FLOAT
    return node.outputs[0]


class LocalSums:
    """One pair's sums over the batches, in float64; its SQNR in dB as verify.metrics measures an output's."""

    def __init__(self) -> None:
        self.signal = 0.0
        self.noise = 0.0

    def add(self, signal: np.ndarray, noise: np.ndarray) -> None:
        self.signal += float(signal)
        self.noise += float(noise)

    @property
    def sqnr_db(self) -> float:
        if self.noise == 0:
            return math.inf
        ratio = max(self.signal, 1e-300) / self.noise  # NaN stays NaN; an infinite noise is −inf dB
        return -math.inf if ratio == 0 else 10 * math.log10(ratio)
