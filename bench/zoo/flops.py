"""Multiply-adds of a model's products, per node, from ORT's profile of one run (the shapes every node saw, inside
If / Loop / Scan bodies too): what share of a model's compute a quantizer covered."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

__all__ = ["product_macs"]


def product_macs(model: Path, feed: dict[str, np.ndarray]) -> dict[str, int]:
    """{node name: multiply-adds} for every MatMul, Gemm, Conv, ConvTranspose and LSTM that ran on the feed."""
    constants = _constant_shapes(onnx.load(str(model)).graph)
    with tempfile.TemporaryDirectory() as scratch:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the nodes as written
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(scratch) / "profile")
        options.log_severity_level = 3
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    macs = {}
    for event in events:
        args, name = event.get("args", {}), event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node, op = name[: -len("_kernel_time")], args.get("op_name")
        run_shapes = iter(next(iter(s.values())) for s in args.get("input_type_shape", []))
        # ORT lists the inputs that are not initializers; an initializer's shape comes from the file
        shapes = [constant if constant is not None else next(run_shapes, None) for constant in constants.get(node, [])]
        out = [next(iter(s.values())) for s in args.get("output_type_shape", [])]
        value = _macs(op, shapes, out)
        if value:
            macs[node] = macs.get(node, 0) + value  # a body's node runs once per iteration
    return macs


def _macs(op: str, inputs: list, outputs: list) -> int:
    """From the shapes: output elements × K (MatMul, Gemm without transA), × the weight's [C/group, *kernel] (Conv);
    input elements × [M/group, *kernel] (ConvTranspose); steps × batch × D·4H × (I + H) (LSTM)."""
    size = lambda shape: int(np.prod(shape)) if shape else 0  # noqa: E731
    if op in ("MatMul", "Gemm") and len(inputs) > 1:
        return size(outputs[0]) * inputs[0][-1]
    if op == "Conv" and len(inputs) > 1:
        return size(outputs[0]) * size(inputs[1][1:])
    if op == "ConvTranspose" and len(inputs) > 1:
        return size(inputs[0]) * size(inputs[1][1:])
    if op == "LSTM" and outputs and len(outputs[0]) == 4:  # Y [T, D, N, H] from X [T, N, I]
        steps, directions, batch, hidden = outputs[0]
        return steps * batch * directions * 4 * hidden * (inputs[0][2] + hidden)
    return 0


def _constant_shapes(graph: onnx.GraphProto, outer: dict | None = None) -> dict[str, list]:
    """Node name → its inputs' shapes where an input is an initializer (None where ORT reports it), every graph."""
    initializers = dict(outer or {}) | {i.name: list(i.dims) for i in graph.initializer}
    initializers |= {n.output[0]: list(a.t.dims) for n in graph.node if n.op_type == "Constant"
                     for a in n.attribute if a.name == "value"}  # ORT makes them initializers at load
    found = {}
    for node in graph.node:
        found[node.name] = [initializers.get(name) if name else None for name in node.input]
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found |= _constant_shapes(attr.g, initializers)
    return found
