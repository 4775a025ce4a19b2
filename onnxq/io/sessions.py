"""Every onnxruntime.SessionOptions onnxq makes, in one place."""

from __future__ import annotations

import onnxruntime as ort

__all__ = ["session_options", "QUIET", "ORT_ERRORS"]

# What ONNX Runtime raises for a model or a feed it refuses.
ORT_ERRORS = (ort.capi.onnxruntime_pybind11_state.InvalidArgument, ort.capi.onnxruntime_pybind11_state.Fail,
              ort.capi.onnxruntime_pybind11_state.InvalidGraph, ort.capi.onnxruntime_pybind11_state.RuntimeException)

# ORT logs a failing kernel on stderr before raising; onnxq words the exception in one line itself, so only fatal
# messages are let through.
QUIET = 4


def session_options(*, optimize: bool, threads: int | None = None,
                    profile_prefix: str | None = None) -> ort.SessionOptions:
    """optimize: ORT_ENABLE_ALL (the deployed kernels) or ORT_DISABLE_ALL (the exact arithmetic of the file).
    profile_prefix: ORT profiles every node it runs, into files with that prefix.
    ORT's CPU memory arena stays on: without it, SmolLM2-135M's default run peaked 0.7 GB lower, but MiniLM's
    static quantization 236 MB higher (465 -> 701 MB: glibc's heap fragments under ORT's many mid-size buffers)."""
    options = ort.SessionOptions()
    options.log_severity_level = QUIET
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if threads:
        options.intra_op_num_threads = threads
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return options
