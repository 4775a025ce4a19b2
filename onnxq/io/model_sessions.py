"""ONNX Runtime sessions for verification and for reading which kernels ORT chose."""

from __future__ import annotations

import os

import onnx_ir as ir
import onnxruntime as ort

from onnxq.io import OrtModel, page_out
from onnxq.io.sessions import ExactSession, session_options

__all__ = ["ModelSource", "make_session"]

ModelSource = str | os.PathLike | ir.Model


def make_session(model: ModelSource, *, optimize: bool, provider: str = "CPUExecutionProvider",
                 threads: int | None = None, profile_prefix: str | None = None) -> ort.InferenceSession:
    """A session on one provider; with profile_prefix, ORT profiles every node it runs."""
    options = session_options(optimize=optimize, threads=threads, profile_prefix=profile_prefix)
    if isinstance(model, ir.Model):
        session = OrtModel(model).session(options, [provider])
        if optimize:  # ORT copied the weights: their memory-mapped pages need not stay resident beside its copy
            page_out(model)
        return session
    return (ort.InferenceSession if optimize else ExactSession)(str(model), options, providers=[provider])
