"""The head size of a KV-cache input whose last dimension the model leaves open: onnxruntime-genai's builder names
that dimension (kv_cache_dim) rather than writing it, and onnxq needs it to make the empty caches of a first step
(data.completion). Each source reads it a way some export shows it; the first that knows a cache wins."""

from __future__ import annotations

import re
from collections.abc import Callable

import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

__all__ = ["cache_head_sizes", "HEAD_SIZE_SOURCES", "CACHE_NAME"]

# A KV-cache input's name: past_key_values.0.key (Optimum, the genai builder), past.0.key, cache_k.
CACHE_NAME = re.compile(r"(^|[._/])(past|cache)", re.I)


def _attention_head_sizes(model: ir.Model) -> dict[str, int]:
    """Caches that com.microsoft GroupQueryAttention reads (the builder's float32 export): the query's width over
    its heads — with the keys and values packed into the query (no key input), over all three. The query's width is
    its producer's constant weight's last dimension, or the query's own known last dimension."""
    sizes = {}
    for node in model.graph:
        if node.domain != "com.microsoft" or node.op_type != "GroupQueryAttention" or len(node.inputs) < 5:
            continue
        heads, kv_heads = (node.attributes[a].value if a in node.attributes else None
                           for a in ("num_heads", "kv_num_heads"))
        width = _last_dim(node.inputs[0])
        if not heads or not kv_heads or width is None:
            continue
        packed = node.inputs[1] is None or not node.inputs[1].name
        size, rest = divmod(width, heads + 2 * kv_heads if packed else heads)
        for cache in node.inputs[3:5]:
            if cache is not None and cache.is_graph_input() and not rest:
                sizes[cache.name] = size
    return sizes


def _last_dim(value: ir.Value | None) -> int | None:
    producer = None if value is None else value.producer()
    if producer is not None and producer.op_type == "MatMul" and producer.inputs[1] is not None \
            and producer.inputs[1].const_value is not None:
        return int(producer.inputs[1].const_value.shape[-1])
    if producer is not None and producer.op_type == "MatMulNBits" and "N" in producer.attributes:
        return int(producer.attributes["N"].value)  # a quantized file's projection
    if value is not None and value.shape is not None and value.shape.rank() and isinstance(value.shape[-1], int):
        return int(value.shape[-1])
    return None


def _concatenated_head_sizes(model: ir.Model) -> dict[str, int]:
    """Caches concatenated with the step's new keys or values along the past axis (the builder's float16 CPU
    export, MultiHeadAttention): the last dimension of what they are concatenated with (along another axis), by
    ONNX's shape inference with data propagation (the new keys come through Reshape / Transpose of a projection)
    on a copy."""
    if not any(_open_and_concatenated(v) for v in model.graph.inputs):
        return {}
    inferred = model.clone()
    ShapeInferencePass(strict_mode=False, data_prop=True)(inferred)
    sizes = {}
    for cache in (v for v in inferred.graph.inputs if _open_and_concatenated(v)):
        for concat, read in _concatenations(cache):
            known = [_known_last_dim(v) for v in concat.inputs if v is not read]
            axis = concat.attributes["axis"].value if "axis" in concat.attributes else -1
            if known and known[0] is not None and axis % cache.shape.rank() != cache.shape.rank() - 1:
                sizes[cache.name] = known[0]
    return sizes


def _concatenations(value: ir.Value) -> list[tuple[ir.Node, ir.Value]]:
    """(Concat, the value it reads) for each Concat reading the value directly or through Casts (a float16 model
    quantized in float32 casts its caches first: passes.float16.model)."""
    found = []
    for user, _ in value.uses():
        if user.op_type == "Concat":
            found.append((user, value))
        elif user.op_type == "Cast":
            found.extend(_concatenations(user.outputs[0]))
    return found


def _open_and_concatenated(value: ir.Value) -> bool:
    return (bool(CACHE_NAME.search(value.name or "")) and value.shape is not None and value.shape.rank() > 1
            and not isinstance(value.shape[-1], int) and bool(_concatenations(value)))


def _known_last_dim(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None or not value.shape.rank():
        return None
    return value.shape[-1] if isinstance(value.shape[-1], int) else None


HEAD_SIZE_SOURCES: tuple[Callable[[ir.Model], dict[str, int]], ...] = (_attention_head_sizes,
                                                                       _concatenated_head_sizes)


def cache_head_sizes(model: ir.Model) -> dict[str, int]:
    """Head size per cache input, from the first source that knows it."""
    sizes: dict[str, int] = {}
    for source in HEAD_SIZE_SOURCES:
        sizes = {**source(model), **sizes}
    return sizes
