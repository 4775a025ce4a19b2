"""Loading and saving models through onnx_ir; external data stays lazy; saves are atomic."""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import functools
import logging
import mmap
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from google.protobuf.message import DecodeError

from onnxq.errors import ModelLoadError, OutputPathError

__all__ = ["load_model", "save_model", "check_output_path", "model_size_bytes", "external_data_files", "OrtModel",
           "page_out", "trim_heap"]

logger = logging.getLogger(__name__)

# Protobuf cannot hold more than 2 GiB; keep a margin for the graph itself.
_PROTO_LIMIT_BYTES = 2**31 - 64 * 2**20
# ORT 1.31 accepts IR versions up to 13 (onnx 1.23 writes 14 by default).
MAX_IR_VERSION = 13


def load_model(source: str | os.PathLike | onnx.ModelProto | ir.Model) -> ir.Model:
    """Load a model from a path, a ModelProto or an ir.Model, never touching the caller's object.

    A path's external data is checked before any of it is read: every location must stay inside the model's
    folder (no absolute path, no "..", no symlink out) and every declared byte range must exist."""
    if isinstance(source, ir.Model):
        return source.clone()
    if isinstance(source, onnx.ModelProto):
        return _deserialize(source, "the model")
    path = Path(source)
    if path.is_dir():
        raise ModelLoadError(f"{path} is a folder — pass the .onnx model file inside it")
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path} — check the path")
    if path.stat().st_size == 0:
        raise ModelLoadError(f"{path} is empty — pass an .onnx model file")
    try:
        proto = onnx.load(path, load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError, UnicodeDecodeError, OSError) as e:
        raise ModelLoadError(
            f"{path} is not a readable ONNX model ({type(e).__name__}); it may be truncated or another file type"
        ) from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{path} holds no graph (a truncated or non-ONNX file?) — re-export the model")
    check_external_data(proto, path.parent.absolute())
    model = _deserialize(proto, str(path), base_dir=path.parent)
    if len(model.graph) == 0:
        raise ModelLoadError(f"{path} has no nodes: nothing to quantize — pass the float model itself")
    return model


def _deserialize(proto: onnx.ModelProto, what: str, base_dir: Path | None = None) -> ir.Model:
    try:
        model = ir.serde.deserialize_model(proto)
    except (ir.serde.SerdeError, ValueError) as e:
        cause = e
        while cause.__cause__ is not None:  # onnx_ir wraps the real reason
            cause = cause.__cause__
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        raise ModelLoadError(f"{what} is not a valid ONNX graph: {first} — re-export the model") from None
    # A graph input that is also a graph output: onnx_ir takes the output's declaration, which may lack the shape.
    declared = {i.name: i for i in proto.graph.input}
    for value in model.graph.inputs:
        if value.shape is None and value.name in declared and declared[value.name].type.tensor_type.HasField("shape"):
            value.shape = ir.serde.deserialize_type_proto_for_shape(declared[value.name].type)
    if base_dir is not None:  # what ir.load does: external data relative to the model's folder
        ir.external_data.set_base_dir(model.graph, str(base_dir))
    return model


