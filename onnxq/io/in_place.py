"""A large model that keeps its weights inside the .onnx file (Optimum's and torch.onnx's exports under 2 GB have no
external data) read without loading them: the file is memory-mapped and scanned as protobuf's wire format, and
what is parsed is the model without the main graph's large raw_data payloads, each declared as external data at
its own offset in the .onnx file itself. The weights are then read like any external data file's — memory-mapped,
paged out between phases, one segment's at a time (io.segments) — where `onnx.load` held the file's bytes and the
parsed copy at once, and the weights stayed anonymous memory for the whole run (Optimum's SmolLM2 export: the run
peaked at 3.4× its 652 MB, against 2.1× for the same weights in an external data file; read in place, 2.3×).

The scan returns None — read the file with onnx.load — for a small file, a symlink (its data would resolve outside
the model's folder), a file with more than one hard link (onnx_ir reads no external data from one: a package
cache's or `cp -al`'s link is a model like any other, read whole), a file with no such tensor, and anything
unexpected (a payload whose length is not its shape's, a tensor declaring external data already, wire types
protobuf no longer writes): onnx.load's parse and the tensor checks then say what is wrong, as they always have.

The payloads are not aligned (protobuf does not align), which numpy and ONNX Runtime's kernels read as they are;
the bytes are the file's own, so every figure is the one onnx.load would give (tested bit for bit)."""

from __future__ import annotations

import mmap
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from onnxq.errors import ModelLoadError
from onnxq.io.tensors import needed_bytes
from onnxq.io.wire import (GRAPH_INITIALIZER, LENGTH_DELIMITED, MODEL_GRAPH, TENSOR_RAW_DATA, WireFormatError,
                           fields, header)

__all__ = ["read_in_place", "IN_PLACE_FROM_BYTES"]

# Smaller files load whole (the interpreter's and ORT's own memory is about 150 MB): the path every small model and
# test takes stays onnx.load's.
IN_PLACE_FROM_BYTES = 256 << 20
# Norms, biases and scales stay in the graph.
_TENSOR_MIN_BYTES = 1 << 20


class _Unexpected(Exception):
    """The scan found what it does not handle: the file is read the usual way."""


def read_in_place(path: Path) -> onnx.ModelProto | None:
    """The model at `path` with its main graph's large raw_data payloads declared as external data in the file
    itself (location: the file's name, beside it), or None: read it with onnx.load."""
    try:
        stat = path.stat()
        if (stat.st_size < IN_PLACE_FROM_BYTES or stat.st_nlink > 1
                or path.resolve().parent != path.parent.resolve()):
            return None
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            stripped, spans = _without_payloads(mapped)
        if not any(spans):
            return None
        proto = onnx.ModelProto.FromString(stripped)
        initializers = proto.graph.initializer
        if len(initializers) != len(spans):
            return None
        for tensor, span in zip(initializers, spans):
            if span is not None:
                _declare_in_place(tensor, path.name, *span)
    except (_Unexpected, WireFormatError, ModelLoadError, OSError, ValueError, DecodeError):
        return None
    return proto


def _declare_in_place(tensor: TensorProto, location: str, offset: int, length: int) -> None:
    if tensor.external_data or needed_bytes(tensor) != length:
        raise _Unexpected  # onnx.load's parse and the tensor checks say what is wrong with it
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _without_payloads(buf: mmap.mmap) -> tuple[bytes, list[tuple[int, int] | None]]:
    """The file's bytes without the large payloads, and each main-graph initializer's (offset, length) in the file
    in the order they are parsed (None: kept in the graph)."""
    pieces, spans = [], []
    for number, wire, start, body, stop in fields(buf, 0, len(buf)):
        if number == MODEL_GRAPH and wire == LENGTH_DELIMITED:
            graph = _graph_without_payloads(buf, body, stop, spans)
            pieces.append(header(number, len(graph)) + graph)
        else:
            pieces.append(buf[start:stop])
    return b"".join(pieces), spans


def _graph_without_payloads(buf: mmap.mmap, begin: int, end: int, spans: list) -> bytes:
    pieces = []
    for number, wire, start, body, stop in fields(buf, begin, end):
        if number != GRAPH_INITIALIZER or wire != LENGTH_DELIMITED:
            pieces.append(buf[start:stop])
            continue
        payloads = [(b, s) for n, w, _, b, s in fields(buf, body, stop)
                    if n == TENSOR_RAW_DATA and w == LENGTH_DELIMITED]
        if len(payloads) != 1 or payloads[0][1] - payloads[0][0] < _TENSOR_MIN_BYTES:
            spans.append(None)
            pieces.append(buf[start:stop])
            continue
        payload_start, payload_stop = payloads[0]
        tensor = b"".join(buf[s:e] for n, _, s, _, e in fields(buf, body, stop) if n != TENSOR_RAW_DATA)
        spans.append((payload_start, payload_stop - payload_start))
        pieces.append(header(number, len(tensor)) + tensor)
    return b"".join(pieces)
