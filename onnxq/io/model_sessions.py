"""ONNX Runtime sessions for verification and for reading which kernels ORT chose."""

from __future__ import annotations

import os

import onnx_ir as ir
import onnxruntime as ort

from onnxq.io import OrtModel, page_out
from onnxq.io.sessions import ExactSession, session_options
from onnxq.targets.providers import CPU_PROVIDER, provider_named

__all__ = ["ModelSource", "make_session"]

ModelSource = str | os.PathLike | ir.Model


def make_session(model: ModelSource, *, optimize: bool, provider: str = CPU_PROVIDER, threads: int | None = None,
                 profile_prefix: str | None = None, record_assignment: bool = False) -> ort.InferenceSession:
    """A session on one provider (with its registered options, targets.providers; ORT falls back to the CPU for
    what the provider does not take); with profile_prefix, ORT profiles every node it runs; with
    record_assignment, it records which provider took each node. optimize: as deployed (ORT's optimizations, where
    the provider takes them) or the exact arithmetic of the file (ORT_DISABLE_ALL)."""
    record = provider_named(provider)
    options = session_options(optimize=optimize and record.ort_optimizations, threads=threads,
                              profile_prefix=profile_prefix, record_assignment=record_assignment)
    entry = record.session_entry()
    if isinstance(model, ir.Model):
        session = OrtModel(model).session(options, [entry])
        if optimize and record.ort_optimizations:  # ORT copied the weights: their memory-mapped pages need not stay resident beside its copy
            page_out(model)
        return session
    return (ort.InferenceSession if optimize else ExactSession)(str(model), options, providers=[entry])
