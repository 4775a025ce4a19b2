"""LSTM → com.microsoft DynamicQuantizeLSTM (handlers/lstm.py): the float node's inputs and attributes, W and R as
int8 [D, K, 4H] (ORT's kernel reads them transposed), and a scale and zero point per direction and gate row
([D, 4H]; per tensor: [D], one value). B, the peepholes and the states stay float; X and each step's hidden state
are quantized to uint8 inside the kernel at run time."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.config import QScheme
from onnxq.handlers.plan import NodePlan, WeightSpec
from onnxq.passes.graph.builder import GraphBuilder, quantize_weight_array, replace_node_with
from onnxq.passes.forms.registry import RewriteInputs, rewrite_form

__all__ = ["lstm_weight_arrays"]

_MS = "com.microsoft"
# LSTM's optional inputs after W and R, in order: B, sequence_lens, initial_h, initial_c, P.
_OPTIONAL_INPUTS = 5


@rewrite_form("dynamic_lstm", stage=0)
def _dynamic_lstm(model: ir.Model, plans: Sequence[NodePlan], inputs: RewriteInputs) -> dict[str, str]:
    builder = GraphBuilder(model.graph, inputs.config.weights)
    model.opset_imports.setdefault(_MS, 1)
    for plan in plans:
        node = plan.node
        quantized: list[ir.Value] = []
        for spec in plan.weights:
            source = node.inputs[spec.input_index]
            arrays = lstm_weight_arrays(ir.convenience.get_const_tensor(source).numpy(), spec, builder.weight_scheme)
            quantized.append(builder.initializer(f"{source.name or 'weight'}_quantized", arrays[0]))
            quantized += [builder.initializer(f"{source.name or 'weight'}_{what}", array)
                          for what, array in zip(("scale", "zero_point"), arrays[1:])]
        optional = list(node.inputs[3:3 + _OPTIONAL_INPUTS])
        optional += [None] * (_OPTIONAL_INPUTS - len(optional))
        w_q, w_scale, w_zero, r_q, r_scale, r_zero = quantized
        attributes = {name: attr for name, attr in node.attributes.items() if name != "layout"}
        lstm = builder.node("DynamicQuantizeLSTM", [node.inputs[0], w_q, r_q, *optional, w_scale, w_zero, r_scale,
                                                    r_zero],
                            f"{node.name or 'LSTM'}_DynamicQuantizeLSTM", node, attributes=attributes,
                            num_outputs=len(node.outputs), domain=_MS)
        replace_node_with(model.graph, node, lstm)
    RemoveUnusedNodesPass()(model)
    return {}


def lstm_weight_arrays(weight: np.ndarray, spec: WeightSpec,
                       scheme: QScheme) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(int8 [D, K, 4H], scale, zero point) of an LSTM weight [D, 4H, K]: quantized as the [K, D·4H] matrix the
    kernel multiplies by (K pairs along axis 0 when spec asks for the limit; a scale per column, or one in all)."""
    directions, rows, k = weight.shape
    matrix = np.ascontiguousarray(weight.astype(np.float32, copy=False).transpose(2, 0, 1).reshape(k, -1))
    axis = None if spec.axis is None else 1
    q, qparams = quantize_weight_array(matrix, axis, scheme, None if spec.pair_limit_axis is None else 0)
    stored = np.ascontiguousarray(q.reshape(k, directions, rows).transpose(1, 0, 2))
    if axis is None:  # one scale for the tensor, given once per direction
        return (stored, np.full(directions, qparams.scale, np.float32),
                np.full(directions, qparams.zero_point, qparams.zero_point.dtype))
    return stored, qparams.scale.reshape(directions, rows), qparams.zero_point.reshape(directions, rows)
