"""One .onnx file written a tensor at a time.

Serializing a model whole holds its weights three times — the arrays, the ModelProto's copies, the serialized bytes
(a 545 MB int8 model's save peaked at 1.78 GB, the run's peak). Protobuf lets a message be written in pieces: a
parser merges every occurrence of a singular message field and appends repeated fields (the encoding's rule, which
onnx.load and ONNX Runtime follow). So the file is the model without its initializers of more than a few KB,
followed by one `graph { initializer { … } }` fragment per such initializer, its bytes written from the tensor's own
buffer: the same model, no copy of the weights. A language model's int8 weights are mostly under 1 MB each
(SmolLM2's 576 × 1536 projections): kept in the graph's bytes, they were held three times at once (its W8A8 save
took 414 MiB over its start for 157 MB of weights).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx_ir as ir

from onnxq.io.memory import page_out, raw_bytes
from onnxq.io.wire import GRAPH_INITIALIZER, MODEL_GRAPH, TENSOR_RAW_DATA, header

__all__ = ["write_streamed"]

# Initializers from this size are written on their own; smaller ones stay in the graph's own bytes.
_STREAMED_FROM_BYTES = 4 << 10


def write_streamed(model: ir.Model, path: str | os.PathLike) -> None:
    """Write the model (no external data) with its main-graph initializers of _STREAMED_FROM_BYTES or more streamed
    after the rest, each memory-mapped one paged out once written; the model is left as it was. The graph's bytes
    are onnx_ir's serialization with those initializers' tensors left out: their value_info and quantization
    annotations stay as onnx_ir writes them, and each streamed tensor is named by its value, as onnx_ir names it."""
    large = [v for v in model.graph.initializers.values()
             if v.const_value is not None and v.const_value.nbytes >= _STREAMED_FROM_BYTES]
    tensors = [v.const_value for v in large]
    try:
        for value in large:
            value.const_value = ir.Tensor(np.zeros(0, np.uint8))  # serialized, then dropped: written below
        head = ir.serde.serialize_model(model)
    finally:
        for value, tensor in zip(large, tensors):
            value.const_value = tensor
    streamed = {v.name for v in large}
    kept = [t for t in head.graph.initializer if t.name not in streamed]
    del head.graph.initializer[:]
    head.graph.initializer.extend(kept)
    with open(path, "wb") as file:
        file.write(head.SerializeToString())
        del head, kept
        for value in large:
            shell, payload = _tensor_pieces(value.const_value, value.name)
            raw = header(TENSOR_RAW_DATA, len(payload)) if payload is not None else b""
            size = len(shell) + len(raw) + (0 if payload is None else len(payload))
            initializer = header(GRAPH_INITIALIZER, size)
            # graph { initializer { tensor } }, the headers written before the tensor's bytes, never joined to them
            file.write(header(MODEL_GRAPH, len(initializer) + size) + initializer + shell + raw)
            if payload is not None:
                file.write(payload)
            del payload
            page_out(value.const_value)


def _tensor_pieces(tensor: ir.TensorProtocol, name: str) -> tuple[bytes, bytes | np.ndarray | None]:
    """(the TensorProto's bytes without raw_data, raw_data's bytes: a view of the tensor's array where it is that
    layout, io.memory.raw_bytes), or (a string tensor's whole TensorProto, None)."""
    if tensor.dtype == ir.DataType.STRING:
        proto = ir.serde.serialize_tensor(tensor)
        proto.name = name
        return proto.SerializeToString(), None
    shell = onnx.TensorProto(name=name, data_type=tensor.dtype.value, dims=list(tensor.shape.numpy()))
    if tensor.doc_string:
        shell.doc_string = tensor.doc_string
    for key, text in tensor.metadata_props.items():
        shell.metadata_props.add(key=key, value=text)
    return shell.SerializeToString(), raw_bytes(tensor)
