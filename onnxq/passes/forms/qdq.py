"""Static quantization: QuantizeLinear/DequantizeLinear on activations, int8 weights behind DequantizeLinear."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.calibration.moments import WeightMoments
from onnxq.config import QuantConfig
from onnxq.errors import UnsupportedModelError
from onnxq.handlers.plan import NodePlan
from onnxq.io.irquery import attribute
from onnxq.numerics import QParams, choose_qparams
from onnxq.passes.forms.bias_scale import bias_codes, fits_int32, quantized_weights
from onnxq.passes.graph.builder import GraphBuilder
from onnxq.passes.graph.contract import PlannedRewritePass
from onnxq.passes.formats.float_readers import channelwise_dequantized, reaches_float_product
from onnxq.passes.forms.registry import RewriteInputs, RewriteResult, rewrite_form
from onnxq.passes.forms.gather import rewrite_gather
from onnxq.passes.preparation.checks import onnx_opset

__all__ = ["InsertQdqPass", "SIXTEEN_BIT_OPSET"]

SIXTEEN_BIT_OPSET = 21  # QuantizeLinear / DequantizeLinear with int16 and uint16

logger = logging.getLogger(__name__)

# Ops whose output holds only values of their first input (moved, picked or repeated): a quantized input's grid
# holds them exactly.
_VALUE_MOVING = frozenset({"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity",
                           "Slice", "Gather", "Expand", "Tile", "SpaceToDepth", "DepthToSpace", "Resize"})


def _moved_from(value: ir.Value) -> ir.Value | None:
    """The input whose values `value` only moves, or None."""
    producer = value.producer()
    if producer is None or producer.op_type not in _VALUE_MOVING or producer.domain not in ("", "ai.onnx"):
        return None
    if producer.op_type == "Resize" and attribute(producer, "mode", "nearest") != "nearest":
        return None
    return producer.inputs[0]


class InsertQdqPass(PlannedRewritePass):
    """Applies static plans. `ranges` maps each planned activation's value name to its calibrated (min, max).

    Its result's notes say, per node, how a bias that plain int32 codes would not hold was kept: on a widened weight
    scale (passes.forms.bias_scale), or float where no widening applies (a bias that does not match the weight's
    channels).
    """

    def __init__(self, plans: Sequence[NodePlan], ranges: Mapping[str, tuple[float, float]],
                 config: QuantConfig, moments: WeightMoments | None = None) -> None:
        """moments: Conv weights' second moments, their codes then rounded by GPTQ (weights.rounding)."""
        super().__init__(plans)
        self.ranges = ranges
        self.config = config
        self.moments = moments

    def call(self, model: ir.Model) -> RewriteResult:
        opset = onnx_opset(model)
        if self.config.activations.bits == 16 and self.plans and opset is not None and opset < SIXTEEN_BIT_OPSET:
            raise UnsupportedModelError(
                f"activations {self.config.activations.dtype} need opset {SIXTEEN_BIT_OPSET} (QuantizeLinear's 16-bit "
                f"types); the model is opset {opset} — convert it with onnx.version_converter.convert_version(model, "
                f"{SIXTEEN_BIT_OPSET}), or use 8-bit activations")
        bias_notes: dict[str, str] = {}
        moments = self.moments
        builder = GraphBuilder(model.graph, self.config.weights,
                               None if moments is None else lambda name: moments.get((name, False)))
        # Each quantized activation once for all its readers: value (and its DequantizeLinear) → (DQ output, qparams).
        activations: dict[ir.Value, tuple[ir.Value, QParams]] = {}
        planned = frozenset(plan.node for plan in self.plans)
        # Gathers last: one may read the int8 weight of a product tied to its table (passes.forms.tied_table).
        for plan in sorted(self.plans, key=lambda p: p.weight_only):
            node = plan.node
            if plan.weight_only:
                rewrite_gather(builder, node, plan.weights[0], self.config.tie_tables)
                continue
            act_qparams: dict[int, QParams] = {}
            for index in plan.activations:
                value = node.inputs[index]
                if value not in activations:
                    self._remember(activations, value, self._quantize_activation(builder, value, node, activations))
                dequantized, act_qparams[index] = activations[value]
                node.replace_input_with(index, dequantized)
            weight_qparams, widened = quantized_weights(builder, plan, act_qparams.get(0))
            if plan.bias_index is not None:
                reason = self._quantize_bias(builder, node, plan.bias_index, act_qparams[0], weight_qparams)
                if reason is not None or widened is not None:
                    bias_notes[node.name or ""] = reason or widened
            if plan.output is not None and plan.output not in activations:
                self._remember(activations, plan.output, self._quantize_output(builder, plan, planned))
        RemoveUnusedNodesPass()(model)
        return RewriteResult(model, modified=bool(self.plans), notes=bias_notes)

    @staticmethod
    def _remember(activations: dict, value: ir.Value, quantized: tuple[ir.Value, QParams]) -> None:
        # A later reader may hold the value itself or, once an output was requantized, its DequantizeLinear.
        activations[value] = activations[quantized[0]] = quantized

    def _quantize_activation(self, builder: GraphBuilder, value: ir.Value, before: ir.Node,
                             activations: Mapping[ir.Value, tuple[ir.Value, QParams]]) -> tuple[ir.Value, QParams]:
        """Q → DQ of a value for one reader. Behind an op that only moves or picks values of an already quantized
        input (MaxPool, Reshape, …) its quantization is that input's: nothing is rounded again, and ORT then runs the
        op on int8 (DropQDQNodes)."""
        source = _moved_from(value)
        while source is not None and source not in activations:  # MaxPool → Reshape → …: back to a quantized value
            source = _moved_from(source)
        if source is not None and activations[source][1].axis is None:
            qparams = activations[source][1]
        else:
            qparams = self._calibrated(value)
        return self._qdq(builder, value, qparams, lambda node: builder.graph.insert_before(before, node)), qparams

    def _quantize_output(self, builder: GraphBuilder, plan: NodePlan,
                         planned: frozenset[ir.Node]) -> tuple[ir.Value, QParams]:
        """Q → DQ right after the value's producer, read by all its readers (a requantized Conv output); a float
        Conv / ConvTranspose / Gemm among them reads its own per-channel DequantizeLinear (passes.formats.float_readers)."""
        value = plan.output
        qparams = self._calibrated(value)
        readers = list(value.uses())
        inserted: list[ir.Node] = []
        dequantized = self._qdq(builder, value, qparams, inserted.append)
        builder.graph.insert_after(value.producer(), inserted)
        own: ir.Value | None = None
        for reader, index in readers:
            if index == 0 and reaches_float_product(reader, planned):
                own = own or channelwise_dequantized(builder, inserted[0].outputs[0], qparams, plan, inserted[-1])
                reader.replace_input_with(index, own or dequantized)
            else:
                reader.replace_input_with(index, dequantized)
        return dequantized, qparams

    def _calibrated(self, value: ir.Value) -> QParams:
        scheme = self.config.activations
        rmin, rmax = self.ranges[value.name]
        return choose_qparams(rmin, rmax, scheme.np_dtype, scheme.symmetric)

    @staticmethod
    def _qdq(builder: GraphBuilder, value: ir.Value, qparams: QParams, place) -> ir.Value:
        """QuantizeLinear → DequantizeLinear of the value, each node handed to `place` (which puts it in the graph)."""
        base = value.name or "activation"
        scale = builder.initializer(f"{base}_scale", qparams.scale)
        zero_point = builder.initializer(f"{base}_zero_point", qparams.zero_point)
        q = builder.node("QuantizeLinear", [value, scale, zero_point], f"{base}_QuantizeLinear", None)
        q.outputs[0].type = ir.TensorType(ir.DataType.from_numpy(qparams.dtype))
        dq = builder.node("DequantizeLinear", [q.outputs[0], scale, zero_point], f"{base}_DequantizeLinear", None)
        dq.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
        q.outputs[0].shape = dq.outputs[0].shape = value.shape
        place(q)
        place(dq)
        return dq.outputs[0]

    def _quantize_bias(self, builder: GraphBuilder, node: ir.Node, index: int, act: QParams,
                       weight: QParams) -> str | None:
        """Gemm's C as int32 at scale s_x·s_w; or why it stays float."""
        bias_value = node.inputs[index]
        quantized, scale = bias_codes(bias_value, act, weight)
        if not fits_int32(quantized):
            reason = "int32 bias would overflow (activation × weight scale too small); bias kept float"
            logger.info("%s: %s", node.name, reason)
            return reason
        axis = 0 if scale.ndim else None
        base = bias_value.name or "bias"
        q = builder.initializer(f"{base}_quantized", quantized.astype(np.int32))
        s = builder.initializer(f"{base}_scale", np.ascontiguousarray(scale, dtype=np.float32))
        zp = builder.initializer(f"{base}_zero_point", np.zeros(scale.shape, dtype=np.int32))
        node.replace_input_with(index, builder.dequantize(q, s, zp, axis, base, node))
        return None


@rewrite_form("qdq", stage=1, calibrated=True)
def _qdq(model: ir.Model, plans: Sequence[NodePlan], inputs: RewriteInputs) -> dict[str, str]:
    return InsertQdqPass(plans, inputs.ranges, inputs.config, inputs.moments)(model).notes
