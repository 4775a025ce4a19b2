"""Static quantization: QuantizeLinear/DequantizeLinear on activations, int8 weights behind DequantizeLinear."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxq.calibration.moments import WeightMoments
from onnxq.config import QuantConfig
from onnxq.handlers.plan import NodePlan
from onnxq.irquery import attribute
from onnxq.numerics import QParams, choose_qparams
from onnxq.passes.builder import GraphBuilder
from onnxq.passes.contract import PlannedRewritePass
from onnxq.passes.forms import RewriteInputs, RewriteResult, rewrite_form
from onnxq.passes.gather_rewrite import rewrite_gather

__all__ = ["InsertQdqPass"]

logger = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_BIAS_MARGIN = 1.0001  # a floored scale's bias codes stay inside int32 after rounding
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
    scale (_quantized_weights), or float where no widening applies (a bias that does not match the weight's
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
        bias_notes: dict[str, str] = {}
        moments = self.moments
        builder = GraphBuilder(model.graph, self.config.weights,
                               None if moments is None else lambda name: moments.get((name, False)))
        # Each quantized activation once for all its readers: value (and its DequantizeLinear) → (DQ output, qparams).
        activations: dict[ir.Value, tuple[ir.Value, QParams]] = {}
        planned = frozenset(plan.node for plan in self.plans)
        for plan in self.plans:
            node = plan.node
            if plan.weight_only:
                rewrite_gather(builder, node, plan.weights[0])
                continue
            act_qparams: dict[int, QParams] = {}
            for index in plan.activations:
                value = node.inputs[index]
                if value not in activations:
                    self._remember(activations, value, self._quantize_activation(builder, value, node, activations))
                dequantized, act_qparams[index] = activations[value]
                node.replace_input_with(index, dequantized)
            weight_qparams, widened = _quantized_weights(builder, plan, act_qparams.get(0))
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
        """Q → DQ right after the value's producer, read by all its readers (a requantized Conv output) — but a
        float Conv / ConvTranspose / Gemm (kept float: excluded, by the fallback, unplanned) reads its own
        DequantizeLinear, per channel: behind a per-tensor one, ORT's WeightBiasQuantization quantizes its weight
        (per tensor) and bias itself, and with a quantized reader after it runs it as QLinearConv / QGemm — a node
        the report says is float. Per channel (the same scale repeated) it computes the same values, and ORT leaves
        it float. Through ops ORT moves a DequantizeLinear past (MaxPool, Reshape, …) alike."""
        value = plan.output
        qparams = self._calibrated(value)
        readers = list(value.uses())
        inserted: list[ir.Node] = []
        dequantized = self._qdq(builder, value, qparams, inserted.append)
        builder.graph.insert_after(value.producer(), inserted)
        own: ir.Value | None = None
        for reader, index in readers:
            if index == 0 and _reaches_float_product(reader, planned):
                own = own or _channelwise_dequantized(builder, inserted[0].outputs[0], qparams, plan, inserted[-1])
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
        bias = ir.convenience.get_const_tensor(bias_value).numpy().astype(np.float64).reshape(-1)
        scale = (act.scale.astype(np.float64) * weight.scale.astype(np.float64)).astype(np.float32)
        scale = np.broadcast_to(scale, bias.shape) if scale.ndim else scale
        quantized = np.rint(bias / scale.astype(np.float64))
        if np.any(np.abs(quantized) > _INT32_MAX):
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


# ORT's WeightBiasQuantization quantizes these when their input is a per-tensor DequantizeLinear's output, and its
# QDQ propagation moves a DequantizeLinear past the others (onnxruntime/core/optimizer/qdq_transformer).
_WEIGHT_BIAS_QUANTIZED = frozenset({"Conv", "ConvTranspose", "Gemm"})
_DEQUANTIZE_MOVES_PAST = frozenset({"MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice"})


def _reaches_float_product(node: ir.Node, planned: frozenset[ir.Node]) -> bool:
    """Whether node, reading a DequantizeLinear's output at input 0, is — or passes it on to — a float Conv /
    ConvTranspose / Gemm with a constant weight, which ORT would quantize itself."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in _WEIGHT_BIAS_QUANTIZED:
        return node not in planned and len(node.inputs) > 1 and node.inputs[1] is not None \
            and node.inputs[1].const_value is not None
    if node.op_type in _DEQUANTIZE_MOVES_PAST:
        return any(index == 0 and _reaches_float_product(user, planned)
                   for output in node.outputs for user, index in output.uses())
    return False


