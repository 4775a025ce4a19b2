"""Weight-only rewrite (4-bit, or 8-bit): each planned MatMul / Gemm weight block-quantized along K
(numerics.blockwise), the product computed by com.microsoft MatMulNBits (ORT's CPU and CUDA kernels) or, format qdq,
by the standard opset-21 DequantizeLinear with block_size feeding the original MatMul. Activations stay float.
Gather tables (token embeddings) become com.microsoft GatherBlockQuantized, the same blocks along each row. Nodes
named in blocks.int8_nodes get 8-bit blocks in the same operators (mixed precision); int8 weights (mode weight-only)
are 8-bit blocks throughout. Scales are stored as blocks.scale_dtype says (passes.forms.scale_storage): a byte each on
an 8-bit grid per output channel, or float16, behind nodes ORT folds at load.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.calibration.moments import WeightMoments, weight_key
from onnxq.config import QScheme, QuantConfig
from onnxq.errors import UnsupportedModelError
from onnxq.handlers.plan import NodePlan
from onnxq.io.memory import page_out
from onnxq.numerics.blockwise import (CLIP_RATIOS, BlockQuantized, ScaleSearch, pack_codes, quantize_blockwise,
                                      symmetric_zero_point)
from onnxq.numerics.gptq import gptq_blockwise
from onnxq.passes.graph.builder import GraphBuilder, replace_node, shared_block_form, shared_block_quantization
from onnxq.passes.graph.contract import PlannedRewritePass
from onnxq.passes.forms.registry import RewriteInputs, rewrite_form
from onnxq.passes.forms.scale_storage import ScaleStorage, stored_scales
from onnxq.passes.forms.tied_table import transposes

__all__ = ["InsertBlockwisePass", "BLOCK_DQ_OPSET"]

BLOCK_DQ_OPSET = 21  # DequantizeLinear's block_size and int4 / uint4


class InsertBlockwisePass(PlannedRewritePass):
    """moments: per weight, XᵀX / n over the calibration rows of every activation that reads it (method gptq) or
    its diagonal, the mean square of each channel (clip activation) — calibration.moments.WeightMoments."""

    def __init__(self, plans: Sequence[NodePlan], config: QuantConfig, moments: WeightMoments | None = None) -> None:
        super().__init__(plans)
        self.config = config
        self.moments = moments

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        blocks = self.config.blocks
        opset = model.opset_imports.get("", 1)
        if blocks.format == "qdq" and opset < BLOCK_DQ_OPSET:
            raise UnsupportedModelError(
                f"blocks.format qdq needs opset {BLOCK_DQ_OPSET} (DequantizeLinear with block_size); the model is "
                f"opset {opset} — use blocks.format matmulnbits, or convert the model with onnx.version_converter")
        model.opset_imports.setdefault("com.microsoft", 1)  # MatMulNBits, GatherBlockQuantized
        builder = GraphBuilder(model.graph, QScheme("int8", symmetric=True))  # names; no int8 weight is made
        storage = _scale_storage(self.config)
        search = ScaleSearch((1.0,) if blocks.clip == "none" else CLIP_RATIOS, grid=storage == "uint8")
        made: dict[tuple, ir.Value | tuple] = {}  # one set of initializers per weight and bits, shared by its readers
        tables: list[_Table] = []  # MatMulNBits weights [K, N] a Gather of their transpose can read (tied lm_head)
        gathers = [p for p in self.plans if p.node.op_type == "Gather"]  # last: they may read a product's blocks
        for plan in [p for p in self.plans if p.node.op_type != "Gather"] + gathers:
            node = plan.node
            bits = 8 if node.name in blocks.int8_nodes else self.config.weights.bits
            if node.op_type == "Gather":  # the handler planned even-width tables only
                tied = _tied(node, tables, bits) if self.config.tie_tables else None
                if tied is not None:
                    _gather_tied(builder, node, tied, blocks.size)
                else:
                    _gather_blockwise(builder, node, blocks.size, _symmetric(self.config, bits), search,
                                      (bits, storage))
                continue
            transposed = weight_key(node)[1]
            key = (id(node.inputs[1]), transposed, bits)
            if key not in made:
                quantized, memo_key = self._quantized(node, transposed, bits, search)
                base = node.inputs[1].name or "weight"
                made[key] = (_matmulnbits_inputs(builder, quantized, (base, memo_key), storage)
                             if blocks.format == "matmulnbits" else _dequantized(builder, quantized, base, node))
                for array in (quantized.codes, quantized.scales, quantized.zero_points):
                    page_out(array)  # the memo's blocks on the run's file (io.spill): read once per graph built
                if blocks.format == "matmulnbits" and not transposed and quantized.k % blocks.size == 0:
                    tables.append(_Table(node.inputs[1], made[key], bits, quantized.k, quantized.n))
            _replace_product(builder, node, made[key], bits, transposed, blocks)
        RemoveUnusedNodesPass()(model)  # the float weights, now unread
        return ir.passes.PassResult(model, modified=bool(self.plans))

    def _quantized(self, node: ir.Node, transposed: bool, bits: int,
                   search: ScaleSearch) -> tuple[BlockQuantized, tuple]:
        """The weight's blocks, computed once per run (io: shared_block_quantization) whatever graph reads it, and
        their key in the run's memo."""
        blocks, symmetric = self.config.blocks, _symmetric(self.config, bits)
        tensor = ir.convenience.get_const_tensor(node.inputs[1])
        measured = self.moments is not None and self.moments.has(weight_key(node))
        method = blocks.method if measured else "rtn"
        memo_key = (id(tensor), transposed, bits, symmetric, blocks.size, method, blocks.clip, blocks.act_order,
                    search, measured)
        memo = shared_block_quantization()
        if memo is not None and memo_key in memo:
            return memo[memo_key][1], memo_key
        moments = self.moments.get(weight_key(node)) if measured else None  # unpacked only when quantized here
        weight = tensor.numpy().astype(np.float32, copy=False)
        weight = weight.T if transposed else weight
        if method == "gptq":
            quantized = gptq_blockwise(weight, moments, blocks.size, symmetric, search, blocks.act_order, bits)
        else:
            importance = None
            if moments is not None and blocks.clip == "activation":
                importance = np.diag(moments) if moments.ndim == 2 else moments
            quantized = quantize_blockwise(weight, blocks.size, symmetric, importance, search.ratios, bits, search.grid)
        page_out(tensor)  # a memory-mapped float weight is not read again here
        if memo is not None:
            memo[memo_key] = (tensor, quantized)  # the tensor is held so that its id stays its own
        return quantized, memo_key


