"""Graph-building helpers shared by the rewrite passes: one naming authority and one weight cache per graph."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import numpy as np
import onnx_ir as ir

from onnxq.config import QScheme
from onnxq.io import page_out
from onnxq.io.memory import memory_map
from onnxq.io.irquery import OUTER_NAMES, unique_name
from collections.abc import Callable, Mapping

from onnxq.numerics import QParams, choose_qparams, qrange, quantize
from onnxq.numerics.gptq import gptq_channelwise
from onnxq.numerics.pairs import PAIR_LIMIT, from_gemm_view, gemm_view, quantize_pair_limited
from onnxq.passes.forms.tied_table import SCALED_FROM_KEY, SOURCE_KEY, WeightSource

# A Conv weight's XᵀX / n by weight name (calibration.moments), for GPTQ rounding; None: round to nearest.
Hessians = Callable[[str], "np.ndarray | None"]

__all__ = ["QuantizedWeight", "GraphBuilder", "shared_weight_quantization", "shared_block_quantization",
           "remap_shared_weights", "spill_shared_blocks", "shared_block_form", "replace_node",
           "replace_node_with", "rewrite_each", "quantize_weight_array"]

# (source tensor id, axis, transpose, pair limit axis, scheme) → (source tensor, int8 array, qparams)
_Memo = dict[tuple, tuple[ir.TensorProtocol, np.ndarray, QParams]]
_MEMO: contextvars.ContextVar[_Memo | None] = contextvars.ContextVar("onnxq_weight_memo", default=None)
# The same for block-wise weights: (source tensor id, layout and method settings) → (source tensor, blocks).
_BLOCK_MEMO: contextvars.ContextVar[dict | None] = contextvars.ContextVar("onnxq_block_memo", default=None)
# What graphs store of those blocks (MatMulNBits' packed B, float16 scales): (block memo key, form) → array.
_FORM_MEMO: contextvars.ContextVar[dict | None] = contextvars.ContextVar("onnxq_form_memo", default=None)


@contextlib.contextmanager
def shared_weight_quantization():
    """Within it, every graph rewritten from the same float weights (clones share their tensors: the model, the
    sensitivity twins, each fallback probe) reuses each weight's int8 array or blocks: quantized once, held once."""
    tokens = [(memo, memo.set({})) for memo in (_MEMO, _BLOCK_MEMO, _FORM_MEMO)]
    try:
        yield
    finally:
        for memo, token in tokens:
            memo.reset(token)


def remap_shared_weights(twins: Mapping[int, ir.TensorProtocol]) -> None:
    """The run's memos of int8 weights and of the arrays graphs store for blocks (shared_block_form) take the twins
    of the arrays moved to the run's spill file (io.SpillFile.spill_quantized: id(array) → its memory-mapped twin),
    so that the arrays in memory are freed; the next graph rewritten from the same weights reads them from the
    file."""
    memo = _MEMO.get()
    if memo is None or not twins:
        return
    for key, (tensor, quantized, qparams) in memo.items():
        twin = twins.get(id(quantized))
        if twin is not None:
            memo[key] = (tensor, twin.numpy(), qparams)
    forms = _FORM_MEMO.get() or {}
    for key, array in forms.items():
        twin = twins.get(id(array))
        if twin is not None:
            forms[key] = twin.numpy()


def spill_shared_blocks(store: Callable[[np.ndarray], np.ndarray], min_bytes: int) -> None:
    """The run's memo of block-quantized weights, and the forms graphs store of them (shared_block_form), moved by
    `store` (io.SpillFile.stored_array: to the run's file, read back memory-mapped) when they hold at least min_bytes
    in memory: its codes are a byte per 4-bit code, SmolLM2's 150 MB of anonymous memory held from the rewrite to the
    run's end beside every later step's sessions, while the model's packed copy of them was already on file."""
    memo, forms = _BLOCK_MEMO.get(), _FORM_MEMO.get() or {}
    arrays = [a for _, blocks in (memo or {}).values() for a in (blocks.codes, blocks.scales, blocks.zero_points)]
    if not memo or _in_memory_bytes([*arrays, *forms.values()]) < min_bytes:
        return
    for key, (tensor, blocks) in memo.items():
        memo[key] = (tensor, dataclasses.replace(
            blocks, codes=store(blocks.codes), scales=store(blocks.scales),
            zero_points=None if blocks.zero_points is None else store(blocks.zero_points)))
    for key, array in forms.items():
        forms[key] = store(array)


