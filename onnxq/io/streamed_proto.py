"""One .onnx file written a tensor at a time.

Serializing a model whole holds its weights three times — the arrays, the ModelProto's copies, the serialized bytes
(a 545 MB int8 model's save peaked at 1.78 GB, the run's peak). Protobuf lets a message be written in pieces: a
parser merges every occurrence of a singular message field and appends repeated fields (the encoding's rule, which
onnx.load and ONNX Runtime follow). So the file is the model without its large initializers, followed by one
`graph { initializer { … } }` fragment per large initializer: the same model, one tensor's copies at a time.
"""

from __future__ import annotations

import os

import onnx_ir as ir

from onnxq.io.wire import GRAPH_INITIALIZER, MODEL_GRAPH, header

__all__ = ["write_streamed"]

# Initializers from this size are written on their own; smaller ones stay in the graph's own bytes.
_STREAMED_FROM_BYTES = 1 << 20


def write_streamed(model: ir.Model, path: str | os.PathLike) -> None:
    """Write the model (no external data) with its large main-graph initializers streamed after the rest; the
    model is left as it was (its initializers in their order)."""
    initializers = dict(model.graph.initializers)
    large = [v for v in initializers.values()
             if v.const_value is not None and v.const_value.nbytes >= _STREAMED_FROM_BYTES]
    for value in large:
        model.graph.initializers.pop(value.name)
    try:
        head = ir.serde.serialize_model(model).SerializeToString()
    finally:
        model.graph.initializers.clear()
        for value in initializers.values():
            model.graph.register_initializer(value)
    with open(path, "wb") as file:
        file.write(head)
        del head
        for value in large:
            tensor = ir.serde.serialize_tensor(value.const_value).SerializeToString()
            initializer = header(GRAPH_INITIALIZER, len(tensor))
            # graph { initializer { tensor } }, the headers written before the tensor's bytes, never joined to them
            file.write(header(MODEL_GRAPH, len(initializer) + len(tensor)) + initializer)
            file.write(tensor)

