"""SmoothQuant on the float graph: per group of linear layers reading one activation X, X / s and s · W.

The division by s is folded into whatever produces X when something can absorb it exactly — a LayerNormalization
or RMSNorm scale (and bias), the γ Mul of a decomposed RMSNorm (Pow → ReduceMean → Add → Sqrt → Div → Mul by γ), a
constant Add's bias, the output columns of a MatMul/Gemm with a constant weight, through either operand of an
elementwise product of two activations (SwiGLU's SiLU(gate) · up) — and only where nothing can, an inserted Mul.
A producer is changed only when X is its sole (value-dependent) consumer path: other readers must not see X / s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.config import QScheme
from onnxq.irquery import attribute
from onnxq.passes.builder import GraphBuilder
from onnxq.passes.contract import KeepsOutputNames

__all__ = ["SmoothGroup", "SmoothPass", "weight_rows"]

_NORMS = {("", "LayerNormalization"), ("", "RMSNormalization"), ("com.microsoft", "SimplifiedLayerNormalization"),
          ("com.microsoft", "SkipLayerNormalization"), ("com.microsoft", "SkipSimplifiedLayerNormalization")}


@dataclasses.dataclass(frozen=True, eq=False)
class SmoothGroup:
    activation: ir.Value
    nodes: tuple[ir.Node, ...]  # MatMul / Gemm (transA = 0) reading `activation` as input 0, constant weight
    scales: np.ndarray  # s [K], float32


def weight_rows(node: ir.Node) -> np.ndarray:
    """The node's constant weight as [K, N] (a transB Gemm's weight transposed)."""
    weight = ir.convenience.get_const_tensor(node.inputs[1]).numpy()
    return weight.T if node.op_type == "Gemm" and attribute(node, "transB") else weight


@dataclasses.dataclass
class SmoothResult(ir.passes.PassResult):
    absorbed: dict[str, str] = dataclasses.field(default_factory=dict)  # activation → what took 1 / s


class SmoothPass(KeepsOutputNames):
    """Applies the groups. requires (besides KeepsOutputNames'): every group's activation and nodes in the main
    graph. ensures: KeepsOutputNames'. The result says what absorbed each activation's 1 / s (for the report)."""

    def __init__(self, groups: Sequence[SmoothGroup]) -> None:
        super().__init__()
        self.groups = groups

    def requires(self, model: ir.Model) -> None:
        super().requires(model)
        outside = [n.name for g in self.groups for n in g.nodes if n.graph is not model.graph]
        if outside:
            raise ir.passes.PreconditionError(f"SmoothPass: nodes not in the main graph: {outside}")

    def call(self, model: ir.Model) -> SmoothResult:
        absorbed: dict[str, str] = {}
        builder = GraphBuilder(model.graph, QScheme())
        for group in self.groups:
            name = group.activation.name or ""
            s = group.scales.astype(np.float32)
            inv_s = (np.float32(1) / s).astype(np.float32)
            for node in group.nodes:
                _scale_weight_rows(builder, node, s)
            taker = _divide_at_producer(builder, group.activation, inv_s, set(group.nodes))
            if taker is None:
                _insert_mul(builder, group, inv_s)
                taker = "inserted Mul"
            absorbed[name] = taker
        RemoveUnusedNodesPass()(model)
        model.graph.sort()
        return SmoothResult(model, modified=bool(self.groups), absorbed=absorbed)


def _scale_weight_rows(builder: GraphBuilder, node: ir.Node, s: np.ndarray) -> None:
    value = node.inputs[1]
    weight = ir.convenience.get_const_tensor(value).numpy().astype(np.float32)
    transposed = node.op_type == "Gemm" and attribute(node, "transB")
    scaled = weight * (s[None, :] if transposed else s[:, None])
    node.replace_input_with(1, builder.initializer(f"{value.name or 'weight'}_smoothed", scaled))


def _only_feeds(value: ir.Value, readers: set[ir.Node]) -> bool:
    """Whether every value-dependent reader of `value` is in `readers` (Shape reads no values)."""
    if value.is_graph_output() or value.is_graph_input():
        return False
    return all(use.node in readers or use.node.op_type == "Shape" for use in value.uses())


def _channel_constant(value: ir.Value | None, channels: int) -> np.ndarray | None:
    """A constant that broadcasts along the last axis only (scalar, [K], [1, …, K]), as float32; else None."""
    if value is None or value.is_graph_input():
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None or tensor.dtype != ir.DataType.FLOAT:
        return None
    array = tensor.numpy()
    if array.size == 1:
        return np.full(channels, array.reshape(()), np.float32)
    if array.shape[-1] == channels and array.size == channels:
        return array.reshape(channels).astype(np.float32)
    return None


def _replace_constant(builder: GraphBuilder, node: ir.Node, index: int, array: np.ndarray) -> None:
    base = node.inputs[index].name or "constant"
    node.replace_input_with(index, builder.initializer(f"{base}_smoothed", array.astype(np.float32)))


def _divide_at_producer(builder: GraphBuilder, value: ir.Value, inv_s: np.ndarray,
                        readers: set[ir.Node]) -> str | None:
    """Make `value` come out multiplied by inv_s by changing its producer; what took it, or None (nothing changed)."""
    node = value.producer()
    if node is None or not _only_feeds(value, readers) or node.outputs[0] is not value:
        return None
    op = (node.domain if node.domain != "ai.onnx" else "", node.op_type)
    absorb = _ABSORBERS.get("norm" if op in _NORMS else op)
    return None if absorb is None else absorb(builder, node, value, inv_s)


def _absorb_in_norm(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray) -> str | None:
    """A normalization's scale (and shift) divided by s."""
    # Only the normalized output may be read (SkipLayerNormalization's other outputs are not rescaled).
    if any(out.uses() or out.is_graph_output() for out in node.outputs[1:]):
        return None
    if attribute(node, "axis", -1) not in (-1, len(value.shape) - 1 if value.shape is not None else -1):
        return None
    first = 2 if node.op_type.startswith("Skip") else 1  # Skip*: inputs (x, skip, gamma, beta, bias)
    params = [i for i in (first, first + 1) if i < len(node.inputs) and node.inputs[i] is not None]
    arrays = [_channel_constant(node.inputs[i], inv_s.size) for i in params]
    if any(a is None for a in arrays):
        return None
    for i, array in zip(params, arrays):
        _replace_constant(builder, node, i, array * inv_s)
    return f"{node.op_type} {node.name} scale"


def _absorb_in_mul(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray) -> str | None:
    """A Mul's per-channel constant divided by s; for a product of two activations, either operand's producer."""
    for i in (1, 0):
        constant = _channel_constant(node.inputs[i], inv_s.size)
        if constant is not None:
            _replace_constant(builder, node, i, constant * inv_s)
            return f"Mul {node.name} constant"
    for i in (1, 0):
        taker = _divide_at_producer(builder, node.inputs[i], inv_s, {node})
        if taker is not None:
            return taker
    return None


def _absorb_in_add(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray) -> str | None:
    """A bias Add: its constant divided by s, and its other operand's producer too."""
    for i in (1, 0):
        constant = _channel_constant(node.inputs[i], inv_s.size)
        if constant is None:
            continue
        taker = _divide_at_producer(builder, node.inputs[1 - i], inv_s, {node})
        if taker is None:
            return None
        _replace_constant(builder, node, i, constant * inv_s)
        return f"{taker} and Add {node.name} bias"
    return None


def _absorb_in_product(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray) -> str | None:
    """A MatMul / Gemm on a constant weight: its output columns (and bias) divided by s."""
    if len(node.inputs) < 2:
        return None
    k = inv_s.size
    weight = ir.convenience.get_const_tensor(node.inputs[1]) if not node.inputs[1].is_graph_input() else None
    if weight is None or weight.dtype != ir.DataType.FLOAT or len(weight.shape) != 2:
        return None
    transposed = node.op_type == "Gemm" and attribute(node, "transB")
    array = weight.numpy().astype(np.float32)
    if (array.shape[0] if transposed else array.shape[1]) != k:
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    bias_array = None if bias is None else _channel_constant(bias, k)
    if bias is not None and (bias_array is None or attribute(node, "beta", 1.0) == 0.0):
        return None
    _replace_constant(builder, node, 1, array * (inv_s[:, None] if transposed else inv_s[None, :]))
    if bias_array is not None:
        _replace_constant(builder, node, 2, bias_array * inv_s)
    return f"{node.op_type} {node.name} output columns"


# What can take the division by s, by the producer's (domain, op type); "norm": every op of _NORMS.
_ABSORBERS = {"norm": _absorb_in_norm, ("", "Mul"): _absorb_in_mul, ("", "Add"): _absorb_in_add,
              ("", "MatMul"): _absorb_in_product, ("", "Gemm"): _absorb_in_product}


def _insert_mul(builder: GraphBuilder, group: SmoothGroup, inv_s: np.ndarray) -> None:
    x = group.activation
    base = f"{x.name or 'activation'}_smooth"
    factor = builder.initializer(f"{base}_scale", inv_s)
    mul = builder.node("Mul", [x, factor], f"{base}_Mul", group.nodes[0])
    mul.outputs[0].type, mul.outputs[0].shape = x.type, x.shape
    for node in group.nodes:
        node.replace_input_with(0, mul.outputs[0])
