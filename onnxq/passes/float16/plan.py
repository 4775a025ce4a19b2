"""Which nodes of a graph compute in float16 and which stay float32, with why: the plan for passes.float16.compute.

A node computes in float16 when its operator has a float16 form for its float operands (the type constraint of
its schema at the model's opset: ONNX's, else onnxruntime's, which types com.microsoft's operators and the builders'
SimplifiedLayerNormalization; passes.graph.op_signatures) and nothing it reads
or makes is beyond float16: a constant with values past ±65504 or nonzero values below its smallest subnormal
(2⁻²⁴: an epsilon of 1e-12 would become 0), or an activation observed past FLOAT16_SAFE (when magnitudes on data are given).
Only its operands whose type variable admits float16 change (Resize's scales stay float32). Nodes that own
subgraphs stay float32 with their bodies; so do operators that make float values from attributes (Range,
ConstantOfShape, random generators): Casts join them where needed.

Element types that the model leaves unstated are propagated through the same schemas first (a quantized model's
intermediate values are often untyped).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from onnxq.passes.graph.op_signatures import Signature, canonical_domain, signature

__all__ = ["FLOAT16_MAX", "FLOAT16_SAFE", "Operands", "Kept", "Float16Plan", "plan_float16", "element_types"]

FLOAT16_MAX = 65504.0
# An activation observed beyond this stays float32: headroom for values the calibration data did not reach.
FLOAT16_SAFE = FLOAT16_MAX / 4
_TINY = 2.0 ** -24  # float16's smallest subnormal
_SMALLEST_NORMAL = 2.0 ** -14
_FLOAT = ir.DataType.FLOAT

# Float values made from attributes: the attribute would have to change too.
_FROM_ATTRIBUTES = frozenset({"Range", "ConstantOfShape", "RandomNormal", "RandomUniform", "RandomNormalLike",
                              "RandomUniformLike", "EyeLike", "Multinomial", "Bernoulli"})


@dataclasses.dataclass(frozen=True)
class Operands:
    """The float32 inputs and outputs (by position) of a node that become float16."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Kept:
    """Why a node stays float32: a kind of reason (counted in the summary) and the detail (in the JSON)."""

    kind: str
    detail: str


@dataclasses.dataclass(frozen=True)
class Float16Plan:
    converted: dict[ir.Node, Operands]
    kept: dict[str, Kept]  # node name → why it stays float32
    types: dict[ir.Value, ir.DataType]  # every element type known or propagated


def plan_float16(graph: ir.Graph, opsets: Mapping[str, int], magnitudes: Mapping[str, float] | None = None
                 ) -> Float16Plan:
    """opsets: the model's opset per domain. magnitudes: max |x| observed per value name (calibration.magnitudes);
    None: constants are checked, activations not."""
    types = element_types(graph, opsets)
    converted: dict[ir.Node, Operands] = {}
    kept: dict[str, Kept] = {}
    for node in graph:
        floats = [v for v in (*node.inputs, *node.outputs) if v is not None and types.get(v) == _FLOAT]
        if not floats or node.op_type == "Constant":  # a constant: its float16 readers take a float16 copy
            continue
        operands = _float16_operands(node, opsets, types)
        reason = _keep_reason(node, operands, magnitudes or {})
        if reason is None:
            converted[node] = operands
        else:
            kept[node.name or node.op_type] = reason
    return Float16Plan(converted, kept, types)


def _keep_reason(node: ir.Node, operands: Operands | None, magnitudes: Mapping[str, float]) -> Kept | None:
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
        return Kept("owning subgraphs", "it owns subgraphs, which stay float32")
    if node.op_type in _FROM_ATTRIBUTES:
        return Kept("values from attributes", f"{node.op_type} makes its float values from attributes")
    if operands is None or not (operands.inputs or operands.outputs):
        return Kept("no float16 form", f"{node.domain + '.' if node.domain else ''}{node.op_type} has no float16 "
                                       "form here, or reads a value of unknown type beside a float one")
    for i in operands.inputs:
        problem = _constant_problem(node.inputs[i])
        if problem is not None:
            return problem
    values = [node.inputs[i] for i in operands.inputs] + [node.outputs[i] for i in operands.outputs]
    for value in values:
        if magnitudes.get(value.name or "", 0.0) > FLOAT16_SAFE:
            return Kept("activations past float16's range", f"{value.name} was observed up to "
                                                              f"{magnitudes[value.name]:.3g}, past {FLOAT16_SAFE:g}")
    return None


