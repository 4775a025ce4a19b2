"""Loading and saving models through onnx_ir; external data stays lazy; saves go through the output guard."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnxq.errors import ModelLoadError, one_line
from onnxq.io.in_place import read_in_place
from onnxq.io.naming import name_body_values, name_nodes
from onnxq.io.outputs import run_files
from onnxq.io.reads import regular_file
from onnxq.io.streamed_proto import write_streamed
from onnxq.io.tensors import check_external_data, check_tensors, densify_sparse_initializers

__all__ = ["load_model", "save_model", "model_size_bytes", "external_data_files", "prepare_for_save",
           "inline_external_tensors", "over_proto_limit", "MAX_IR_VERSION", "LOAD_NOTES"]

logger = logging.getLogger(__name__)

# Protobuf cannot hold more than 2 GiB; keep a margin for the graph itself.
_PROTO_LIMIT_BYTES = 2**31 - 64 * 2**20
# ORT 1.31 accepts IR versions up to 13 (onnx 1.23 writes 14 by default).
MAX_IR_VERSION = 13
# model.meta key: what loading changed, for the report (names given to nodes, sparse weights made dense).
LOAD_NOTES = "onnxq.load"


def load_model(source: str | os.PathLike | onnx.ModelProto | ir.Model | bytes) -> ir.Model:
    """Load a model from a path, a ModelProto, an ir.Model or its serialized bytes, never touching the caller's
    object.

    A path must be a regular file. Every tensor's shape must match its bytes; a path's external data is checked
    before any of it is read (every location inside the model's folder — no absolute path, no "..", no symlink out
    — and every declared byte range present). Sparse initializers are made dense, every node gets a unique name,
    and so does every value a subgraph defines (model.meta[LOAD_NOTES] says which)."""
    if isinstance(source, ir.Model):
        model = source.clone()
    elif isinstance(source, onnx.ModelProto):
        model = _from_proto(source, "the model", None)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = _from_proto(_parsed(bytes(source)), "the model's bytes", None)
    elif isinstance(source, (str, os.PathLike)):
        model = _from_proto(_read(Path(source)), one_line(source), Path(source).parent)
    else:
        raise ModelLoadError(f"a model given as {type(source).__name__}: pass a path, an onnx.ModelProto, an "
                             "onnx_ir.Model or the model's serialized bytes")
    notes = {"densified": (), **(model.meta.get(LOAD_NOTES) or {})}
    model.meta[LOAD_NOTES] = notes | {"renamed_nodes": name_nodes(model), "renamed_values": name_body_values(model)}
    return model


def _read(path: Path) -> onnx.ModelProto:
    if path.is_dir():
        raise ModelLoadError(f"{one_line(path)} is a folder — pass the .onnx model file inside it")
    regular_file(path, "model file", ModelLoadError)
    if path.stat().st_size == 0:
        raise ModelLoadError(f"{one_line(path)} is empty — pass an .onnx model file")
    try:
        # A large file's own weights stay in it, memory-mapped like external data (io.in_place).
        proto = read_in_place(path) or onnx.load(path, load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError, UnicodeDecodeError, OSError) as e:
        raise ModelLoadError(
            f"{one_line(path)} is not a readable ONNX model ({type(e).__name__}); it may be truncated or another "
            "file type") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{one_line(path)} holds no graph (a truncated or non-ONNX file?) — re-export the model")
    check_external_data(proto, path.parent.absolute())
    return proto


def _parsed(content: bytes) -> onnx.ModelProto:
    try:
        proto = onnx.load_model_from_string(content)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise ModelLoadError(f"the bytes given are not a readable ONNX model ({type(e).__name__}); they may be "
                             "truncated or another format — pass model.SerializeToString() or the .onnx file's "
                             "bytes") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError("the bytes given hold no graph (truncated, or not ONNX?) — pass the .onnx file's bytes")
    return proto


def _from_proto(proto: onnx.ModelProto, what: str, base_dir: Path | None) -> ir.Model:
    check_tensors(proto)
    proto, densified = densify_sparse_initializers(proto)
    model = _deserialize(proto, what, base_dir)
    if len(model.graph) == 0:
        raise ModelLoadError(f"{what} has no nodes: nothing to quantize — pass the float model itself")
    model.meta[LOAD_NOTES] = {"densified": tuple(densified)}
    return model


def _deserialize(proto: onnx.ModelProto, what: str, base_dir: Path | None = None) -> ir.Model:
    _refuse_maps(proto, what)
    try:
        model = ir.serde.deserialize_model(proto)
    except (ir.serde.SerdeError, ValueError) as e:
        cause = e
        while cause.__cause__ is not None:  # onnx_ir wraps the real reason
            cause = cause.__cause__
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        raise ModelLoadError(f"{what} is not a valid ONNX graph: {one_line(first)} — re-export the model") from None
    # A graph input that is also a graph output: onnx_ir takes the output's declaration, which may lack the shape.
    declared = {i.name: i for i in proto.graph.input}
    for value in model.graph.inputs:
        if value.shape is None and value.name in declared and declared[value.name].type.tensor_type.HasField("shape"):
            value.shape = ir.serde.deserialize_type_proto_for_shape(declared[value.name].type)
    if base_dir is not None:  # what ir.load does: external data relative to the model's folder
        ir.external_data.set_base_dir(model.graph, str(base_dir))
    return model


def _refuse_maps(proto: onnx.ModelProto, what: str) -> None:
    """A main-graph input or output of map type (or a sequence of maps): onnx_ir reads no map type, so the model
    cannot be loaded — said with the export option that avoids it rather than onnx_ir's words."""
    for kind, values in (("input", proto.graph.input), ("output", proto.graph.output)):
        for value in values:
            if _holds_a_map(value.type):
                raise ModelLoadError(
                    f"{what}'s {kind} {one_line(repr(value.name))} is a map or a sequence of maps (what skl2onnx's "
                    "ZipMap makes of a classifier's probabilities); onnxq reads tensors — re-export it as a tensor "
                    "(skl2onnx: options={'zipmap': False})")


