"""The model's tensors checked as protobuf, before onnx_ir or onnxruntime reads them: their declared shapes must be
possible and match the bytes present, external data must stay beside the model and be all there, and sparse
initializers (which onnx_ir drops) are made dense. Every finding is one line naming the tensor and the fix."""

from __future__ import annotations

import math
import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onnxq.errors import ModelLoadError, UnsupportedModelError, one_line

__all__ = ["check_tensors", "check_external_data", "densify_sparse_initializers", "all_tensors", "needed_bytes"]

_INT64_MAX = 2**63 - 1
# A sparse weight made dense larger than this is refused rather than allocated (a pruned model's real weights are
# far smaller; a larger claim is a damaged or hostile file).
MAX_DENSE_BYTES = 4 * 2**30
_PACKED_4_BIT = (TensorProto.INT4, TensorProto.UINT4)
# Which repeated field holds a tensor's values when it has no raw_data, and how many entries each value takes.
_FIELDS = {
    TensorProto.FLOAT: ("float_data", 1), TensorProto.COMPLEX64: ("float_data", 2),
    TensorProto.DOUBLE: ("double_data", 1), TensorProto.COMPLEX128: ("double_data", 2),
    TensorProto.INT64: ("int64_data", 1), TensorProto.UINT32: ("uint64_data", 1),
    TensorProto.UINT64: ("uint64_data", 1),
    TensorProto.STRING: ("string_data", 1),
}


def all_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor the model holds: initializers and tensor attributes, in subgraphs (If / Loop / Scan bodies)
    and functions too."""
    graphs, nodes = [proto.graph], [node for function in proto.functions for node in function.node]
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            yield from graph.initializer
            nodes.extend(graph.node)
            continue
        for attribute in nodes.pop().attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                graphs.append(attribute.g)
            graphs.extend(attribute.graphs)


def check_tensors(proto: onnx.ModelProto) -> None:
    """Shapes that are possible and data that matches them, for every tensor stored in the model itself."""
    for tensor in all_tensors(proto):
        _check_stored(tensor)


def _check_stored(tensor: onnx.TensorProto) -> None:
    count = _element_count(tensor)
    if tensor.data_location == TensorProto.EXTERNAL:
        return  # checked against its file by check_external_data
    have, need, unit = _stored(tensor, count)
    if have is not None and have != need:
        raise ModelLoadError(f"tensor {one_line(repr(tensor.name))} declares shape {list(tensor.dims)} ({need} "
                             f"{unit}) but holds {have} — the file is damaged or its exporter is broken; "
                             "re-export the model")


def _element_count(tensor: onnx.TensorProto) -> int:
    where = f"tensor {one_line(repr(tensor.name))}"
    if any(d < 0 for d in tensor.dims):
        raise ModelLoadError(f"{where} declares a negative dimension {list(tensor.dims)} — re-export the model")
    count = math.prod(tensor.dims)
    if count > _INT64_MAX:
        raise ModelLoadError(f"{where} declares dimensions {list(tensor.dims)} whose product overflows 64 bits — "
                             "the file is damaged; re-export the model")
    return count


def _stored(tensor: onnx.TensorProto, count: int) -> tuple[int | None, int, str]:
    """(what the tensor holds, what its shape needs, the unit), in bytes of raw_data or in field entries; None when
    the type is one onnxq does not know (left to onnxruntime)."""
    if tensor.HasField("raw_data"):
        need = needed_bytes(tensor)
        if need is None:
            return None, 0, ""
        return len(tensor.raw_data), need, "bytes"
    field, per_value = _FIELDS.get(tensor.data_type, ("int32_data", 1))  # the 8/16-bit types live in int32_data
    if tensor.data_type in _PACKED_4_BIT:
        return len(tensor.int32_data), (count + 1) // 2, "packed int32 entries"
    return len(getattr(tensor, field)), count * per_value, f"{field} entries"


def needed_bytes(tensor: onnx.TensorProto) -> int | None:
    """The bytes of raw data the tensor's shape and type need; None for a type onnxq does not know (strings, …).
    A shape that cannot be (a negative dimension, a product over 64 bits) raises ModelLoadError."""
    count = _element_count(tensor)
    itemsize = _itemsize(tensor.data_type)
    if itemsize is None:
        return None
    return (count + 1) // 2 if tensor.data_type in _PACKED_4_BIT else count * itemsize


def _itemsize(data_type: int) -> int | None:
    if data_type in _PACKED_4_BIT:
        return 1
    if data_type == TensorProto.STRING:
        return None
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None


def check_external_data(proto: onnx.ModelProto, base_dir: Path) -> None:
    """Refuse, before reading any of it, external data that escapes the model's folder or is not all there."""
    for tensor in all_tensors(proto):
        if tensor.data_location == TensorProto.EXTERNAL:
            _check_one_external(tensor, base_dir)


