"""ONNX Runtime sessions for verification and for reading which kernels ORT chose."""

from __future__ import annotations

import collections
import os
import tempfile
from pathlib import Path

import onnx
import onnx_ir as ir
import onnxruntime as ort

from onnxq.io import OrtModel

__all__ = ["ModelSource", "make_session", "op_counts", "optimized_op_counts"]

ModelSource = str | os.PathLike | ir.Model


def make_session(model: ModelSource, *, optimize: bool, provider: str = "CPUExecutionProvider",
                 threads: int | None = None, optimized_model_path: str | None = None) -> ort.InferenceSession:
    """A session on one provider. With optimized_model_path, ORT also writes the graph it optimized there
    (weights to a .data file beside it, so that any model size works and reading the graph back is cheap)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if threads:
        options.intra_op_num_threads = threads
    if optimized_model_path:
        options.optimized_model_filepath = optimized_model_path
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                         Path(optimized_model_path).name + ".data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    if isinstance(model, ir.Model):
        return OrtModel(model).session(options, [provider])
    return ort.InferenceSession(str(model), options, providers=[provider])


def op_counts(path: str | os.PathLike) -> dict[str, int]:
    """Op types (domain-qualified when not ONNX) of the graph in an .onnx file, without loading its weights."""
    proto = onnx.load(str(path), load_external_data=False)
    counts = collections.Counter(
        node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        for node in proto.graph.node)
    return dict(sorted(counts.items()))


def optimized_op_counts(model: ModelSource) -> dict[str, int]:
    """Op types in the graph ORT's CPU optimizer produces from the model."""
    with tempfile.TemporaryDirectory(prefix="onnxq-kernels-") as scratch:
        path = str(Path(scratch) / "optimized.onnx")
        make_session(model, optimize=True, optimized_model_path=path)
        return op_counts(path)
