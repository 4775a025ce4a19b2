"""Preconditions checked before anything is planned. Checks only; nothing is converted (an old opset is converted
before these checks, by passes.preparation.upgrade)."""

from __future__ import annotations

import functools

import onnx
import onnx_ir as ir
import onnxruntime as ort

from onnxq.errors import ModelLoadError, UnsupportedModelError, one_line, ort_reason
from onnxq.io.custom_ops import libraries_loaded
from onnxq.io.model import MAX_IR_VERSION
from onnxq.passes.graph.op_signatures import defined
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["MIN_OPSET", "check_model", "QUANTIZED_OPS", "onnx_opset"]

# Per-axis QuantizeLinear/DequantizeLinear arrived in opset 13.
MIN_OPSET = 13
# Domains onnxruntime implements; an op of any other domain needs a custom-op library onnxq does not load.
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training")
# Operators that mean the model is quantized already: quantizing it again would stack errors.
QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul", "ConvInteger",
    "QLinearConv", "QGemm", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits", "GatherBlockQuantized",
    "QAttention", "QLinearAdd", "QLinearMul", "DynamicQuantizeLSTM", "MatMulBnb4", "MatMulFpQ4",
})


def check_model(model: ir.Model) -> None:
    """The model's opsets, IR version, operators and wiring are ones onnxq and onnxruntime can work with."""
    _check_versions(model)
    _check_inputs(model.graph)
    _check_wiring(model.graph)
    _check_operators(model)


def _check_inputs(graph: ir.Graph) -> None:
    """An input declared with a 0-sized dimension can hold no data: nothing could calibrate or verify it."""
    for value in graph.inputs:
        if value.name in graph.initializers or value.shape is None:
            continue
        if any(isinstance(d, int) and d == 0 for d in value.shape):
            dims = [d if isinstance(d, int) else str(d) for d in value.shape]
            raise UnsupportedModelError(f"model input {one_line(repr(value.name))} is declared with shape {dims}: a "
                                        "0-sized dimension holds no data — re-export the model with its real shape")


def onnx_opset(model: ir.Model) -> int | None:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx"))


def _check_versions(model: ir.Model) -> None:
    if model.ir_version is not None and model.ir_version > onnx.IR_VERSION:
        raise UnsupportedModelError(
            f"the model's ir_version {model.ir_version} is newer than onnx {onnx.__version__} knows "
            f"({onnx.IR_VERSION}) — upgrade onnx and onnxruntime, or re-export with an older onnx")
    opset = onnx_opset(model)
    if opset is None:
        raise UnsupportedModelError("the model imports no ONNX opset — re-export it with a standard opset (>= 13)")
    if opset < MIN_OPSET:
        raise UnsupportedModelError(
            f"the model uses opset {opset}; onnxq needs opset >= {MIN_OPSET} for per-channel QuantizeLinear — "
            f"convert it with onnx.version_converter.convert_version(model, {MIN_OPSET})")
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise UnsupportedModelError(
            f"the model uses opset {opset}, newer than this onnx release knows ({newest}) — upgrade onnx and "
            "onnxruntime, or export with an older opset")
    refusal = _onnxruntime_refusal(opset)
    if refusal is not None:  # onnx knows opsets before onnxruntime runs them (onnx 1.23: 28, onnxruntime 1.31: 26)
        raise UnsupportedModelError(
            f"the model uses opset {opset}, which onnxruntime {ort.__version__} does not run ({refusal}) — export "
            "it with an opset onnxruntime runs, or upgrade onnxruntime")


@functools.lru_cache(maxsize=None)
def _onnxruntime_refusal(opset: int) -> str | None:
    """Why onnxruntime refuses any model stamped with this ONNX opset (tried on one Identity), or None. Its own
    refusal of the model would come first as an IR version it does not know (opset 28 needs IR 14)."""
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "opset",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    probe = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    probe.ir_version = min(probe.ir_version, MAX_IR_VERSION)
    try:
        ort.InferenceSession(probe.SerializeToString(), providers=[CPU_PROVIDER])
    except Exception as e:  # noqa: BLE001 — onnxruntime's reason, whatever its type
        return ort_reason(e)
    return None


def _check_wiring(graph: ir.Graph) -> None:
    """Every value the main graph reads or outputs is a graph input, an initializer or a node's output. (Bodies of
    If / Loop may read the outer graph's values; they are left to onnxruntime.)"""
    produced_later = {v.name for node in graph for v in node.outputs}
    seen: set[ir.Node] = set()
    for node in graph:
        for value in node.inputs:
            producer = value.producer() if value is not None else None
            if producer is not None and producer.graph is graph and producer not in seen:
                raise ModelLoadError(f"node {node.name or node.op_type!r} ({node.op_type}) reads {value.name!r} "
                                     "before its producer runs (a cycle, or nodes out of topological order) — "
                                     "re-export the model")
        seen.add(node)

    def dangling(value: ir.Value | None) -> bool:
        return (value is not None and value.producer() is None and not value.is_graph_input()
                and not value.is_initializer() and value.const_value is None)

    for node in graph:
        for value in node.inputs:
            if dangling(value) and value.name:
                who = f"node {node.name or node.op_type!r} ({node.op_type})"
                if value.name in produced_later:
                    raise ModelLoadError(f"{who} reads {value.name!r} before any node produces it (a cycle, or nodes "
                                         "out of topological order) — re-export the model")
                raise ModelLoadError(f"{who} reads {value.name!r}, which no node, graph input or initializer "
                                     "produces — re-export the model with all its weights")
    for value in graph.outputs:
        if dangling(value):
            raise ModelLoadError(f"graph output {value.name!r} is produced by no node, input or initializer — "
                                 "re-export the model")


def _check_operators(model: ir.Model) -> None:
    opset = onnx_opset(model)
    functions = set(model.functions)
    quantized: dict[str, int] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if (node.domain, node.op_type, node.overload) in functions:
            continue
        if node.domain not in KNOWN_DOMAINS and not libraries_loaded():  # with them, ORT says what it lacks
            raise UnsupportedModelError(
                f"node {node.name or node.op_type!r} is {node.domain}::{node.op_type}, a custom operator "
                "onnxruntime runs only with its library — pass it with --custom-ops LIBRARY (onnxruntime-extensions' "
                "operators: --custom-ops onnxruntime_extensions), or export without it")
        if node.op_type in QUANTIZED_OPS and node.domain in ("", "ai.onnx", "com.microsoft"):
            quantized[node.op_type] = quantized.get(node.op_type, 0) + 1
            continue
        if node.domain in ("", "ai.onnx") and not defined("", node.op_type, opset):
            raise UnsupportedModelError(
                f"node {node.name or node.op_type!r} uses {node.op_type!r}, which is neither an ONNX operator at "
                f"opset {opset} nor one onnxruntime {ort.__version__} defines — fix the export")
    if quantized:
        ops = ", ".join(f"{n} {op}" for op, n in sorted(quantized.items()))
        raise UnsupportedModelError(f"the model is already quantized (it has {ops}) — pass the float model")
