"""ONNX Runtime sessions for verification and for reading which kernels ORT chose."""

from __future__ import annotations

import os

import onnx_ir as ir
import onnxruntime as ort

from onnxq.io import OrtModel

__all__ = ["ModelSource", "make_session"]

ModelSource = str | os.PathLike | ir.Model


def make_session(model: ModelSource, *, optimize: bool, provider: str = "CPUExecutionProvider",
                 threads: int | None = None, profile_prefix: str | None = None) -> ort.InferenceSession:
    """A session on one provider; with profile_prefix, ORT profiles every node it runs."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if threads:
        options.intra_op_num_threads = threads
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    if isinstance(model, ir.Model):
        return OrtModel(model).session(options, [provider])
    return ort.InferenceSession(str(model), options, providers=[provider])
