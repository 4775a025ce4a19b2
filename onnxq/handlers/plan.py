"""What a handler decides for one node. Plans are data; passes act on them."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnxq.errors import UnsupportedModelError

__all__ = ["WeightSpec", "NodePlan", "Skip", "constant_float", "constant_weight", "PlanContext", "default_form",
           "not_float32", "unusable_weight", "quantized_output", "is_relu_like", "TINY_WEIGHT",
           "contrib_kernel_refusal"]

# Below this largest |w|, an int8 weight scale (|w| / 127) times an activation scale underflows float32's normal
# range (1.2e-38): the product would come out 0 (or denormal) instead of the float result.
TINY_WEIGHT = 1e-30


@dataclasses.dataclass(frozen=True)
class WeightSpec:
    """A constant input stored as int8; `axis` is the per-channel axis, None for one scale per tensor. For 4-bit
    block-wise weights, `axis` is the output-feature axis (the blocks run along the other one, K).

    `pair_limit_axis`: the weight's K axis when its K pairs must be limited so that the target's U8S8 kernel cannot
    saturate (numerics.pairs); None when the target's kernels need no limit (or no integer kernel reads it)."""

    input_index: int
    axis: int | None
    pair_limit_axis: int | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class NodePlan:
    node: ir.Node
    # Input slots quantized per tensor: from calibrated ranges (static) or at run time (dynamic).
    activations: tuple[int, ...] = ()
    weights: tuple[WeightSpec, ...] = ()
    # Gemm's C stored as int32 with scale s_activation * s_weight (per channel).
    bias_index: int | None = None
    # Why C stays float when it does (shown in the report).
    bias_note: str | None = None
    # Activation quantized per token (one scale per row, at run time) instead of per tensor.
    per_token: bool = False
    # The rewrite that applies it (passes.forms.registry): "" for the mode's own (default_form); a planner names another.
    form: str = ""
    # A value after the node requantized with its calibrated range (static Conv: ORT fuses DequantizeLinear → Conv →
    # QuantizeLinear into QLinearConv): the node's output, or the activation that alone reads it. None: float.
    output: ir.Value | None = None
    # Where a node inside a subgraph is (irquery.Body.where: "If 'x' then_branch"); "" in the main graph.
    scope: str = ""
    # Why the node takes another form than its run's mode gives ("dynamic: …"), shown in the report; "" when not.
    form_note: str = ""

    @property
    def weight_only(self) -> bool:
        return not self.activations


@dataclasses.dataclass(frozen=True, eq=False)
class Skip:
    """A node a handler leaves in float, and why (shown to the user)."""

    node: ir.Node
    reason: str


@dataclasses.dataclass(frozen=True)
class PlanContext:
    per_channel: bool
    # "static", "dynamic" or "weight-only": the last two quantize only activation × constant-weight products.
    mode: str
    quantize_activation_matmul: bool
    gemm_bias: str
    # Whether integer weights must keep K pairs within the AVX2 U8S8 limit (targets.needs_pair_limit).
    limit_pairs: bool = False
    # Activation × weight products take per-token activations (numerics.per_token).
    per_token: bool = False
    # Activations are asymmetric: a Relu's output range starts at the zero point 0, so a requantized output may be
    # taken after a Relu that ORT then fuses away (handlers.conv).
    fold_relu: bool = True
    # Dynamic mode quantizes Conv as ConvInteger (QuantConfig.dynamic_conv).
    dynamic_conv: bool = False
    # Static MatMuls requantize their output too (the output format's products take one: QLinearMatMul).
    requantize_products: bool = False
    # The output format takes ONNX-standard operators only (no com.microsoft kernel such as DynamicQuantizeLSTM).
    standard_ops_only: bool = False
    # Whether uint8 activations quantized at run time inside a kernel (DynamicQuantizeLSTM), whatever the configured
    # activation dtype, need int8 weights' K pairs limited on the target.
    limit_runtime_pairs: bool = False
    # Why the target runs no int8 activations ("" when it does): a node weight-only blocks leave float has no other
    # mode there either (targets.int8_activations_refusal).
    no_int8_activations: str = ""

    @property
    def weight_only(self) -> bool:
        """Constant weights only (block-wise, 4 or 8 bits), activations stay float."""
        return self.mode == "weight-only"


def default_form(mode: str, plan: NodePlan) -> str:
    """The rewrite form of a plan whose planner named none: weight-only models are block-quantized; activations
    quantized at run time (dynamic mode, or per token in any mode) take the dynamic form; the rest calibrated QDQ."""
    if mode == "weight-only":
        return "blockwise"
    return "dynamic" if mode == "dynamic" or plan.per_token else "qdq"