@rewrite_form("blockwise", stage=0, blocked=True)
def _blockwise(model: ir.Model, plans: Sequence[NodePlan], inputs: RewriteInputs) -> dict[str, str]:
    InsertBlockwisePass(plans, inputs.config, inputs.moments)(model)
    return {}


def _replace_product(builder: GraphBuilder, node: ir.Node, made, bits: int, transposed: bool, blocks) -> None:
    """The node's product from the block-quantized weight: MatMulNBits, or DequantizeLinear → MatMul (+ Gemm's C)."""
    base = node.name or node.op_type
    activation = node.inputs[0]
    if blocks.format == "matmulnbits":
        shape = tuple(ir.convenience.get_const_tensor(node.inputs[1]).shape)  # an initializer or a Constant
        k, n = shape[::-1] if transposed else shape
        product = builder.node("MatMulNBits", [activation, *made], f"{base}_MatMulNBits", node,
                               domain="com.microsoft",
                               attributes={"K": k, "N": n, "bits": bits, "block_size": blocks.size,
                                           "accuracy_level": blocks.accuracy_level or 0})
    else:
        product = builder.node("MatMul", [activation, made], f"{base}_MatMul", node)
    result = product.outputs[0]
    if node.op_type == "Gemm" and len(node.inputs) > 2 and node.inputs[2] is not None:
        result = builder.node("Add", [result, node.inputs[2]], f"{base}_bias_Add", node).outputs[0]
    replace_node(builder.graph, node, result)


def _scale_storage(config: QuantConfig) -> ScaleStorage:
    """blocks.scale_dtype where the matmulnbits form reads float32 scales; float32 elsewhere: float16 compute makes
    every scale float16 itself (passes.float16.compute), and DequantizeLinear's output takes its scale's type (qdq)."""
    blocks = config.blocks
    return blocks.scale_dtype if blocks.format == "matmulnbits" and config.compute_dtype != "float16" else "float32"


def _symmetric(config: QuantConfig, bits: int) -> bool:
    """8-bit blocks are symmetric whatever the 4-bit weights are (MatMulNBits' implied zero point 128): one table
    then serves a tied lm_head and its Gather (_tied), as the language-model default puts both at 8 bits."""
    return config.weights.symmetric or bits == 8


def _gather_blockwise(builder: GraphBuilder, node: ir.Node, block_size: int, symmetric: bool,
                      search: ScaleSearch, storage: tuple[int, ScaleStorage]) -> None:
    """com.microsoft GatherBlockQuantized: rows of the table [V, H] in blocks along H, packed like MatMulNBits'
    B; only the gathered rows are dequantized. storage: (bits, how the scales are stored)."""
    bits, scale_storage = storage
    source = ir.convenience.get_const_tensor(node.inputs[0])
    table = source.numpy().astype(np.float32, copy=False)
    quantized = quantize_blockwise(table.T, block_size, symmetric, clip_ratios=search.ratios, bits=bits,
                                   scale_grid=search.grid)  # N rows, K = H
    page_out(source)
    base = node.inputs[0].name or "table"
    codes = quantized.codes.reshape(quantized.n, -1)[:, :quantized.k]
    inputs = [builder.initializer(f"{base}_int{bits}", pack_codes(codes, bits)), node.inputs[1],
              stored_scales(builder, quantized, (base, None), scale_storage, quantized.scales.shape)]
    if quantized.zero_points is not None:
        inputs.append(builder.initializer(f"{base}_block_zero_points", pack_codes(quantized.zero_points, bits)))
    gathered = builder.node("GatherBlockQuantized", inputs, f"{node.name or 'Gather'}_GatherBlockQuantized", node,
                            domain="com.microsoft",
                            attributes={"gather_axis": 0, "quantize_axis": 1, "block_size": block_size, "bits": bits})
    replace_node(builder.graph, node, gathered.outputs[0])