def _holds_a_map(type_proto: onnx.TypeProto) -> bool:
    kind = type_proto.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind in ("sequence_type", "optional_type"):
        return _holds_a_map(getattr(type_proto, kind).elem_type)
    return False


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


def over_proto_limit(model: ir.Model) -> bool:
    """Whether the model's tensors are too many bytes for one protobuf message (saved with external data)."""
    return model_size_bytes(model) > _PROTO_LIMIT_BYTES


def prepare_for_save(model: ir.Model) -> None:
    """An IR version ORT accepts and the opsets allow (an exporter's ir_version 2 with opset 17 is raised to 8)."""
    if model.ir_version is None or model.ir_version > MAX_IR_VERSION:
        model.ir_version = MAX_IR_VERSION
    opsets = [onnx.helper.make_opsetid(domain, version) for domain, version in model.opset_imports.items()
              if domain in ("", "ai.onnx")]
    model.ir_version = max(model.ir_version, onnx.helper.find_min_ir_version_for(opsets, ignore_unknown=True))


def save_model(model: ir.Model, path: str | os.PathLike, *, protected: Iterable[Path] = ()) -> list[Path]:
    """Write the model through the output guard (io.outputs: staged beside the target, renamed when the run ends;
    at once outside a run); return the files it writes.

    A model whose tensors exceed protobuf's 2 GB limit is written with external data in `<name>.data`.
    `protected` lists files that must never be overwritten (the input model and its data files)."""
    given = Path(path)
    data = given.with_name(given.name + ".data")
    prepare_for_save(model)
    needs_external = over_proto_limit(model)

    def write(staged: Path) -> None:
        if needs_external:
            logger.info("model is over 2 GB: saving tensors to %s", data.name)
            ir.save(model, staged, external_data=data.name)
        else:
            inline_external_tensors(model)
            write_streamed(model, staged)  # one file, a tensor's copies at a time (io.streamed_proto)

    with run_files() as files:
        for file in protected:
            files.add_input(file, "the input model")
        files.claim(given, "output", also=[data])
        files.stage(given, write)
    return [given, data] if needs_external else [given]


def inline_external_tensors(model: ir.Model, graphs: Iterable[ir.Graph] | None = None) -> None:
    """Saved without external_data, an external tensor would keep pointing at the input's data file; load it
    into the model instead (it fits: the whole model is under 2 GB). Subgraphs (If / Loop / Scan bodies) too."""
    for graph in model.graphs() if graphs is None else graphs:
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                value.const_value = ir.Tensor(tensor.numpy(), name=tensor.name)
