"""MatMul of a 2-D activation by a constant weight, then Add of a constant bias, made one Gemm before planning.

ORT's level-1 MatMulAddFusion makes that Gemm itself, after onnxq has quantized the MatMul: the Gemm then has a
float bias, which ORT's QDQ Gemm fusion refuses (it takes a bias only as an int32 DequantizeLinear), so the
product ran as DequantizeLinear + float Gemm (seen on PP-OCR's direction classifier: its one MatMul "not found in
the executed graph"). Made a Gemm first, its bias is planned as int32 (handlers/gemm.py) and ORT runs QGemm. Only
a rank-2 activation qualifies, as in ORT's fusion; the folded model is a clone, the model as given stays the
verification's reference.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from onnxq.handlers.plan import constant_float
from onnxq.passes.graph.builder import replace_node

__all__ = ["folded_matmul_adds"]


def folded_matmul_adds(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone with every foldable MatMul → Add made one Gemm, a note), or (the model itself, None). Where an
    activation's rank is not in the model, the clone's shapes are inferred first (ONNX's inference, without the
    weights' data)."""
    candidates = [_foldable(node, rank_known=False) for node in model.graph]
    if not any(candidates):
        return model, None
    folded = model.clone()
    if any(m is not None and m.inputs[0].shape is None for m in candidates):
        ShapeInferencePass(strict_mode=False)(folded)
    count = 0
    for node in list(folded.graph):
        matmul = _foldable(node)
        if matmul is not None:
            bias = node.inputs[1] if node.inputs[0] is matmul.outputs[0] else node.inputs[0]
            gemm = ir.node("Gemm", [matmul.inputs[0], matmul.inputs[1], bias], name=matmul.name)
            folded.graph.insert_before(matmul, gemm)
            replace_node(folded.graph, node, gemm.outputs[0])
            folded.graph.remove(matmul, safe=True)
            count += 1
    if not count:
        return model, None
    return folded, (f"{count} MatMul + Add of a bias made one Gemm (as ORT fuses them; its int32 bias then lets ORT "
                    "run QGemm)")


def _constant_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    tensor = constant_float(value)
    return None if tensor is None else tuple(tensor.shape)


def _rank(value: ir.Value) -> int | None:
    """The value's rank, or a Reshape's by the length of its shape input: ONNX's inference leaves a Reshape-13
    output without a shape when that input is computed (Shape → Slice → Concat, as exporters write a flatten), and
    ORT, folding the computation, fuses it (PP-OCR's direction classifier)."""
    if value.shape is not None:
        return value.shape.rank()
    producer = value.producer()
    if producer is None or producer.op_type != "Reshape" or len(producer.inputs) < 2 or producer.inputs[1] is None:
        return None
    target = producer.inputs[1].shape
    if target is None or target.rank() != 1 or not isinstance(target[0], int):
        return None
    return target[0]


def _foldable(node: ir.Node, rank_known: bool = True) -> ir.Node | None:
    """The MatMul that this Add of a constant [N] bias can fold into, or None (rank_known=False: a candidate whose
    activation's rank may be unknown)."""
    if node.op_type != "Add" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    for product, bias in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        matmul = product.producer() if product is not None else None
        if matmul is None or matmul.op_type != "MatMul" or matmul.domain not in ("", "ai.onnx"):
            continue
        weight, a = _constant_shape(matmul.inputs[1]), matmul.inputs[0]
        rank = _rank(a)
        if weight is None or len(weight) != 2 or (rank != 2 and (rank_known or rank is not None)) \
                or _constant_shape(a) is not None:
            continue
        if _constant_shape(bias) not in ((weight[1],), (1, weight[1])) or product.is_graph_output() \
                or len(product.uses()) != 1:
            continue
        return matmul
    return None
