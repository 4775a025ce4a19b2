"""A float32 model made float16 through and through, as a user's float16 export is: its weights, constants, value
types, float inputs and outputs and Casts to float. Constants past float16's range are clipped to ±65504 (a mask's
-3.4e38 becomes the largest float16, as exporters write it). Built on onnx protos, independently of onnxq's own
passes."""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

__all__ = ["as_float16"]

_LARGEST = float(np.finfo(np.float16).max)


def as_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    half = copy.deepcopy(model)
    _graph_as_float16(half.graph)
    return half


def _tensor_as_float16(tensor: TensorProto) -> TensorProto:
    array = np.clip(numpy_helper.to_array(tensor), -_LARGEST, _LARGEST).astype(np.float16)
    return numpy_helper.from_array(array, tensor.name)


def _graph_as_float16(graph: onnx.GraphProto) -> None:
    for i, tensor in enumerate(graph.initializer):
        if tensor.data_type == TensorProto.FLOAT:
            graph.initializer[i].CopyFrom(_tensor_as_float16(tensor))
    for info in (*graph.input, *graph.output, *graph.value_info):
        if info.type.tensor_type.elem_type == TensorProto.FLOAT:
            info.type.tensor_type.elem_type = TensorProto.FLOAT16
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT:
                attr.t.CopyFrom(_tensor_as_float16(attr.t))
            elif node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = TensorProto.FLOAT16
            elif attr.type == onnx.AttributeProto.GRAPH:
                _graph_as_float16(attr.g)