def _channelwise_dequantized(builder: GraphBuilder, quantized: ir.Value, qparams: QParams, plan: NodePlan,
                             after: ir.Node) -> ir.Value | None:
    """A DequantizeLinear of `quantized` (the plan's requantized output) whose scale and zero point repeat the
    per-tensor ones along its channel axis, or None where neither its shape nor the product's weight gives it."""
    found = _output_channels(plan)
    if found is None:
        return None
    axis, channels = found
    base = plan.output.name or "activation"
    scale = builder.initializer(f"{base}_channel_scale", np.full(channels, qparams.scale, dtype=np.float32))
    zero_point = builder.initializer(f"{base}_channel_zero_point",
                                     np.full(channels, qparams.zero_point, dtype=qparams.dtype))
    node = builder.node("DequantizeLinear", [quantized, scale, zero_point], f"{base}_DequantizeLinear_per_channel",
                        None, attributes={"axis": axis})
    node.outputs[0].type, node.outputs[0].shape = ir.TensorType(ir.DataType.FLOAT), plan.output.shape
    builder.graph.insert_after(after, node)
    return node.outputs[0]


def _output_channels(plan: NodePlan) -> tuple[int, int] | None:
    """(axis, size) of the channels of a product's output (the same after the Relu / Clip it may be read through):
    axis 1 of a Conv's, the last of a MatMul's or Gemm's; the size from the output's shape, else the weight's."""
    node = plan.node
    axis = 1 if node.op_type in ("Conv", "ConvTranspose") else -1
    shape = plan.output.shape
    if shape is not None and len(shape) > 1 and isinstance(shape[axis], int):
        return axis, shape[axis]
    weight = node.inputs[1].shape if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if weight is None or not all(isinstance(d, int) for d in weight) or len(weight) < 2:
        return None
    if node.op_type == "Conv":
        return axis, weight[0]
    if node.op_type == "ConvTranspose":
        return axis, weight[1] * attribute(node, "group", 1)
    transposed = node.op_type == "Gemm" and attribute(node, "transB", 0)
    return axis, weight[0] if transposed else weight[-1]


def _quantized_weights(builder: GraphBuilder, plan: NodePlan, act: QParams | None) -> tuple[QParams | None, str | None]:
    """Each planned weight as int8 behind a DequantizeLinear: (the last one's qparams, how its scale was widened for
    the bias, or None). A bias holds int32 codes b / (s_x·s_w) only while the weight's scale s_w is at least
    |b| / (s_x · INT32_MAX): below that (a tiny input scale: activations near zero) the scale is widened to it, as
    ONNX Runtime's own quantizer and TFLite do. Leaving the bias float instead is no way out: ORT's
    WeightBiasQuantization quantizes a float bias beside a DequantizeLinear weight itself, without a range check,
    and its int32 codes wrap (LR-ASPP's classifier head: cosine 0.87 deployed against 1.0000 exact)."""
    node, qparams, widened = plan.node, None, None
    for spec in plan.weights:
        value = node.inputs[spec.input_index]
        weight = builder.dequantized_weight(value, spec.axis, before=node, pair_limit_axis=spec.pair_limit_axis)
        floor = None if plan.bias_index is None or act is None else \
            _bias_scale_floor(node.inputs[plan.bias_index], act, weight.qparams)
        if floor is not None:  # the first DequantizeLinear, read by nothing, goes with the unused nodes
            plain = weight.qparams.scale
            weight = builder.dequantized_weight(value, spec.axis, before=node, pair_limit_axis=spec.pair_limit_axis,
                                                scale_floor=floor)
            ratio = weight.qparams.scale.astype(np.float64) / plain.astype(np.float64)
            widened = (f"bias int32, the weight's scale widened on {int(np.count_nonzero(ratio > 1))} channel(s) "
                       f"(up to {float(ratio.max()):.3g}x) so that the bias holds at this input's scale")
        node.replace_input_with(spec.input_index, weight.dequantized)
        qparams = weight.qparams
    return qparams, widened


def _bias_scale_floor(bias_value: ir.Value, act: QParams, weight: QParams) -> np.ndarray | None:
    """The least weight scale (per channel, or one) at which every int32 bias code fits, or None where the weight's
    own scale already does. The margin is ONNX Runtime's quantizer's (1.0001)."""
    bias = np.abs(ir.convenience.get_const_tensor(bias_value).numpy().astype(np.float64).reshape(-1))
    scale = weight.scale.astype(np.float64)
    if scale.ndim and scale.size != bias.size:
        return None
    product = float(act.scale) * (scale if scale.ndim else np.float64(scale))
    if not np.any(np.rint(bias / product) > _INT32_MAX):
        return None
    floor = _BIAS_MARGIN * bias / (float(act.scale) * _INT32_MAX)
    return (floor if scale.ndim else np.max(floor, initial=0.0)).astype(np.float32)


@rewrite_form("qdq", stage=1, calibrated=True)
def _qdq(model: ir.Model, plans: Sequence[NodePlan], inputs: RewriteInputs) -> dict[str, str]:
    return InsertQdqPass(plans, inputs.ranges, inputs.config, inputs.moments)(model).notes