@dataclasses.dataclass(frozen=True)
class _Table:
    """A product's weight [K, N] as MatMulNBits reads it: B [N, K / block, block * bits / 8], scales [N * K / block]."""

    weight: ir.Value
    made: tuple[ir.Value, ...]
    bits: int
    k: int
    n: int


def _tied(node: ir.Node, tables: Sequence[_Table], bits: int) -> _Table | None:
    """The product whose weight is the Gather's table transposed — an lm_head tied to the token embeddings (the
    genai builder gathers from Transpose(lm_head.weight); Optimum stores both, equal): one 4-bit table serves both,
    as onnxruntime-genai's builder writes it (SmolLM2: 0.19x float's size with two tables, 0.16x with one)."""
    table = ir.convenience.get_const_tensor(node.inputs[0])
    for tied in tables:
        if tied.bits != bits or tuple(table.shape) != (tied.n, tied.k) or tied.made[2:]:  # symmetric blocks only
            continue
        if transposes(table, ir.convenience.get_const_tensor(tied.weight)):
            return tied
    return None


def _gather_tied(builder: GraphBuilder, node: ir.Node, tied: _Table, block_size: int) -> None:
    """GatherBlockQuantized over the product's own blocks: B's rows [N, K * bits / 8] and scales [N, K / block], by
    Reshape (ORT folds it at load); the file holds the table once."""
    base = tied.weight.name or "table"
    packed, scales = tied.made[:2]
    rows = builder.initializer(f"{base}_gather_shape", np.array([tied.n, tied.k * tied.bits // 8], np.int64))
    blocks = builder.initializer(f"{base}_gather_scales_shape", np.array([tied.n, tied.k // block_size], np.int64))
    data = builder.node("Reshape", [packed, rows], f"{base}_gather_Reshape", node).outputs[0]
    scale = builder.node("Reshape", [scales, blocks], f"{base}_gather_scales_Reshape", node).outputs[0]
    gathered = builder.node("GatherBlockQuantized", [data, node.inputs[1], scale],
                            f"{node.name or 'Gather'}_GatherBlockQuantized", node, domain="com.microsoft",
                            attributes={"gather_axis": 0, "quantize_axis": 1, "block_size": block_size,
                                        "bits": tied.bits})
    replace_node(builder.graph, node, gathered.outputs[0])


def _matmulnbits_inputs(builder: GraphBuilder, quantized: BlockQuantized, names: tuple[str, tuple],
                        storage: ScaleStorage) -> tuple[ir.Value, ...]:
    """B [N, n_blocks, block_size * bits / 8] (nibbles packed at 4 bits), scales [N * n_blocks], zero points
    [N * ceil(n_blocks * bits / 8)]; names: the initializers' base name and the blocks' key in the run's memo (each
    array made once per run: passes.graph.builder.shared_block_form)."""
    (base, key), bits = names, quantized.bits
    packed = shared_block_form((key, "B"), lambda: pack_codes(quantized.codes, bits))
    inputs = [builder.initializer(f"{base}_int{bits}", packed),
              stored_scales(builder, quantized, names, storage, (quantized.scales.size,))]
    if quantized.zero_points is not None:
        zero_points = shared_block_form((key, "zero points"),
                                        lambda: pack_codes(quantized.zero_points, bits).reshape(-1))
        inputs.append(builder.initializer(f"{base}_block_zero_points", zero_points))
    return tuple(inputs)


def _dequantized(builder: GraphBuilder, quantized: BlockQuantized, base: str, before: ir.Node) -> ir.Value:
    """DequantizeLinear(int4 / uint4 or int8 / uint8 [K, N], scales [n_blocks, N], axis 0, block_size): the float
    weight."""
    bits = quantized.bits
    signed, unsigned = (ml_dtypes.int4, ml_dtypes.uint4) if bits == 4 else (np.int8, np.uint8)
    codes = quantized.codes.reshape(quantized.n, -1)[:, :quantized.k].T
    if quantized.zero_points is None:
        weight = (codes.astype(np.int16) - symmetric_zero_point(bits)).astype(signed)
        inputs = [builder.initializer(f"{base}_int{bits}", weight)]
    else:
        inputs = [builder.initializer(f"{base}_uint{bits}", codes.astype(unsigned))]
    inputs.append(builder.initializer(f"{base}_block_scales", np.ascontiguousarray(quantized.scales.T)))
    if quantized.zero_points is not None:
        inputs.append(builder.initializer(f"{base}_block_zero_points",
                                          np.ascontiguousarray(quantized.zero_points.T).astype(unsigned)))
    node = builder.node("DequantizeLinear", inputs, f"{base}_DequantizeLinear", before,
                        attributes={"axis": 0, "block_size": quantized.block_size})
    out = node.outputs[0]
    out.type, out.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape([quantized.k, quantized.n])
    return out
