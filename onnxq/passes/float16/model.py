"""A float16 model quantized in float32 arithmetic: a clone whose float16 weights, constants, values and Casts are
float32 — exact, every float16 number is a float32 one — and whose inputs and outputs keep their float16 type
through one Cast each, so that its data and whatever feeds it stay as they are.

Why: onnxq's calibration, scales, GPTQ and int8 kernels work in float32 (ORT's QuantizeLinear and integer kernels
take float32 on the CPU, and ORT runs most float16 CPU ops through Casts to float32 anyway); --target cuda makes
the float arithmetic float16 again afterwards (passes.float16.compute). The model as given stays the verification's
reference, so the quantized model is compared with the float16 arithmetic the user has.

bfloat16 models stay refused: ORT's CPU runs few bfloat16 kernels, so the reference could not run here."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from onnxq.io.memory import page_out
from onnxq.io.irquery import bodies, model_names, unique_name

__all__ = ["computed_in_float32"]

_HALF, _FLOAT = ir.DataType.FLOAT16, ir.DataType.FLOAT
# Attributes that name an element type: Cast's `to`; EyeLike's and the Random* generators' `dtype`.
_TYPE_ATTRIBUTES = ("to", "dtype")


def computed_in_float32(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(the float32 clone, a note) for a model holding float16 tensors; (the model itself, None) otherwise."""
    if not _holds_float16(model):
        return model, None
    upcast = model.clone()
    graph = upcast.graph
    if any(v.dtype is None for v in graph.outputs):  # what an output's undeclared type is: ONNX's inference
        ShapeInferencePass(strict_mode=False)(upcast)
    # An input with an initializer (a default, IR < 4) is a constant: it goes float32 with the weights.
    half_inputs = [v for v in graph.inputs if v.dtype == _HALF and v.const_value is None]
    half_outputs = [i for i, v in enumerate(graph.outputs) if v.dtype == _HALF and not v.is_graph_input()]
    constants = _upcast(upcast)
    taken = model_names(upcast)
    for value in half_inputs:
        _read_as_float32(graph, value, taken)
    for index in half_outputs:
        _written_as_float16(graph, index, taken)
    io = (f"; its {len(half_inputs)} float16 input(s) and {len(half_outputs)} output(s) keep their type through a "
          "Cast" if half_inputs or half_outputs else "")
    return upcast, (f"float16 model: quantized in float32 arithmetic (its {constants} float16 constant(s) made "
                    f"float32, exactly){io}; verified against the float16 model as given")


def _graphs(model: ir.Model) -> list[ir.Graph]:
    return [model.graph, *(body.graph for body in bodies(model.graph))]


def _holds_float16(model: ir.Model) -> bool:
    for graph in _graphs(model):
        if any(v.dtype == _HALF for v in (*graph.inputs, *graph.initializers.values())):
            return True
    for node in model.graph.all_nodes():
        if any(v.dtype == _HALF for v in node.outputs) or any(_half_tensor(a) for a in node.attributes.values()):
            return True
    return False


def _half_tensor(attr: ir.Attr) -> bool:
    return attr.type == ir.AttributeType.TENSOR and attr.value.dtype == _HALF


def _upcast(model: ir.Model) -> int:
    """Every float16 initializer, tensor attribute, value type and element-type attribute made float32, in place;
    the constants changed."""
    constants = 0
    for graph in _graphs(model):
        for value in graph.initializers.values():
            if value.dtype == _HALF:
                value.const_value = _as_float32(value.const_value, value.name)
                constants += 1
        _retype([v for v in graph.inputs if v.dtype == _HALF])
    for node in model.graph.all_nodes():
        for name, attr in list(node.attributes.items()):
            if _half_tensor(attr):
                node.attributes[name] = ir.AttrTensor(name, ir.tensor(attr.value.numpy().astype(np.float32)))
                constants += 1
            elif name in _TYPE_ATTRIBUTES and attr.type == ir.AttributeType.INT and attr.value == _HALF.value \
                    and node.domain in ("", "ai.onnx"):
                node.attributes[name] = ir.AttrInt64(name, _FLOAT.value)
        _retype([v for v in node.outputs if v.dtype == _HALF])
    for graph in _graphs(model):  # initializers last: a value's type object may be shared with its clone's
        _retype([v for v in graph.initializers.values() if v.dtype == _HALF])
    return constants


def _as_float32(tensor: ir.TensorProtocol, name: str | None) -> ir.TensorProtocol:
    """The float32 form of a float16 weight, made each time it is read: no float32 copy of the whole model stays in
    memory (a weight is read a few times — planning, calibration's sessions, the rewrite — and the run's spill file
    takes the float weights it keeps: io.spill). The float16 source's memory-mapped pages are dropped once read, so
    that converting a whole model does not hold the float16 file resident beside its float32 form."""

    def converted() -> ir.TensorProtocol:
        wide = ir.tensor(tensor.numpy().astype(np.float32))
        page_out(tensor)
        return wide

    return ir.LazyTensor(converted, _FLOAT, tensor.shape, name=name)


def _retype(values: list[ir.Value]) -> None:
    for value in values:  # a new type object: a clone's values may share theirs
        value.type = ir.TensorType(_FLOAT)


def _read_as_float32(graph: ir.Graph, value: ir.Value, taken: set[str]) -> None:
    """The graph input stays float16; its readers read a float32 Cast of it."""
    value.type = ir.TensorType(_HALF)
    wide = ir.Value(name=unique_name(f"{value.name}_float32", taken), type=ir.TensorType(_FLOAT), shape=value.shape)
    value.replace_all_uses_with(wide)  # graph outputs keep the input itself: a float16 pass-through
    cast = ir.node("Cast", [value], {"to": _FLOAT.value}, outputs=[wide],
                   name=unique_name(f"{value.name}_to_float32", taken))
    if len(graph):
        graph.insert_before(next(iter(graph)), cast)
    else:
        graph.append(cast)


def _written_as_float16(graph: ir.Graph, index: int, taken: set[str]) -> None:
    """Graph output `index` (now float32) is written through a Cast to float16 under its own name."""
    value = graph.outputs[index]
    name = value.name
    value.name = unique_name(f"{name}_float32", taken)
    half = ir.Value(name=name, type=ir.TensorType(_HALF), shape=value.shape)
    graph.append(ir.node("Cast", [value], {"to": _HALF.value}, outputs=[half],
                         name=unique_name(f"{name}_to_float16", taken)))
    graph.outputs[index] = half
