"""Weight-only int8 tables for Gather (token embeddings): gather int8 rows, then scale only those rows.

DequantizeLinear → Gather would dequantize the whole table on every run (ORT does not fold it: measured
+1.9 ms per MiniLM call at batch 1); Gather → Cast → Mul touches only the gathered rows.
A table tied to an lm_head reads the lm_head's codes (passes.forms.tied_table): the file holds it once.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.handlers.plan import WeightSpec
from onnxq.passes.graph.builder import GraphBuilder, replace_node
from onnxq.passes.forms.tied_table import tied_weight

__all__ = ["rewrite_gather"]


def rewrite_gather(builder: GraphBuilder, node: ir.Node, spec: WeightSpec, tie: bool = True) -> None:
    """The Gather on int8 rows of its table: the table's own int8 form, or the codes of a product quantized before
    it from the same table (a tied lm_head, passes.forms.tied_table) — stored transposed, through a Transpose that ONNX
    Runtime folds at load. tie: whether to look for such a product (config.tie_tables)."""
    table, indices = node.inputs[0], node.inputs[1]
    base = node.name or "Gather"
    tied = tied_weight(builder.graph, table, spec.axis) if tie else None
    if tied is None:
        weight = builder.quantized_weight(table, spec.axis)
        codes, scale, zero_point = weight.quantized, weight.scale, weight.zero_point
    else:
        codes, scale, zero_point = tied.codes, tied.scale, tied.zero_point
        if tied.transposed:
            stored = codes
            codes = builder.node("Transpose", [stored], f"{base}_tied_table_Transpose", node,
                                 attributes={"perm": [1, 0]}).outputs[0]
            codes.type, codes.shape = stored.type, ir.Shape(reversed(tuple(stored.shape)))
    rows = builder.node("Gather", [codes, indices], f"{base}_quantized", node, attributes={"axis": 0})
    if spec.axis is None:
        scaled = builder.dequantize(rows.outputs[0], scale, zero_point, None, base, node)
    else:
        scaled = _scaled_rows(builder, node, rows.outputs[0], (scale, zero_point))
    if tied is not None and tied.divide_by is not None:  # the lm_head's smoothing, taken off the rows
        unsmooth = builder.initializer(f"{base}_unsmooth", (1.0 / tied.divide_by).astype(np.float32))
        scaled = builder.node("Mul", [scaled, unsmooth], f"{base}_unsmooth_Mul", node).outputs[0]
    replace_node(builder.graph, node, scaled)


def _scaled_rows(builder: GraphBuilder, node: ir.Node, rows: ir.Value, qparams: tuple[ir.Value, ir.Value]) -> ir.Value:
    """(q − zero point[row]) · scale[row] for the gathered int8 rows: Cast and Mul of these rows alone; the Sub only
    where a zero point is not 0 (asymmetric weights, which x86-vnni allows)."""
    scale, zero_point = qparams
    base, indices = node.name or "Gather", node.inputs[1]
    axes = builder.initializer(f"{base}_unsqueeze_axes", np.array([-1], dtype=np.int64))

    def per_row(value: ir.Value, name: str, cast: bool) -> ir.Value:
        picked = builder.node("Gather", [value, indices], f"{base}_{name}_Gather", node, attributes={"axis": 0})
        picked = builder.node("Unsqueeze", [picked.outputs[0], axes], f"{base}_{name}_Unsqueeze", node).outputs[0]
        if cast:
            picked = builder.node("Cast", [picked], f"{base}_{name}_Cast", node,
                                  attributes={"to": ir.DataType.FLOAT}).outputs[0]
        return picked

    row_scales = per_row(scale, "scale", False)
    as_float = builder.node("Cast", [rows], f"{base}_Cast", node, attributes={"to": ir.DataType.FLOAT}).outputs[0]
    if np.any(ir.convenience.get_const_tensor(zero_point).numpy()):
        as_float = builder.node("Sub", [as_float, per_row(zero_point, "zero_point", True)], f"{base}_Sub",
                                node).outputs[0]
    return builder.node("Mul", [as_float, row_scales], f"{base}_Mul", node).outputs[0]