def _constant_problem(value: ir.Value) -> Kept | None:
    """Why a constant cannot be float16: values past its range, or a small constant (an epsilon, a Clip's floor)
    that would become 0 — a weight's few values below 2⁻²⁴ becoming 0 changes nothing that matters."""
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None:
        return None
    array = np.abs(tensor.numpy().astype(np.float64, copy=False))
    finite = array[np.isfinite(array)]  # inf and NaN are float16 values too
    largest = float(finite.max()) if finite.size else 0.0
    if largest > FLOAT16_MAX:
        return Kept("constants past float16's range", f"constant {value.name} holds {largest:.3g}, past "
                                                         f"{FLOAT16_MAX:g}")
    if 0.0 < largest < _SMALLEST_NORMAL and (finite[finite > 0] < _TINY).any():
        return Kept("small constants float16 makes 0", f"constant {value.name} holds "
                                                         f"{finite[finite > 0].min():.3g}, which float16 makes 0")
    return None


def _float16_operands(node: ir.Node, opsets: Mapping[str, int], types: Mapping[ir.Value, ir.DataType]
                      ) -> Operands | None:
    """The float32 operands whose type admits float16 (None: no signature for this operator, or a value of unknown
    type bound to the same type variable as one of them)."""
    sig = _signature(node, opsets)
    if sig is None:
        return None
    admits = {name for name, allowed in sig.admits.items() if "tensor(float16)" in allowed}
    operands = Operands(_admitted(node.inputs, sig.input_type, admits, types),
                        _admitted(node.outputs, sig.output_type, admits, types))
    return None if _untyped_partner(node, sig, operands, types) else operands


def _untyped_partner(node: ir.Node, sig: Signature, operands: Operands, types: Mapping[ir.Value, ir.DataType]
                     ) -> bool:
    """Whether a value of unknown type shares a type variable with a converted one: ONNX binds them to one type,
    and which that is cannot be told, so the node stays float32 (a Cast joins it wherever needed)."""
    converted = {sig.input_type(i) for i in operands.inputs} | {sig.output_type(i) for i in operands.outputs}
    for values, type_of in ((node.inputs, sig.input_type), (node.outputs, sig.output_type)):
        for i, value in enumerate(values):
            if value is not None and value not in types and type_of(i) in converted:
                return True
    return False


def _admitted(values, type_of, admits: set[str], types: Mapping[ir.Value, ir.DataType]) -> tuple[int, ...]:
    """The positions of float32 values whose formal parameter's type admits float16."""
    return tuple(i for i, v in enumerate(values) if v is not None and types.get(v) == _FLOAT and type_of(i) in admits)


def _signature(node: ir.Node, opsets: Mapping[str, int]) -> Signature | None:
    return signature(node.domain, node.op_type, opsets.get(canonical_domain(node.domain), 1))


def element_types(graph: ir.Graph, opsets: Mapping[str, int]) -> dict[ir.Value, ir.DataType]:
    """Every value's element type: as stated, from its constant, or propagated through the node that makes it."""
    types: dict[ir.Value, ir.DataType] = {}
    for value in (*graph.inputs, *graph.initializers.values()):
        known = value.dtype or (value.const_value.dtype if value.const_value is not None else None)
        if known is not None:
            types[value] = known
    for node in graph:
        for value in node.inputs:
            if value is not None and value not in types:
                known = value.dtype or (value.const_value.dtype if value.const_value is not None else None)
                if known is not None:  # a value of the graph around a subgraph, typed where it is made
                    types[value] = known
        for index, value in enumerate(node.outputs):
            known = value.dtype or _propagated(node, index, opsets, types)
            if known is not None:
                types[value] = known
    return types


def _propagated(node: ir.Node, index: int, opsets: Mapping[str, int], types: Mapping[ir.Value, ir.DataType]
                ) -> ir.DataType | None:
    """An output's type from its node: Cast's `to`, a Constant's value, or the signature (a concrete type, or a
    type variable bound by an input of known type)."""
    if node.op_type == "Cast" and "to" in node.attributes:
        return ir.DataType(node.attributes["to"].as_int())
    if node.op_type == "Constant" and "value" in node.attributes:
        return node.attributes["value"].as_tensor().dtype
    sig = _signature(node, opsets)
    if sig is None or not sig.outputs:
        return None
    type_str = sig.output_type(index)
    if type_str.startswith("tensor("):
        return _CONCRETE.get(type_str)
    for i, value in enumerate(node.inputs):
        if value is not None and value in types and sig.inputs and sig.input_type(i) == type_str:
            return types[value]
    return None


_CONCRETE = {"tensor(float)": ir.DataType.FLOAT, "tensor(float16)": ir.DataType.FLOAT16,
             "tensor(int64)": ir.DataType.INT64, "tensor(int32)": ir.DataType.INT32, "tensor(bool)": ir.DataType.BOOL}