def check_external_data(proto: onnx.ModelProto, base_dir: Path) -> None:
    """Refuse, before reading any of it, external data that escapes the model's folder or is not all there."""
    root = base_dir.resolve()
    for tensor in _all_tensors(proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        where = f"tensor {tensor.name!r}'s external data"
        if not location:
            raise ModelLoadError(f"{where} names no file — re-export the model with its data")
        if os.path.isabs(location) or Path(location).drive:
            raise ModelLoadError(f"{where} is at an absolute path ({location}), outside the model's folder — "
                                 "keep the data file beside the model and re-export with a relative location")
        target = base_dir / location
        resolved = target.resolve()
        if not resolved.is_relative_to(root):
            how = "through a symlink " if Path(os.path.normpath(target)).is_relative_to(base_dir) else ""
            raise ModelLoadError(f"{where} ({location}) resolves {how}outside the model's folder {base_dir} — "
                                 "onnxq reads data only from beside the model")
        if not resolved.is_file():
            raise ModelLoadError(f"external data file {target} of tensor {tensor.name!r} is missing — keep it "
                                 "beside the model")
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
        except ValueError:
            raise ModelLoadError(f"{where} has a non-integer offset or length — re-export the model") from None
        size = resolved.stat().st_size
        needed = _tensor_bytes(tensor)
        if length < 0:
            length = needed if needed is not None else size - offset
        if offset < 0 or offset + length > size:
            raise ModelLoadError(f"{where} ({location}, offset {offset}, length {length}) runs past the end of the "
                                 f"{size}-byte file — the data file is truncated or belongs to another model")
        if needed is not None and length != needed:
            raise ModelLoadError(f"{where} declares {length} bytes but its shape and type need {needed} — the data "
                                 "file belongs to another model")


def _all_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
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


def _tensor_bytes(tensor: onnx.TensorProto) -> int | None:
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None
    if tensor.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.STRING):
        return None
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def external_data_files(model: ir.Model) -> set[Path]:
    """The external data files the model's tensors point at."""
    files = set()
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                files.add(Path(tensor.base_dir) / tensor.location)
    return files


def model_size_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for graph in model.graphs() for v in graph.initializers.values()
               if v.const_value is not None)


def _prepare_for_save(model: ir.Model) -> None:
    """An IR version ORT accepts and the opsets allow (an exporter's ir_version 2 with opset 17 is raised to 8)."""
    if model.ir_version is None or model.ir_version > MAX_IR_VERSION:
        model.ir_version = MAX_IR_VERSION
    opsets = [onnx.helper.make_opsetid(domain, version) for domain, version in model.opset_imports.items()
              if domain in ("", "ai.onnx")]
    model.ir_version = max(model.ir_version, onnx.helper.find_min_ir_version_for(opsets, ignore_unknown=True))


def check_output_path(path: str | os.PathLike, protected: set[Path] = frozenset()) -> Path:
    """The absolute output path, or OutputPathError when its folder is missing or it would overwrite a
    protected file (the input model or its external data, also as <output>.data)."""
    path = Path(path).absolute()
    if path.is_dir():
        raise OutputPathError(f"output {path} is a folder — give a file name, e.g. {path / 'model.int8.onnx'}")
    if path.parent.is_file():
        raise OutputPathError(f"{path.parent} is a file, not a folder — choose another -o")
    if not path.parent.is_dir():
        raise OutputPathError(f"output folder {path.parent} does not exist — create it or choose another -o")
    resolved_protected = {Path(p).resolve() for p in protected}
    for target in (path, path.with_name(path.name + ".data")):
        if target.resolve() in resolved_protected:
            raise OutputPathError(f"output {target} would overwrite the input model — choose another -o")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"output folder {path.parent} is not writable — choose another -o")
    return path


