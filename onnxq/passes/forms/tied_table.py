"""A token table tied to an lm_head, stored once in int8: the Gather reads the lm_head's own codes.

GPT-2, Llama 3.2, Qwen 2.5, SmolLM2 and Gemma tie their lm_head to the token embeddings: the product reads the
table transposed — an exported Transpose (folded by preparation), a Gemm with transB, or a second initializer that
TorchScript stores equal to it. Quantized apart (the Gather per row, the product per output column), the int8 file
held the table twice: SmolLM2 without data 0.25x of the float file, 0.21x with one table; a GPT-2 of 8,000 x 256
8.0 MB, 6.0 MB. Per row of the table is per column of the product, so the product's codes and scales serve the
Gather as they are, gathered through a Transpose that ONNX Runtime folds at load (passes.forms.gather). The Gather
then also reads what the product's rounding made of the table (an AVX2 pair limit, a widened scale), which the
verification measures like every other node.

An lm_head that SmoothQuant scaled first holds the table with its columns multiplied by s (diag(s)·Eᵀ): the Gather
reads those codes and divides its rows by s (one float Mul of the gathered rows), so the lm_head keeps its smoothing
— measured on SmolLM2, as accurate as two tables (genai file: perplexity 1.019x, agreement 0.918, against 1.017x /
0.913 untied and 1.020x / 0.904 with the lm_head left unsmoothed). AWQ leaves a tied weight alone (reads_a_table):
its 4-bit blocks are shared by value (passes.forms.blockwise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np
import onnx_ir as ir

from onnxq.io.memory import page_out
from onnxq.io.irquery import attribute

__all__ = ["WeightSource", "ScaledFrom", "TiedWeight", "SOURCE_KEY", "SCALED_FROM_KEY", "tied_weight",
           "gathered_tables", "reads_a_table", "transposes"]

# Value.meta key under which GraphBuilder.quantized_weight records what an int8 initializer was made from.
SOURCE_KEY = "onnxq.weight_source"
# Value.meta key under which SmoothQuant (passes.smoothing.graph) records the weight it scaled and by what.
SCALED_FROM_KEY = "onnxq.scaled_from"

# Rows of a table compared at a time (8 MiB), both sides' pages dropped after each.
_COMPARED_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class ScaledFrom:
    """A weight SmoothQuant made: the float tensor it scaled, each input channel j (the table's columns) by
    scales[j]."""

    tensor: ir.TensorProtocol
    scales: np.ndarray


@dataclasses.dataclass(frozen=True)
class WeightSource:
    """The float tensor an int8 weight was quantized from, and how: along axis of the stored layout (None: one
    scale), from the tensor transposed or not; and the scale and zero point initializers that read it back."""

    tensor: ir.TensorProtocol
    axis: int | None
    transposed: bool
    scale: ir.Value
    zero_point: ir.Value
    scaled_from: ScaledFrom | None = None


@dataclasses.dataclass(frozen=True)
class TiedWeight:
    """A product's int8 codes that hold a Gather's table, their scale and zero point, whether they hold it
    transposed (the Gather then reads them through a Transpose), and the smoothing scales its columns carry (the
    gathered rows are divided by them), or None."""

    codes: ir.Value
    scale: ir.Value
    zero_point: ir.Value
    transposed: bool
    divide_by: np.ndarray | None = None


def tied_weight(graph: ir.Graph, table: ir.Value, axis: int | None) -> TiedWeight | None:
    """An int8 product weight of the graph that holds this table [V, H] — transposed ([H, V], a MatMul's B) per
    output column, or as it is ([V, H], a Gemm's B with transB) per row — where the Gather would quantize it per row
    (axis 0), or per tensor where it would be; its zero points come with it, and SmoothQuant's scales where it
    scaled the weight from the table."""
    tensor = ir.convenience.get_const_tensor(table)
    if tensor is None or len(tensor.shape) != 2:
        return None
    shape = tuple(tensor.shape)
    for codes in list(graph.initializers.values()):
        source = codes.meta.get(SOURCE_KEY)
        if source is None or codes.const_value is None:
            continue
        stored = tuple(codes.const_value.shape)
        for layout_transposed, stored_axis in ((False, axis), (True, None if axis is None else 1)):
            if source.axis != stored_axis or stored != (shape[::-1] if layout_transposed else shape):
                continue
            # the stored float is the source (or what SmoothQuant scaled), transposed where source.transposed says
            flipped = layout_transposed != source.transposed
            if _holds(tensor, source.tensor, transposed=flipped):
                return TiedWeight(codes, source.scale, source.zero_point, layout_transposed)
            scaled = source.scaled_from
            if scaled is not None and _holds(tensor, scaled.tensor, transposed=flipped):
                return TiedWeight(codes, source.scale, source.zero_point, layout_transposed, scaled.scales)
    return None


def gathered_tables(nodes: Iterable[ir.Node]) -> list[ir.TensorProtocol]:
    """The constant 2-D tables these nodes gather rows from (Gather along axis 0: token embeddings)."""
    tables = []
    for node in nodes:
        if node.op_type == "Gather" and node.inputs[0] is not None and attribute(node, "axis", 0) == 0:
            tensor = ir.convenience.get_const_tensor(node.inputs[0])
            if tensor is not None and len(tensor.shape) == 2:
                tables.append(tensor)
    return tables


def reads_a_table(node: ir.Node, tables: Sequence[ir.TensorProtocol]) -> bool:
    """Whether the MatMul / Gemm's weight (input 1) holds one of the tables: transposed (a MatMul's B [H, V]) or
    as it is (a Gemm's with transB). Only a weight of a table's shape is read."""
    weight = ir.convenience.get_const_tensor(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    if weight is None or len(weight.shape) != 2:
        return False
    as_is = node.op_type == "Gemm" and attribute(node, "transB", 0) == 1
    return any(_holds(table, weight, transposed=not as_is) for table in tables)


def _holds(table: ir.TensorProtocol, other: ir.TensorProtocol, transposed: bool) -> bool:
    """other == table.T (transposed) or == table: the same tensor (a Gemm with transB reads the Gather's own table)
    or equal values."""
    if not transposed:
        return other is table or tuple(table.shape) == tuple(other.shape) and transposes(table, other, False)
    return tuple(table.shape) == tuple(other.shape)[::-1] and transposes(table, other)


def transposes(table: ir.TensorProtocol, weight: ir.TensorProtocol, transposed: bool = True) -> bool:
    """table [N, K] == weight [K, N].T (transposed=False: == weight), a piece of the table's rows against the
    weight's at a time: compared whole, both were resident at once with a boolean of their size (SmolLM2's 113 MB
    tables: the rewrite's peak)."""
    rows, columns = table.numpy(), weight.numpy()
    step = max(1, _COMPARED_BYTES // max(rows[:1].nbytes, 1))
    for start in range(0, rows.shape[0], step):
        other = columns[:, start:start + step].T if transposed else columns[start:start + step]
        equal = np.array_equal(rows[start:start + step], other)
        page_out(table)  # a memory-mapped table or weight read back as the next piece needs it
        page_out(weight)
        if not equal:
            return False
    return True
