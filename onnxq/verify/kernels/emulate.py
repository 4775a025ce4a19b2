"""AVX2's U8S8 integer GEMM in numpy, so that any machine can check a model for a CPU it is not running on.

MLAS's U8S8 kernel on x86 without VNNI (vpmaddubsw) adds the products of K indices 2i and 2i+1 in int16 with
saturation, then everything else in int32 (onnxq.targets; proven against ORT in tests/verify/test_emulate.py).
For each product ORT runs with that kernel (uint8 activation × int8 constant weight), this module finds the pair
sums that saturate on the real activations and the int32 error they cause; `emulated_outputs` then runs the
model with those errors added where the kernel makes them (first order: the errors are computed on the
activations of an ORT_DISABLE_ALL run), which is what an AVX2 machine would output — or, on an AVX2 machine, with
them taken away from integer operators, which is what the exact quantization (and a VNNI or ARM CPU) outputs.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxq.data.specs import Batch
from onnxq.handlers.conv import is_depthwise
from onnxq.handlers.plan import is_relu_like
from onnxq.io import page_out
from onnxq.io.irquery import attribute, constant_array, producer
from onnxq.numerics.im2col import ConvGeometry, im2col
from onnxq.numerics.pairs import gemm_view, pair_sum_violations
from onnxq.verify.kernels.narrow_view import narrow_view
from onnxq.verify.kernels.qdq_view import qdq_view
from onnxq.io.model_sessions import make_session

__all__ = ["IntegerProduct", "NodeSaturation", "SaturationEmulator", "saturation_error", "integer_products",
           "can_saturate", "this_cpu_saturates"]

_INT16_MIN, _INT16_MAX = -32768, 32767


def saturation_error(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """(int32 error [M, N] of AVX2's U8S8 product a·b against the exact one, number of saturated pair sums).

    a: uint8 [M, K]; b: int8 [K, N]. Only pairs whose weights could saturate for some a (same-sign parts adding
    beyond ±128) are computed, so a pair-limited weight costs nothing here."""
    a = np.asarray(a, dtype=np.int32)
    b = np.asarray(b, dtype=np.int32)
    half = b.shape[0] // 2
    even, odd = b[0:2 * half:2], b[1:2 * half:2]
    positive = np.maximum(even, 0) + np.maximum(odd, 0)
    negative = np.minimum(even, 0) + np.minimum(odd, 0)
    candidates = (255 * positive > _INT16_MAX) | (255 * negative < _INT16_MIN)
    error = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    saturated = 0
    for i in np.flatnonzero(candidates.any(axis=1)):
        cols = np.flatnonzero(candidates[i])
        sums = a[:, 2 * i, None] * even[i, cols] + a[:, 2 * i + 1, None] * odd[i, cols]
        delta = np.clip(sums, _INT16_MIN, _INT16_MAX) - sums
        error[:, cols] += delta
        saturated += int(np.count_nonzero(delta))
    return error, saturated


@dataclasses.dataclass(frozen=True)
class IntegerProduct:
    """A uint8 activation × int8 constant weight product that ORT's CPU runs with an integer GEMM."""

    name: str  # the quantized node, as the report names it
    activation: str  # the uint8 value (QuantizeLinear or DynamicQuantizeLinear output)
    weight: np.ndarray  # int8 [K, N]
    # The value the kernel's int32 error reaches, and the factors turning that error into its units: a float
    # output (QDQ) takes scale_a · scale_w[n]; MatMulInteger's int32 output takes it as it is (both None).
    output: str
    weight_scale: np.ndarray | None
    activation_scale: float | None
    # Run by an integer kernel even under ORT_DISABLE_ALL (MatMulInteger, MatMulIntegerToFloat, QGemm); a QDQ
    # product then runs as DequantizeLinear + float MatMul, exactly.
    integer_op: bool = True
    # A Conv (QDQ → QLinearConv): its input goes through im2col, its weight is the [K, M] of pairs.gemm_view, and
    # padding reads the activation's zero point.
    conv: ConvGeometry | None = None
    zero_point: int = 0

    def saturation(self, a: np.ndarray) -> tuple[np.ndarray, int, int]:
        """(int32 error in the output's layout, saturated pair sums, pair sums computed) for the uint8 input a."""
        if self.conv is None:
            error, saturated = saturation_error(a.reshape(-1, a.shape[-1]), self.weight)
            pair_sums = a.size // a.shape[-1] * (self.weight.shape[0] // 2) * self.weight.shape[1]
            return error.reshape(*a.shape[:-1], -1), saturated, pair_sums
        per_group = self.weight.shape[1] // self.conv.group
        out = self.conv.output_shape(a.shape[2:])
        errors, saturated = [], 0
        for g in range(self.conv.group):
            columns = im2col(a, self.conv, self.zero_point, g)
            error, count = saturation_error(columns, self.weight[:, g * per_group:(g + 1) * per_group])
            errors.append(np.moveaxis(error.reshape(a.shape[0], *out, per_group), -1, 1))
            saturated += count
        pair_sums = a.shape[0] * int(np.prod(out)) * (self.weight.shape[0] // 2) * self.weight.shape[1]
        return np.concatenate(errors, axis=1), saturated, pair_sums


def integer_products(model: ir.Model) -> list[IntegerProduct]:
    """The U8S8 products of a QDQ (DequantizeLinear → MatMul/Gemm), QOperator (MatMulIntegerToFloat, QGemm) or
    dynamic (MatMulInteger) model."""
    found = []
    for node in model.graph:
        if node.op_type in ("MatMul", "Gemm"):
            operands = _qdq_operands(node)
            if operands is None or operands[3].ndim != 2:
                continue
            x_dq, w_dq, activation, weight = operands
            gemm = node.op_type == "Gemm"
            weight = weight.T if gemm and attribute(node, "transB") else weight
            alpha = attribute(node, "alpha", 1.0) if gemm else 1.0
            found.append(IntegerProduct(node.name or "", activation.name, weight, node.outputs[0].name,
                                        constant_array(w_dq.inputs[1]).astype(np.float64) * alpha,
                                        float(constant_array(x_dq.inputs[1])), integer_op=False))
        elif node.op_type == "Conv" and (product := _qdq_conv(node)) is not None:
            found.append(product)
        elif node.op_type in ("MatMulIntegerToFloat", "QGemm") and node.domain == "com.microsoft":
            a, b, a_scale, b_scale, a_zp = (
                (node.inputs[i] for i in (0, 1, 2, 3, 4)) if node.op_type == "MatMulIntegerToFloat"
                else (node.inputs[i] for i in (0, 3, 1, 4, 2)))
            weight, zp = constant_array(b), constant_array(a_zp)
            if weight is None or weight.dtype != np.int8 or weight.ndim != 2 or zp is None or zp.dtype != np.uint8:
                continue
            gemm = node.op_type == "QGemm"
            weight = weight.T if gemm and attribute(node, "transB") else weight
            alpha = attribute(node, "alpha", 1.0) if gemm else 1.0
            found.append(IntegerProduct(node.name or "", a.name, weight, node.outputs[0].name,
                                        constant_array(b_scale).astype(np.float64) * alpha,
                                        float(constant_array(a_scale))))
        elif node.op_type == "MatMulInteger":
            # Per tensor (DynamicQuantizeLinear) or per token (a uint8 Cast): the kernel sees the uint8 values.
            weight = constant_array(node.inputs[1])
            if node.inputs[0].dtype != ir.DataType.UINT8 or weight is None or weight.dtype != np.int8 \
                    or weight.ndim != 2:
                continue
            name = (node.name or "").removesuffix("_MatMulInteger")
            found.append(IntegerProduct(name, node.inputs[0].name, weight, node.outputs[0].name, None, None))
    return found


def _qdq_operands(node: ir.Node) -> tuple[ir.Node, ir.Node, ir.Value, np.ndarray] | None:
    """(the activation's DequantizeLinear, the weight's, the uint8 activation it reads, the int8 weight) of a uint8
    activation × int8 constant weight product in QDQ form, or None. The uint8 activation is a QuantizeLinear's
    output, or (format qlinear) of ops that moved such values on the integers (MaxPool, Reshape)."""
    x_dq, w_dq = producer(node.inputs[0], "DequantizeLinear"), producer(node.inputs[1], "DequantizeLinear")
    activation = x_dq.inputs[0] if x_dq is not None else None
    if activation is None or activation.producer() is None:  # a constant: not an activation
        return None
    weight = constant_array(w_dq.inputs[0]) if w_dq is not None else None
    zero_point = constant_array(x_dq.inputs[2]) if len(x_dq.inputs) > 2 else None
    if weight is None or weight.dtype != np.int8 or zero_point is None or zero_point.dtype != np.uint8:
        return None
    return x_dq, w_dq, activation, weight


def _qdq_conv(node: ir.Node) -> IntegerProduct | None:
    """DequantizeLinear (uint8 activation, int8 weight) → Conv → QuantizeLinear, as ORT's QLinearConv runs it on the
    U8S8 GEMM — except depthwise, whose kernel does not saturate (measured: tests/handlers/test_conv.py)."""
    operands = _qdq_operands(node)
    if operands is None or not _requantized(node.outputs[0]):
        return None
    x_dq, w_dq, activation, weight = operands
    if is_depthwise(node, weight.shape):
        return None
    group = int(attribute(node, "group", 1))
    n = weight.ndim - 2
    geometry = ConvGeometry(tuple(weight.shape[2:]), tuple(attribute(node, "strides", (1,) * n)),
                            tuple(attribute(node, "dilations", (1,) * n)), tuple(attribute(node, "pads", ())), group,
                            str(attribute(node, "auto_pad", "NOTSET")))
    return IntegerProduct(node.name or "", activation.name, np.ascontiguousarray(gemm_view(weight).T),
                          node.outputs[0].name, constant_array(w_dq.inputs[1]).astype(np.float64),
                          float(constant_array(x_dq.inputs[1])), integer_op=False, conv=geometry,
                          zero_point=int(constant_array(x_dq.inputs[2])))


def _requantized(value: ir.Value) -> bool:
    """Whether a Conv output goes into QuantizeLinear (directly, or through the Relu / Clip ORT fuses): the pattern
    ORT runs as QLinearConv. Else the Conv runs in float after DequantizeLinear, which cannot saturate."""
    uses = list(value.uses())
    if len(uses) == 1 and is_relu_like(uses[0][0]) and not value.is_graph_output():
        value = uses[0][0].outputs[0]
        uses = list(value.uses())
    return bool(uses) and not value.is_graph_output() and all(u[0].op_type == "QuantizeLinear" for u in uses)


@dataclasses.dataclass(frozen=True)
class NodeSaturation:
    name: str
    # False: no uint8 activation can saturate its weights (pair-limited): nothing to run, nothing counted.
    can_saturate: bool
    pair_sums: int  # pair sums computed by the kernel over the verification inputs (when it can saturate)
    saturated: int
    max_abs_error: float  # on the node's output (its own units: float, or int32 for MatMulInteger)

    @property
    def fraction(self) -> float:
        return self.saturated / self.pair_sums if self.pair_sums else 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "can_saturate": self.can_saturate, "pair_sums": self.pair_sums,
                "saturated": self.saturated, "fraction": self.fraction, "max_abs_error": self.max_abs_error}


@functools.lru_cache(maxsize=1)
def this_cpu_saturates() -> bool:
    """Whether ORT's U8S8 kernel saturates on this CPU: asked of the kernel itself (255·127 + 255·127 in one
    pair), so it holds where /proc/cpuinfo is absent or its flags mislead."""
    graph = ir.Graph([ir.Value(name="a", type=ir.TensorType(ir.DataType.UINT8), shape=ir.Shape([1, 2]))], [],
                     nodes=[], opset_imports={"": 13})
    b = ir.Value(name="b", const_value=ir.tensor(np.full((2, 1), 127, np.int8), name="b"))
    graph.register_initializer(b)
    node = ir.node("MatMulInteger", [graph.inputs[0], b], name="probe")
    graph.append(node)
    graph.outputs.append(node.outputs[0])
    node.outputs[0].name = "y"
    node.outputs[0].type = ir.TensorType(ir.DataType.INT32)
    session = make_session(ir.Model(graph, ir_version=8), optimize=False)
    return int(session.run(None, {"a": np.full((1, 2), 255, np.uint8)})[0][0, 0]) != 2 * 255 * 127


def can_saturate(weight: np.ndarray) -> bool:
    """Whether some uint8 activation makes one of the weight's K pair sums leave int16."""
    return bool(np.any(pair_sum_violations(weight, 0, limit=_INT16_MAX // 255)))


class SaturationEmulator:
    """Streams batches through the model under ORT_DISABLE_ALL (the base run) and corrects it per batch into
    (AVX2's outputs, the exact outputs); either is None when equal to the base run's.

    In the base run a QDQ product is exact (float MatMul); an integer operator is exact too, except on a CPU
    whose U8S8 kernel saturates (`base_saturates`), where it already computes AVX2's result. So AVX2's outputs
    add the emulated error where the base run is exact, and the exact outputs subtract it where the base run
    saturated. Per node, the saturated pair sums are counted on the way."""

    def __init__(self, model: ir.Model, output_names: Sequence[str], base_saturates: bool) -> None:
        self.output_names = list(output_names)
        self.base_saturates = base_saturates
        model = qdq_view(model)  # QLinearMatMul / QLinearConv: their exact float product, then the requantization
        model = narrow_view(model)  # a wide MatMulNBits in slices: not its whole weight dequantized each run
        self._model = model
        self.products = integer_products(model)
        self.stats = {p.name: [0, 0, 0.0] for p in self.products}
        self.risky = [p for p in self.products if can_saturate(p.weight)]
        for product in self.products:  # read once: a spilled weight need not stay resident (risky ones come back)
            page_out(product.weight)
        self._activations = list(dict.fromkeys(p.activation for p in self.risky))
        # One base run yields the outputs and the risky products' activations.
        self._base = make_session(_exposing(model, self._activations), optimize=False)
        self._injected = make_session(_injecting(model, self.risky), optimize=False) if self.risky else None

    def run(self, batch: Batch) -> tuple[list[np.ndarray], list[np.ndarray] | None, list[np.ndarray] | None]:
        """(base outputs, AVX2's outputs or None, exact outputs or None). The model's memory-mapped weights (the
        run's spill file: SmolLM2's 157 MB of int8) are paged out after the runs, so that the comparisons that
        follow each batch are not resident beside them (Optimum's SmolLM2 export: the exact pass 914 -> 875 MiB);
        the next run reads them back from the page cache."""
        try:
            return self._run(batch)
        finally:
            page_out(self._model)

    def _run(self, batch: Batch) -> tuple[list[np.ndarray], list[np.ndarray] | None, list[np.ndarray] | None]:
        fetched = self._base.run(self.output_names + self._activations, batch)
        base = fetched[:len(self.output_names)]
        if not self.risky:
            return base, None, None
        activations = dict(zip(self._activations, fetched[len(self.output_names):]))
        to_avx2, to_exact = dict(batch), dict(batch)
        avx2_differs = exact_differs = False
        for p in self.risky:
            error, saturated, pair_sums = p.saturation(activations[p.activation])
            self.stats[p.name][0] += pair_sums
            self.stats[p.name][1] += saturated
            if p.weight_scale is None or p.activation_scale is None:
                delta = error.astype(np.int32)
            else:
                weight_scale = p.weight_scale if p.conv is None or p.weight_scale.ndim == 0 else \
                    p.weight_scale.reshape(-1, *([1] * len(p.conv.kernel)))  # per channel, on axis 1
                delta = (error * p.activation_scale * weight_scale).astype(np.float32)
            if saturated:
                self.stats[p.name][2] = max(self.stats[p.name][2], float(np.abs(delta).max()))
            saturated_in_base = p.integer_op and self.base_saturates
            to_avx2[_error_input(p.output)] = np.zeros_like(delta) if saturated_in_base else delta
            to_exact[_error_input(p.output)] = -delta if saturated_in_base else np.zeros_like(delta)
            avx2_differs |= bool(saturated) and not saturated_in_base
            exact_differs |= bool(saturated) and saturated_in_base
        avx2 = self._injected.run(self.output_names, to_avx2) if avx2_differs else None
        exact = self._injected.run(self.output_names, to_exact) if exact_differs else None
        return base, avx2, exact

    @property
    def nodes(self) -> tuple[NodeSaturation, ...]:
        risky = {p.name for p in self.risky}
        return tuple(NodeSaturation(name, name in risky, total, sat, err)
                     for name, (total, sat, err) in self.stats.items())


def _error_input(output: str) -> str:
    return f"{output}_avx2_error"


def _exposing(model: ir.Model, names: Sequence[str]) -> ir.Model:
    if not names:
        return model
    exposed = model.clone()
    values = {v.name: v for n in exposed.graph for v in n.outputs}
    for name in dict.fromkeys(names):
        if not values[name].is_graph_output():
            exposed.graph.outputs.append(values[name])
    return exposed


def _injecting(model: ir.Model, products: Sequence[IntegerProduct]) -> ir.Model:
    """A copy with an Add after each product's output, fed by a graph input carrying the kernel's error."""
    injected = model.clone()
    graph = injected.graph
    values = {v.name: v for n in graph for v in n.outputs}
    for p in products:
        value = values[p.output]
        dtype = ir.DataType.INT32 if p.weight_scale is None else ir.DataType.FLOAT
        delta = ir.Value(name=_error_input(p.output), type=ir.TensorType(dtype))
        users = list(value.uses())
        add = ir.node("Add", [value, delta], name=f"{p.output}_avx2_error_Add")
        graph.insert_after(value.producer(), add)
        graph.inputs.append(delta)
        for user, index in users:
            user.replace_input_with(index, add.outputs[0])
        if value.is_graph_output():
            graph.outputs[graph.outputs.index(value)] = add.outputs[0]
            add.outputs[0].name, value.name = p.output, f"{p.output}_before_avx2_error"
    return injected
