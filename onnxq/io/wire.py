"""Protobuf's wire format, as much of it as onnxq reads and writes around a model's weights (io.in_place scans a
file without parsing its payloads; io.streamed_proto writes one a tensor at a time): a field is a varint key
(number << 3 | wire type) and its payload, a length-delimited one (messages, bytes) prefixed by its length."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

__all__ = ["MODEL_GRAPH", "GRAPH_INITIALIZER", "TENSOR_RAW_DATA", "LENGTH_DELIMITED", "WireFormatError", "header",
           "fields"]

MODEL_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
GRAPH_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
TENSOR_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
LENGTH_DELIMITED = 2  # the wire type of messages and bytes
_VARINT, _FIXED64, _FIXED32 = 0, 1, 5


class WireFormatError(Exception):
    """Bytes that are not the wire format onnxq reads: a field running past its message, a group (no ONNX writer
    emits them), a varint over 64 bits."""


def header(number: int, length: int) -> bytes:
    """A length-delimited field's key and length, the bytes before its payload."""
    return _varint(number << 3 | LENGTH_DELIMITED) + _varint(length)


def fields(buf, begin: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, payload start, field end) of each field in buf[begin:end] (bytes or
    a memory map)."""
    pos = begin
    while pos < end:
        key, body = _read_varint(buf, pos)
        wire = key & 7
        if wire == _VARINT:
            stop = _read_varint(buf, body)[1]
        elif wire == _FIXED64:
            stop = body + 8
        elif wire == LENGTH_DELIMITED:
            length, body = _read_varint(buf, body)
            stop = body + length
        elif wire == _FIXED32:
            stop = body + 4
        else:
            raise WireFormatError(f"wire type {wire} at byte {pos}")
        if stop > end:
            raise WireFormatError(f"a field at byte {pos} runs past its message")
        yield key >> 3, wire, pos, body, stop
        pos = stop


def _read_varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while shift < 64:
        if pos >= len(buf):
            raise WireFormatError("a varint runs past the end")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise WireFormatError("a varint over 64 bits")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