def constant_float(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The value's float32 constant tensor (initializer or Constant node), or None.

    An initializer that is also a graph input can be overridden at run time, so it is not a constant.
    """
    if value is None or value.is_graph_input():
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None or tensor.dtype != ir.DataType.FLOAT:
        return None
    return tensor


def constant_weight(node: ir.Node, names: tuple[str, str]) -> ir.TensorProtocol | Skip:
    """Input 1's float32 constant of an activation (input 0) × weight (input 1) product, or why the node is
    skipped; `names` are the op's names for the two inputs (Gemm's A and B, Conv's X and W)."""
    if constant_float(node.inputs[0]) is not None:
        return Skip(node, f"{names[0]} is a constant; only activation × weight is supported")
    weight = constant_float(node.inputs[1])
    if weight is None:
        return Skip(node, f"{names[1]} is {not_float32(node.inputs[1]) or 'not a constant float32 weight'}")
    return weight


def not_float32(value: ir.Value) -> str | None:
    """Why a constant weight is not quantized for its type ("a float16 constant"), or None when it is float32."""
    tensor = ir.convenience.get_const_tensor(value) if value is not None else None
    if tensor is None or tensor.dtype == ir.DataType.FLOAT:
        return None
    name = {"DOUBLE": "float64"}.get(tensor.dtype.name, tensor.dtype.name.lower())
    return f"a {name} constant; onnxq quantizes float32 weights (convert the model to float32 first)"


def unusable_weight(node: ir.Node, value: ir.Value, tensor: ir.TensorProtocol) -> str | None:
    """Why a weight stays float when all its values are tiny but not all zero, or None. NaN or Inf is refused: the
    float model itself computes NaN, so there is nothing sound to quantize. (One read of the weight for both.)"""
    values = tensor.numpy()  # its extremes, not np.abs's copy of it (a tied vocabulary table: 113 MB at load)
    largest = float(np.maximum(-np.min(values, initial=0.0), np.max(values, initial=0.0)))  # NaN propagates
    if not np.isfinite(largest):
        what = "Inf" if largest == np.inf else "NaN"
        raise UnsupportedModelError(f"weight {value.name!r} of {node.op_type} {node.name!r} holds {what} — the float "
                                    "model is broken (its outputs are not finite); fix the export or the training run")
    if 0.0 < largest < TINY_WEIGHT:
        return f"largest |weight| is {largest:.3g} (< {TINY_WEIGHT:g}): its quantization scale would underflow float32"
    return None


def quantized_output(node: ir.Node, fold_relu: bool) -> ir.Value | None:
    """The value whose calibrated range requantizes the node's output: the output, or the Relu / Clip(min ≥ 0) that
    alone reads it (fold_relu: asymmetric activations, whose zero point is then 0); None for a graph output (its
    float values are the user's)."""
    out = node.outputs[0]
    if out.is_graph_output():
        return None
    uses = list(out.uses())
    if fold_relu and len(uses) == 1 and is_relu_like(uses[0][0]) and not uses[0][0].outputs[0].is_graph_output():
        return uses[0][0].outputs[0]
    return out


def is_relu_like(node: ir.Node) -> bool:
    """A Relu, or a Clip whose minimum is ≥ 0: ORT folds it into the QuantizeLinear after it."""
    if node.op_type == "Relu":
        return True
    if node.op_type != "Clip" or len(node.inputs) < 2 or node.inputs[1] is None:
        return False
    low = ir.convenience.get_const_tensor(node.inputs[1])
    return low is not None and low.size == 1 and float(low.numpy().reshape(-1)[0]) >= 0.0


def weight_only_refusal(node: ir.Node, ctx: PlanContext, other_mode: str) -> Skip:
    """A node weight-only blocks leave float: the mode that quantizes it (other_mode), unless the target runs no int8
    activations — then no mode does there, and a CPU target is the way (a CNN for CUDA: nothing to quantize)."""
    hint = (f"nor int8 activations on this target: {ctx.no_int8_activations} — --target portable quantizes it for "
            "CPUs" if ctx.no_int8_activations else other_mode)
    return Skip(node, f"weight-only mode block-quantizes MatMul/Gemm/Gather for MatMulNBits; ORT has no block-wise "
                      f"{node.op_type} kernel ({hint})")


def contrib_kernel_refusal(node: ir.Node, ctx: PlanContext, kernel: str, *, blockwise: bool = True) -> Skip | None:
    """Why a node whose only integer kernel is ORT's com.microsoft `kernel` stays float under this context: format
    qlinear allows standard ops only; weight-only mode has block-wise kernels for MatMul/Gemm/Gather alone (blockwise
    False: the kernel serves weight-only mode too)."""
    if blockwise and ctx.weight_only:
        return weight_only_refusal(node, ctx, f"use dynamic or static mode: {kernel}")
    if ctx.standard_ops_only:
        return Skip(node, f"ONNX has no integer {node.op_type} (ORT's {kernel} is com.microsoft); use format qdq or "
                          "qoperator to quantize it")
    return None