def shared_block_form(key: tuple, make: Callable[[], np.ndarray]) -> np.ndarray:
    """An array a graph stores for a memo's blocks (MatMulNBits' packed B, float16 scales), made once per run under
    `key` (the block memo's key and the form's name): the sensitivity's twins and each fallback probe then read the
    quantized model's own arrays, on the run's file once it is spilled — packed again for each graph, SmolLM2's 4-bit
    weights were 136 MiB of the process's memory (tracemalloc) through the sensitivity's runs. A memo key of None
    (blocks of one graph's own, not in the memo) makes the array afresh."""
    forms = _FORM_MEMO.get()
    if forms is None or key[0] is None:
        return make()
    if key not in forms:
        forms[key] = make()
    return forms[key]


def _in_memory_bytes(arrays: list[np.ndarray | None]) -> int:
    return sum(a.nbytes for a in arrays if a is not None and memory_map(a) is None)


def shared_block_quantization() -> dict | None:
    """The run's memo of block-quantized weights (None outside shared_weight_quantization)."""
    return _BLOCK_MEMO.get()


@dataclasses.dataclass(frozen=True)
class QuantizedWeight:
    quantized: ir.Value  # int8 initializer
    scale: ir.Value
    zero_point: ir.Value
    qparams: QParams
    dequantized: ir.Value | None = None  # output of its DequantizeLinear, once made