def save_model(model: ir.Model, path: str | os.PathLike, *, protected: set[Path] = frozenset()) -> list[Path]:
    """Write the model atomically (temporary file beside the target, then rename); return the files written.

    A model whose tensors exceed protobuf's 2 GB limit is written with external data in `<name>.data`.
    `protected` lists files that must never be overwritten (the input model and its data files).
    """
    given = Path(path)
    path = check_output_path(given, protected)
    data_name = path.name + ".data"
    _prepare_for_save(model)
    needs_external = model_size_bytes(model) > _PROTO_LIMIT_BYTES
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the output gets the usual permissions
    try:
        if needs_external:
            logger.info("model is over 2 GB: saving tensors to %s", data_name)
            ir.save(model, tmp, external_data=data_name)
        else:
            _inline_external_tensors(model)
            ir.save(model, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return [given, given.with_name(data_name)] if needs_external else [given]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _inline_external_tensors(model: ir.Model, graphs: Iterable[ir.Graph] | None = None) -> None:
    """Saved without external_data, an external tensor would keep pointing at the input's data file; load it
    into the model instead (it fits: the whole model is under 2 GB). Subgraphs (If / Loop / Scan bodies) too."""
    for graph in model.graphs() if graphs is None else graphs:
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                value.const_value = ir.Tensor(tensor.numpy(), name=tensor.name)


_INLINE_TYPES = (ir.DataType.STRING, ir.DataType.INT4, ir.DataType.UINT4)


class OrtModel:
    """A model as onnxruntime.InferenceSession takes it without copying the weights: the serialized graph declares
    each sizeable initializer as external data and ORT receives the tensors' own (possibly memory-mapped) buffers.
    No protobuf copy of the weights, no files written, no 2 GB limit.

    How the buffers reach ORT depends on the session:
    - no graph optimizations (calibration, the float reference, the exact quantization, sensitivity): shared
      through SessionOptions.add_initializer with pre-packing off, so ORT computes on our buffers in place. Every
      such session, and onnx_ir itself, reads one memory map of the model's data file: the float weights are
      resident once however many sessions hold them.
    - graph optimizations on (the deployed kernels): through add_external_initializers, which copies. Optimizers
      may read or fold an initializer's data, so ORT must own it; pre-packing then replaces the quantized weights
      with the kernels' own layout, as deployed."""

    _MIN_EXTERNAL_BYTES = 1024

    def __init__(self, model: ir.Model) -> None:
        light = model.clone()
        _prepare_for_save(light)
        # Only the main graph's initializers can be handed over; a body's external tensors go in the graph.
        _inline_external_tensors(light, [g for g in light.graphs() if g is not light.graph])
        self.names: list[str] = []
        self.arrays: list[np.ndarray] = []  # kept alive for as long as a session uses them
        for name, value in light.graph.initializers.items():
            tensor = value.const_value
            # Strings, and 4-bit types (ORT makes no OrtValue from their numpy arrays), stay in the graph.
            if tensor is None or tensor.nbytes < self._MIN_EXTERNAL_BYTES or tensor.dtype in _INLINE_TYPES:
                continue
            self.names.append(name)
            self.arrays.append(np.ascontiguousarray(tensor.numpy()))
            value.const_value = ir.ExternalTensor(_PLACEHOLDER, 0, tensor.nbytes, tensor.dtype, shape=tensor.shape,
                                                  name=name)
        self.proto_bytes = ir.serde.serialize_model(light).SerializeToString()

    def session(self, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
        values = [ort.OrtValue.ortvalue_from_numpy(a) for a in self.arrays]
        if options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL:
            # ORT checks that an external location exists before it sees that add_initializer supplies the
            # tensor; the placeholder is an empty file, so a read of it would fail loudly, never give wrong data.
            options.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                             str(_placeholder_folder()))
            options.add_session_config_entry("session.disable_prepacking", "1")  # packing copies the weights
            # The default order runs every node whose inputs are all initializers first: every weight's
            # DequantizeLinear, holding all the float weights at once. Priority order keeps them next to their use.
            options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
            for name, value in zip(self.names, values):
                options.add_initializer(name, value)
        elif self.names:
            options.add_external_initializers(self.names, values)
        session = ort.InferenceSession(self.proto_bytes, options, providers=providers)
        session._onnxq_buffers = (self.arrays, values)  # the session reads these buffers: tie their lifetime to it
        return session


_PLACEHOLDER = "onnxq-shared-initializer"


@functools.cache
def _placeholder_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="onnxq-"))
    (folder / _PLACEHOLDER).touch()
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def page_out(source: ir.Model | ir.TensorProtocol) -> None:
    """Drop a model's (or one tensor's) memory-mapped external data from this process's resident memory. It stays
    valid: the next read faults it back in from the file, through the page cache. So the float weights a phase
    has read are not counted next to what the next phase builds."""
    if not hasattr(mmap, "MADV_DONTNEED"):  # not Linux / macOS: leave it to the OS
        return
    tensors = ([v.const_value for v in source.graph.initializers.values()] if isinstance(source, ir.Model)
               else [source])
    for tensor in tensors:
        if isinstance(tensor, ir.ExternalTensor) and tensor.raw is not None:
            tensor.raw.madvise(mmap.MADV_DONTNEED)


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


def trim_heap() -> None:
    """Hand the C heap's free pages back to the OS. glibc keeps what ORT sessions freed (their weight copies and
    pre-packed buffers), which would otherwise be counted under the next phase's float weights."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