def _check_one_external(tensor: onnx.TensorProto, base_dir: Path) -> None:
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    where = f"tensor {one_line(repr(tensor.name))}'s external data"
    if not location:
        raise ModelLoadError(f"{where} names no file — re-export the model with its data")
    if any(unicodedata.category(c) == "Cc" for c in location):
        raise ModelLoadError(f"{where} location {one_line(repr(location))} holds a control character (NUL, newline) "
                             "— the file is damaged; re-export the model")
    if os.path.isabs(location) or Path(location).drive:
        raise ModelLoadError(f"{where} is at an absolute path ({one_line(location)}), outside the model's folder — "
                             "keep the data file beside the model and re-export with a relative location")
    target = base_dir / location
    resolved = target.resolve()
    if not resolved.is_relative_to(base_dir.resolve()):
        how = "through a symlink " if Path(os.path.normpath(target)).is_relative_to(base_dir) else ""
        raise ModelLoadError(f"{where} ({one_line(location)}) resolves {how}outside the model's folder {base_dir} — "
                             "onnxq reads data only from beside the model (copy it there: cp -L)")
    if not resolved.exists():
        raise ModelLoadError(f"external data file {one_line(target)} of tensor {one_line(repr(tensor.name))} is "
                             "missing — keep it beside the model")
    if not resolved.is_file():
        raise ModelLoadError(f"external data file {one_line(target)} of tensor {one_line(repr(tensor.name))} is not "
                             "a regular file — keep the data file itself beside the model")
    if (links := resolved.stat().st_nlink) > 1:
        # onnx_ir refuses it when the tensor is read (a hard link can bring any file into the model's folder).
        raise ModelLoadError(f"external data file {one_line(target)} of tensor {one_line(repr(tensor.name))} has "
                             f"{links} hard links, which onnx_ir does not read — give the model its own copy "
                             "(cp FILE FILE.copy && mv FILE.copy FILE)")
    _check_external_range(tensor, info, where, resolved)


def _check_external_range(tensor: onnx.TensorProto, info: dict[str, str], where: str, resolved: Path) -> None:
    location = one_line(info["location"])
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
    except ValueError:
        raise ModelLoadError(f"{where} has a non-integer offset or length — re-export the model") from None
    size = resolved.stat().st_size
    needed = needed_bytes(tensor)
    if length < 0:
        length = needed if needed is not None else size - offset
    if offset < 0 or offset + length > size:
        raise ModelLoadError(f"{where} ({location}, offset {offset}, length {length}) runs past the end of the "
                             f"{size}-byte file — the data file is truncated or belongs to another model")
    if needed is not None and length != needed:
        raise ModelLoadError(f"{where} declares {length} bytes but its shape and type need {needed} — the data "
                             "file belongs to another model")


def densify_sparse_initializers(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """The model with its sparse initializers made dense (onnx_ir keeps no sparse tensors, and a weight must be
    dense to be quantized) and their names; the proto itself when it has none (it is never modified)."""
    if not any(graph.sparse_initializer for graph in _graphs(proto)):
        return proto, []
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    names = []
    for graph in _graphs(copy):
        for sparse in graph.sparse_initializer:
            graph.initializer.append(_dense(sparse))
            names.append(sparse.values.name)
        del graph.sparse_initializer[:]
    return copy, names


def _graphs(proto: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """The main graph and every body (If / Loop / Scan) in it."""
    pending = [proto.graph]
    while pending:
        graph = pending.pop()
        yield graph
        for node in graph.node:
            for attribute in node.attribute:
                pending.extend([attribute.g] if attribute.HasField("g") else [])
                pending.extend(attribute.graphs)


def _dense(sparse: onnx.SparseTensorProto) -> onnx.TensorProto:
    name = sparse.values.name
    where = f"sparse initializer {one_line(repr(name))}"
    dims = list(sparse.dims)
    if any(d < 0 for d in dims):
        raise ModelLoadError(f"{where} declares a negative dimension {dims} — re-export the model")
    _check_stored(sparse.values)
    _check_stored(sparse.indices)
    values, indices = numpy_helper.to_array(sparse.values), numpy_helper.to_array(sparse.indices).astype(np.int64)
    dtype = values.dtype
    count = math.prod(dims)
    if count * dtype.itemsize > MAX_DENSE_BYTES:
        raise UnsupportedModelError(f"{where} would take {count * dtype.itemsize / 2**30:.1f} GiB dense (shape "
                                    f"{dims}); onnxq densifies at most {MAX_DENSE_BYTES // 2**30} GiB — store it dense")
    if indices.ndim == 2 and len(dims) > 0 and indices.shape[1] == len(dims):  # one coordinate row per value
        if np.any(indices < 0) or np.any(indices >= np.array(dims)):
            raise ModelLoadError(f"{where} has an index outside its shape {dims} — re-export the model")
        indices = np.ravel_multi_index(tuple(indices.T), dims) if indices.size else indices.reshape(-1)
    indices = indices.reshape(-1)
    if indices.shape[0] != values.reshape(-1).shape[0] or np.any(indices < 0) or np.any(indices >= count):
        raise ModelLoadError(f"{where} has {indices.shape[0]} indices for {values.size} values, or an index outside "
                             f"its shape {dims} — re-export the model")
    dense = np.zeros(count, dtype)
    dense[indices] = values.reshape(-1)
    return numpy_helper.from_array(dense.reshape(dims), name)