class GraphBuilder:
    """Makes uniquely named initializers and nodes, and quantizes each (weight, axis, layout) once."""

    def __init__(self, graph: ir.Graph, weight_scheme: QScheme | None = None, hessians: Hessians | None = None) -> None:
        """weight_scheme: how quantized_weight quantizes (None: a builder that only names and adds values).
        hessians: Conv weights rounded by GPTQ where it gives their matrix (weight_rounding)."""
        self.graph = graph
        self.weight_scheme = weight_scheme
        self.hessians = hessians
        self._taken: set[str] = set(graph.initializers)
        for node in graph.all_nodes():
            self._taken.add(node.name or "")
            self._taken.update(v.name for v in node.outputs if v.name)
        self._taken.update(v.name for v in graph.inputs if v.name)
        self._taken.update(graph.meta.get(OUTER_NAMES, ()))  # a subgraph's rewrite: the outer model's names too
        self._weights: dict[tuple[int, int | None, bool, int | None, bytes | None], QuantizedWeight] = {}

    def unique(self, base: str) -> str:
        return unique_name(base, self._taken)

    def initializer(self, base: str, array: np.ndarray) -> ir.Value:
        name = self.unique(base)
        return self.tensor_initializer(name, ir.tensor(array, name=name))

    def tensor_initializer(self, name: str, tensor: ir.TensorProtocol) -> ir.Value:
        """An initializer holding `tensor` under `name`, a name this builder gave (unique)."""
        value = ir.Value(name=name, const_value=tensor)
        value.shape = ir.Shape(tensor.shape)
        value.type = ir.TensorType(tensor.dtype)
        self.graph.register_initializer(value)
        return value

    def node(self, op_type: str, inputs: list[ir.Value | None], base: str, before: ir.Node | None, *,
             attributes: dict | None = None, num_outputs: int = 1, domain: str = "") -> ir.Node:
        """A uniquely named node, put before `before` (None: not put in the graph yet; the caller places it)."""
        outputs = [ir.Value(name=self.unique(f"{base}_output_{i}" if num_outputs > 1 else f"{base}_output"))
                   for i in range(num_outputs)]
        node = ir.node(op_type, inputs, attributes or {}, domain=domain, outputs=outputs, name=self.unique(base))
        if before is not None:
            self.graph.insert_before(before, node)
        return node

    def quantized_weight(self, value: ir.Value, axis: int | None, transpose: bool = False,
                         pair_limit_axis: int | None = None, scale_floor: np.ndarray | None = None) -> QuantizedWeight:
        """The int8 form of a constant (transposed first when asked), made once per (value, axis, layout, limit,
        floor).

        pair_limit_axis: the K axis (of the stored layout) along which pairs are limited (numerics.pairs).
        scale_floor: the least scale (per channel along axis, or one), where a bias needs it (passes.forms.bias_scale)."""
        key = (id(value), axis, transpose, pair_limit_axis, _floor_key(scale_floor))
        if key not in self._weights:
            hessian = self.hessians(value.name or "") if self.hessians is not None and not transpose else None
            quantized, qparams = self._quantize(ir.convenience.get_const_tensor(value), axis, transpose,
                                                pair_limit_axis, hessian, scale_floor)
            base = value.name or "weight"
            weight = QuantizedWeight(
                quantized=self.initializer(f"{base}_quantized", quantized),
                scale=self.initializer(f"{base}_scale", qparams.scale),
                zero_point=self.initializer(f"{base}_zero_point", qparams.zero_point),
                qparams=qparams,
            )
            # What the codes hold, for a Gather of the same table to read them (passes.forms.tied_table).
            weight.quantized.meta[SOURCE_KEY] = WeightSource(ir.convenience.get_const_tensor(value), axis, transpose,
                                                             weight.scale, weight.zero_point,
                                                             value.meta.get(SCALED_FROM_KEY))
            self._weights[key] = weight
        return self._weights[key]

    def _quantize(self, tensor: ir.TensorProtocol, axis: int | None, transpose: bool, pair_limit_axis: int | None,
                  hessian: np.ndarray | None = None, scale_floor: np.ndarray | None = None
                  ) -> tuple[np.ndarray, QParams]:
        memo = _MEMO.get()
        key = (id(tensor), axis, transpose, pair_limit_axis, self.weight_scheme, hessian is not None,
               _floor_key(scale_floor))
        if memo is not None and key in memo:
            return memo[key][1:]
        array = tensor.numpy().astype(np.float32, copy=False)
        if transpose:
            array = np.ascontiguousarray(array.T)
        # A memory-mapped float weight's pages dropped as it is read (a piece at a time): not read again here.
        quantized, qparams = quantize_weight_array(array, axis, self.weight_scheme, pair_limit_axis, hessian,
                                                   lambda: page_out(tensor), scale_floor)
        page_out(tensor)
        if memo is not None:
            quantized.flags.writeable = False  # shared by graphs: a write would change them all
            memo[key] = (tensor, quantized, qparams)  # the tensor is held so that its id stays its own
        return quantized, qparams

    def dequantized_weight(self, value: ir.Value, axis: int | None, before: ir.Node,
                           pair_limit_axis: int | None = None, scale_floor: np.ndarray | None = None
                           ) -> QuantizedWeight:
        """A DequantizeLinear of the int8 weight, shared by every consumer of the same weight (and floor)."""
        weight = self.quantized_weight(value, axis, pair_limit_axis=pair_limit_axis, scale_floor=scale_floor)
        if weight.dequantized is None:
            dq = self.dequantize(weight.quantized, weight.scale, weight.zero_point, axis, value.name or "weight",
                                 before)
            weight = dataclasses.replace(weight, dequantized=dq)
            self._weights[(id(value), axis, False, pair_limit_axis, _floor_key(scale_floor))] = weight
        return weight

    def dequantize(self, quantized: ir.Value, scale: ir.Value, zero_point: ir.Value, axis: int | None,
                   base: str, before: ir.Node) -> ir.Value:
        attributes = {} if axis is None else {"axis": axis}
        node = self.node("DequantizeLinear", [quantized, scale, zero_point], f"{base}_DequantizeLinear", before,
                         attributes=attributes)
        out = node.outputs[0]
        out.type = ir.TensorType(ir.DataType.FLOAT)
        out.shape = quantized.shape
        return out


