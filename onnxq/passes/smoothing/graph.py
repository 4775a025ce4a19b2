"""SmoothQuant on the float graph: per group of layers reading one activation X, X / s and s · W.

The layers are MatMul / Gemm (X's channels on its last axis) or Conv (on axis 1: activation equalisation across a
pair of layers). The division by s is folded into whatever produces X when something can absorb it exactly — a
LayerNormalization or RMSNorm scale (and bias), the γ Mul of a decomposed RMSNorm (Pow → ReduceMean → Add → Sqrt →
Div → Mul by γ), a constant Add's bias, the output columns of a MatMul/Gemm or the output channels of a Conv with a
constant weight, through either operand of an elementwise product of two activations (SwiGLU's SiLU(gate) · up), and
through what commutes with a positive per-channel factor (Relu, LeakyRelu, pooling) — and only where nothing can,
an inserted Mul for MatMul / Gemm. A Conv's activation is left unsmoothed there: the Mul's input would be quantized
with the very range smoothing meant to fix. A producer is changed only when X is its sole (value-dependent)
consumer path: other readers must not see X / s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.config import QScheme
from onnxq.io.memory import page_out
from onnxq.io.irquery import attribute
from onnxq.passes.graph.builder import GraphBuilder
from onnxq.passes.graph.contract import KeepsOutputNames
from onnxq.passes.smoothing.weights import reads_channels_last, scale_input_channels, scaled_pieces
from onnxq.passes.forms.tied_table import SCALED_FROM_KEY, ScaledFrom

__all__ = ["SmoothGroup", "SmoothPass", "StoredRows", "NOT_ABSORBED"]

# The normalizations over the last axis, and the inputs that scale (and shift) their normalized output: γ and β.
# SkipSimplifiedLayerNormalization's input 3 is a bias added before normalizing, not a shift; the genai builder
# writes SimplifiedLayerNormalization in the ONNX domain (ORT registers it there too).
_NORMS = {("", "LayerNormalization"): (1, 2), ("", "RMSNormalization"): (1,),
          ("", "SimplifiedLayerNormalization"): (1,), ("com.microsoft", "SimplifiedLayerNormalization"): (1,),
          ("com.microsoft", "SkipLayerNormalization"): (2, 3),
          ("com.microsoft", "SkipSimplifiedLayerNormalization"): (2,)}


# A scaled weight's rows a piece at a time (name, shape, pieces) to where it is stored: the tensor that holds it.
StoredRows = Callable[[str, tuple[int, ...], Iterable[np.ndarray]], ir.TensorProtocol]
# The float32 bytes of one piece of a scaled weight written away (stored_rows).
_PIECE_BYTES = 8 << 20

# What the report says of a Conv activation whose producers cannot take 1 / s.
NOT_ABSORBED = ("nothing: no producer takes 1 / s exactly (an inserted Mul would be quantized with the range left as "
                "it was; a weight-only model would pay it on every token)")


@dataclasses.dataclass(frozen=True, eq=False)
class SmoothGroup:
    activation: ir.Value
    # MatMul / Gemm (transA = 0), or Conv, reading `activation` as input 0 with a constant weight; all of one kind.
    nodes: tuple[ir.Node, ...]
    scales: np.ndarray  # s [K], float32


@dataclasses.dataclass(frozen=True)
class _Channels:
    """Where the smoothed channels of an activation lie: its last axis, or axis 1 of `rank` dimensions (Conv)."""

    count: int
    last: bool
    rank: int = 0


@dataclasses.dataclass
class SmoothResult(ir.passes.PassResult):
    # activation → what took 1 / s (NOT_ABSORBED: the group was left as it was)
    absorbed: dict[str, str] = dataclasses.field(default_factory=dict)


class SmoothPass(KeepsOutputNames):
    """Applies the groups. requires (besides KeepsOutputNames'): every group's activation and nodes in the main
    graph. ensures: KeepsOutputNames'. The result says what absorbed each activation's 1 / s (for the report)."""

    def __init__(self, groups: Sequence[SmoothGroup], insert_mul: bool = True,
                 stored_rows: StoredRows | None = None) -> None:
        """insert_mul False: a group no producer absorbs is left as it was (weight-only scaling, whose model would
        pay the Mul on every token for no integer kernel). stored_rows: where each scaled weight goes as it is
        made, a piece of rows at a time (the run's spill file: io.SpillFile.stored_rows); None keeps them in
        memory."""
        super().__init__()
        self.groups = groups
        self.insert_mul = insert_mul
        self.stored_rows = stored_rows

    def requires(self, model: ir.Model) -> None:
        super().requires(model)
        outside = [n.name for g in self.groups for n in g.nodes if n.graph is not model.graph]
        if outside:
            raise ir.passes.PreconditionError(f"SmoothPass: nodes not in the main graph: {outside}")

    def call(self, model: ir.Model) -> SmoothResult:
        absorbed: dict[str, str] = {}
        builder = GraphBuilder(model.graph, QScheme())
        for group in self.groups:
            s = group.scales.astype(np.float32)
            inv_s = (np.float32(1) / s).astype(np.float32)
            first = group.nodes[0]
            # The weight's rank from its tensor: a value made from a Constant node may carry no shape.
            channels = _Channels(s.size, reads_channels_last(first),
                                 len(ir.convenience.get_const_tensor(first.inputs[1]).shape))
            taker = _divide_at_producer(builder, group.activation, inv_s, set(group.nodes), channels)
            if taker is None and not (channels.last and self.insert_mul):
                absorbed[group.activation.name or ""] = NOT_ABSORBED
                continue
            if taker is None:
                _insert_mul(builder, group, inv_s)
                taker = "inserted Mul"
            for node in group.nodes:
                _scale_weight(builder, node, s, self.stored_rows)
            absorbed[group.activation.name or ""] = taker
        RemoveUnusedNodesPass()(model)
        model.graph.sort()
        return SmoothResult(model, modified=bool(self.groups), absorbed=absorbed)


def _scale_weight(builder: GraphBuilder, node: ir.Node, s: np.ndarray, stored_rows: StoredRows | None) -> None:
    value = node.inputs[1]
    source = ir.convenience.get_const_tensor(value)
    weight = source.numpy().astype(np.float32, copy=False)  # read, not written
    base = f"{value.name or 'weight'}_smoothed"
    if stored_rows is None:
        scaled = builder.initializer(base, scale_input_channels(node, weight, s))
    else:
        name = builder.unique(base)
        scaled = builder.tensor_initializer(name, stored_rows(name, weight.shape, _paging_out(
            scaled_pieces(node, weight, s, _PIECE_BYTES), source)))
    page_out(source)  # a memory-mapped weight's pages: read once, replaced by the scaled one
    # What it was scaled from, for a Gather of the same table to read its codes (passes.forms.tied_table).
    scaled.meta[SCALED_FROM_KEY] = ScaledFrom(source, np.asarray(s, dtype=np.float32).copy())
    node.replace_input_with(1, scaled)


def _paging_out(pieces: Iterator[np.ndarray], source: ir.TensorProtocol) -> Iterator[np.ndarray]:
    """The pieces, the source's memory-mapped pages dropped after each is made: a large weight's pages are not all
    resident at once."""
    for piece in pieces:
        page_out(source)
        yield piece


def _only_feeds(value: ir.Value, readers: set[ir.Node]) -> bool:
    """Whether every value-dependent reader of `value` is in `readers` (Shape reads no values)."""
    if value.is_graph_output() or value.is_graph_input():
        return False
    return all(use.node in readers or use.node.op_type == "Shape" for use in value.uses())


def _channel_constant(value: ir.Value | None, channels: _Channels) -> np.ndarray | None:
    """A constant that broadcasts along the channel axis only (scalar; [K] or [1, …, K] on the last axis; [K, 1, …]
    or [1, K, 1, …] on axis 1), as float32 [K]; else None."""
    if value is None or value.is_graph_input():
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None or tensor.dtype != ir.DataType.FLOAT:
        return None
    array = tensor.numpy()
    if array.size == 1:
        return np.full(channels.count, array.reshape(()), np.float32)
    shape = array.shape
    if not channels.last and len(shape) <= channels.rank:
        shape = (1,) * (channels.rank - len(shape)) + shape  # as broadcast against the activation
    along = shape[-1] if channels.last else (shape[1] if len(shape) > 1 else 0)
    return array.reshape(-1).astype(np.float32) if along == channels.count == array.size else None


def _replace_constant(builder: GraphBuilder, node: ir.Node, index: int, array: np.ndarray,
                      channels: _Channels) -> None:
    """Input `index` of the node replaced by a per-channel constant [K] (shaped [K, 1, …] for axis 1)."""
    base = node.inputs[index].name or "constant"
    shaped = array if channels.last else array.reshape(-1, *([1] * (channels.rank - 2)))
    node.replace_input_with(index, builder.initializer(f"{base}_smoothed", shaped.astype(np.float32)))


def _divide_at_producer(builder: GraphBuilder, value: ir.Value, inv_s: np.ndarray, readers: set[ir.Node],
                        channels: _Channels) -> str | None:
    """Make `value` come out multiplied by inv_s by changing its producer; what took it, or None (nothing changed)."""
    node = value.producer()
    if node is None or not _only_feeds(value, readers) or node.outputs[0] is not value:
        return None
    op = (node.domain if node.domain != "ai.onnx" else "", node.op_type)
    absorb = _ABSORBERS.get("norm" if op in _NORMS else op)
    return None if absorb is None else absorb(builder, node, value, inv_s, channels)


def _absorb_in_norm(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray,
                    channels: _Channels) -> str | None:
    """A normalization's scale (and shift) divided by s (it normalizes the last axis). Its other outputs (mean,
    inverse deviation, a Skip*'s residual sum) do not depend on them and may have readers of their own."""
    if not channels.last:
        return None
    if attribute(node, "axis", -1) not in (-1, len(value.shape) - 1 if value.shape is not None else -1):
        return None
    slots = _NORMS[(node.domain if node.domain != "ai.onnx" else "", node.op_type)]
    params = [i for i in slots if i < len(node.inputs) and node.inputs[i] is not None]
    arrays = [_channel_constant(node.inputs[i], channels) for i in params]
    if any(a is None for a in arrays):
        return None
    for i, array in zip(params, arrays):
        _replace_constant(builder, node, i, array * inv_s, channels)
    return f"{node.op_type} {node.name} scale"


def _absorb_in_mul(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray,
                   channels: _Channels) -> str | None:
    """A Mul's per-channel constant divided by s; for a product of two activations, either operand's producer."""
    for i in (1, 0):
        constant = _channel_constant(node.inputs[i], channels)
        if constant is not None:
            _replace_constant(builder, node, i, constant * inv_s, channels)
            return f"Mul {node.name} constant"
    for i in (1, 0):
        taker = _divide_at_producer(builder, node.inputs[i], inv_s, {node}, channels)
        if taker is not None:
            return taker
    return None


def _absorb_in_add(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray,
                   channels: _Channels) -> str | None:
    """A bias Add: its constant divided by s, and its other operand's producer too."""
    for i in (1, 0):
        constant = _channel_constant(node.inputs[i], channels)
        if constant is None:
            continue
        taker = _divide_at_producer(builder, node.inputs[1 - i], inv_s, {node}, channels)
        if taker is None:
            return None
        _replace_constant(builder, node, i, constant * inv_s, channels)
        return f"{taker} and Add {node.name} bias"
    return None


def _absorb_in_product(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray,
                       channels: _Channels) -> str | None:
    """A MatMul / Gemm on a constant weight: its output columns (and bias) divided by s."""
    if len(node.inputs) < 2 or not channels.last:
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
    bias_array = None if bias is None else _channel_constant(bias, channels)
    if bias is not None and (bias_array is None or attribute(node, "beta", 1.0) == 0.0):
        return None
    _replace_constant(builder, node, 1, array * (inv_s[:, None] if transposed else inv_s[None, :]), channels)
    if bias_array is not None:
        _replace_constant(builder, node, 2, bias_array * inv_s, channels)
    return f"{node.op_type} {node.name} output columns"


def _absorb_in_conv(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray,
                    channels: _Channels) -> str | None:
    """A Conv on a constant weight: its output channels (weight axis 0, and bias) divided by s."""
    weight = ir.convenience.get_const_tensor(node.inputs[1]) if not node.inputs[1].is_graph_input() else None
    if channels.last or weight is None or weight.dtype != ir.DataType.FLOAT or weight.shape[0] != channels.count:
        return None
    as_stored = dataclasses.replace(channels, last=True)  # B [M] and W [M, …] keep their own shapes
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    bias_array = None if bias is None else _channel_constant(bias, as_stored)
    if bias is not None and bias_array is None:
        return None
    array = weight.numpy().astype(np.float32)
    _replace_constant(builder, node, 1, array * inv_s.reshape(-1, *([1] * (array.ndim - 1))), as_stored)
    if bias_array is not None:
        _replace_constant(builder, node, 2, bias_array * inv_s, as_stored)
    return f"Conv {node.name} output channels"


def _through(builder: GraphBuilder, node: ir.Node, value: ir.Value, inv_s: np.ndarray,
             channels: _Channels) -> str | None:
    """An op that commutes with a positive factor per channel (s > 0): its input's producer takes 1 / s."""
    spatial = node.op_type in _POOLS
    if spatial and channels.last or any(out.uses() or out.is_graph_output() for out in node.outputs[1:]):
        return None
    taker = _divide_at_producer(builder, node.inputs[0], inv_s, {node}, channels)
    return None if taker is None else f"{taker} (through {node.op_type} {node.name})"


# Pooling keeps axis 1 as the channels (and mixes the others): it commutes with a per-channel factor there only.
_POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")

# What can take the division by s, by the producer's (domain, op type); "norm": every op of _NORMS.
_ABSORBERS = {"norm": _absorb_in_norm, ("", "Mul"): _absorb_in_mul, ("", "Add"): _absorb_in_add,
              ("", "MatMul"): _absorb_in_product, ("", "Gemm"): _absorb_in_product, ("", "Conv"): _absorb_in_conv,
              ("", "Relu"): _through, ("", "LeakyRelu"): _through, **{("", op): _through for op in _POOLS}}


def _insert_mul(builder: GraphBuilder, group: SmoothGroup, inv_s: np.ndarray) -> None:
    x = group.activation
    base = f"{x.name or 'activation'}_smooth"
    factor = builder.initializer(f"{base}_scale", inv_s)
    mul = builder.node("Mul", [x, factor], f"{base}_Mul", group.nodes[0])
    mul.outputs[0].type, mul.outputs[0].shape = x.type, x.shape
    for node in group.nodes:
        node.replace_input_with(0, mul.outputs[0])