def quantize_weight_array(array: np.ndarray, axis: int | None, scheme: QScheme, pair_limit_axis: int | None = None,
                          hessian: np.ndarray | None = None, after_piece: Callable[[], None] | None = None,
                          scale_floor: np.ndarray | None = None) -> tuple[np.ndarray, QParams]:
    """A float weight's integer array and qparams under the scheme; pair_limit_axis: its K axis, whose pairs are
    kept within the U8S8 limit (numerics.pairs). A weight of rank > 2 is a Conv's, limited as im2col reads it.
    hessian: a Conv weight's XᵀX / n (per group), its codes rounded by GPTQ on the same scales (int8 per output
    channel, symmetric; otherwise it is not used). after_piece: called as rounding to nearest goes through the
    weight a piece at a time (numerics.affine.quantize). scale_floor: the least scale, per channel or one."""
    qparams = _weight_qparams(array, axis, scheme, scale_floor)
    if pair_limit_axis is None:
        quantized = quantize(array, qparams, after_piece)
    elif array.ndim > 2:  # a Conv weight, its pairs limited as the kernel reads them (axis 0 stays the channels)
        quantized, qparams = quantize_pair_limited(gemm_view(array), qparams, 1)
        quantized = from_gemm_view(quantized, array.shape)
    else:
        quantized, qparams = quantize_pair_limited(array, qparams, pair_limit_axis)
    if hessian is not None and array.ndim > 2 and axis == 0 and quantized.dtype == np.int8 \
            and not np.any(qparams.zero_point):
        codes = gptq_channelwise(gemm_view(array), hessian, np.broadcast_to(qparams.scale, array.shape[:1]),
                                 None if pair_limit_axis is None else PAIR_LIMIT)
        quantized = from_gemm_view(codes, array.shape)
    return quantized, qparams


def rewrite_each(model: ir.Model, find, rewrite) -> tuple[ir.Model, int]:
    """(a clone with rewrite(builder, node, found) applied to every main-graph node where find(node) is truthy, how
    many), or (the model itself, 0) where there is none: a preparation never edits the model it is given."""
    if not any(find(node) for node in model.graph):
        return model, 0
    clone = model.clone()
    builder = GraphBuilder(clone.graph)
    count = 0
    for node in list(clone.graph):
        found = find(node)
        if found:
            rewrite(builder, node, found)
            count += 1
    return clone, count


def replace_node(graph: ir.Graph, node: ir.Node, *results: ir.Value | None) -> None:
    """Each result takes the place of the node's output in the same position (its type, shape, name, every use, a
    graph output too; None: an output nothing reads) and the node goes: how every rewrite swaps a float node for its
    quantized form."""
    for old, result in zip(node.outputs, results):
        if result is None:
            continue
        result.type, result.shape = old.type, old.shape
        old.replace_all_uses_with(result, replace_graph_outputs=True)
        result.name, old.name = old.name, None
    graph.remove(node, safe=True)


def replace_node_with(graph: ir.Graph, node: ir.Node, replacement: ir.Node) -> None:
    """replace_node with another node's outputs, position by position: an output the float node omits (no name)
    stays omitted (a contrib op's optional outputs)."""
    results = [new if old.name else None for old, new in zip(node.outputs, replacement.outputs)]
    for new, result in zip(replacement.outputs, results):
        if result is None:
            new.name = ""
    replace_node(graph, node, *results)


def _weight_qparams(array: np.ndarray, axis: int | None, scheme: QScheme,
                    scale_floor: np.ndarray | None = None) -> QParams:
    """Each channel's range (or the tensor's), widened where its scale would fall below scale_floor: ±floor·(half
    the integer range) holds a scale of at least the floor, symmetric or not."""
    if axis is None:
        lo, hi = np.float64(array.min()), np.float64(array.max())
    else:
        reduce_axes = tuple(i for i in range(array.ndim) if i != axis)
        lo, hi = array.min(axis=reduce_axes).astype(np.float64), array.max(axis=reduce_axes).astype(np.float64)
    if scale_floor is not None:
        qmin, qmax = qrange(scheme.np_dtype, scheme.symmetric)
        reach = np.asarray(scale_floor, dtype=np.float64) * ((qmax - qmin) / 2.0)
        lo, hi = np.minimum(lo, -reach), np.maximum(hi, reach)
    if axis is None:
        return choose_qparams(float(lo), float(hi), scheme.np_dtype, scheme.symmetric)
    return choose_qparams(lo, hi, scheme.np_dtype, scheme.symmetric, axis=axis)


def _floor_key(scale_floor: np.ndarray | None) -> bytes | None:
    return None if scale_floor is None else np.asarray(scale_floor, dtype=np.float32).tobytes()
