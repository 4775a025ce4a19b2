"""quantize() as a flat list of named steps over one RunState (each step sets its own record of it); timing and memory phases live here, not in the
steps. A step returns whether it did any work (its time is reported under its name only then)."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable

from onnxq.errors import CalibrationDataError, ort_reason
from onnxq.io import page_out, trim_heap
from onnxq.io.outputs import active_run
from onnxq.io.sessions import ORT_ERRORS
from onnxq.io.spill import SPILL_MIN_BYTES
from onnxq.passes.graph.builder import remap_shared_weights, spill_shared_blocks
from onnxq.steps.accuracy_level import accuracy_level
from onnxq.steps.calibrate import calibrate
from onnxq.steps.check_speed import check_speed
from onnxq.steps.escalate import escalate
from onnxq.steps.fallback import fall_back
from onnxq.steps.heartbeat import Heartbeat
from onnxq.steps.load import load
from onnxq.steps.magnitudes import magnitudes
from onnxq.steps.plan import plan, replan
from onnxq.steps.memory import MemoryUse, peak_rss_bytes
from onnxq.steps.recipe import recipe
from onnxq.steps.report import float_model_bytes
from onnxq.steps.resolve import resolve
from onnxq.steps.rewrite import rewrite
from onnxq.steps.save import save
from onnxq.steps.sensitivity import sensitivity
from onnxq.steps.smooth import smooth
from onnxq.steps.state import RunState
from onnxq.steps.verify import verify
from onnxq.verify.result import SYNTHETIC

__all__ = ["Step", "STEPS", "run_steps"]


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[RunState], bool]
    # What the step is doing, for the lines a long run prints (steps.heartbeat); the name where empty.
    doing: str = ""
    # Drop the float weights' memory-mapped pages first: the step does not read them (or reads each once).
    page_out_before: bool = False
    # Hand the C heap's free pages back first: the sessions before it are gone.
    trim_heap_before: bool = False
    # Move the float weights only this process holds to the run's temporary file first (io.spill), so that they
    # are paged out with the input's: before the first quantization, which memoizes each weight's source tensor.
    spill_before: bool = False
    # Move the quantized model's weights (and the run's memo of them) to that file first: the rewrite's int8 weights
    # paged out with the float ones instead of held beside every later step's sessions.
    spill_quantized_before: bool = False


STEPS: tuple[Step, ...] = (
    Step("load", load, "loading the model"),
    Step("resolve", resolve, "resolving the configuration"),
    Step("plan", plan, "planning"),
    Step("smooth", smooth, "smoothing"),
    Step("calibrate", calibrate, "calibrating"),
    Step("replan", replan, "re-planning"),
    Step("magnitudes", magnitudes, "measuring float16 ranges"),
    Step("rewrite", rewrite, "rewriting", page_out_before=True, trim_heap_before=True, spill_before=True),
    Step("verify", verify, "verifying", page_out_before=True, trim_heap_before=True, spill_quantized_before=True),
    Step("recipe", recipe, "trying recipes"),
    Step("accuracy_level", accuracy_level, "checking int8 activations in the 4-bit products"),
    Step("sensitivity", sensitivity, "measuring each node's sensitivity", page_out_before=True,
         trim_heap_before=True, spill_quantized_before=True),
    Step("escalate", escalate, "trying the costlier Conv methods where the gate fails"),
    Step("fallback", fall_back, "falling back"),
    Step("check_speed", check_speed, "timing float and quantized", page_out_before=True, trim_heap_before=True,
         spill_quantized_before=True),
    Step("save", save, "saving", page_out_before=True, trim_heap_before=True),
)


def _ran(step: Step, state: RunState) -> bool:
    """The step run; where onnxruntime fails to run the model on inputs onnxq made up for want of data (random
    values: an axes input with duplicates, indices past a table, a shape that does not fit), the line says so —
    the model is not at fault, the made-up inputs are."""
    try:
        return step.run(state)
    except ORT_ERRORS as e:
        reason = ort_reason(e)
        upfront = state.planned.upfront_inputs
        if upfront is None or upfront[1] != SYNTHETIC or not _RUNNING.search(reason):
            raise
        raise CalibrationDataError(f"onnxruntime cannot run the model on the random inputs onnxq made for want of "
                                   f"data ({reason}) — pass real inputs: --verify-data DATA (or --calib DATA)"
                                   ) from None


# What onnxruntime says when a run fails, not the model's loading: a kernel's failure, or a feed it refuses.
_RUNNING = re.compile(r"Non-zero status code returned while running|Got invalid dimensions for input")


def _before(step: Step, state: RunState) -> None:
    """What the step asks of memory before it runs (Step's flags)."""
    loaded = state.loaded
    if step.spill_before:
        state.spill.spill([loaded.reference, loaded.unconverted, loaded.work, state.smoothed.model])
    if step.spill_quantized_before and state.quantized.work is not None:
        remap_shared_weights(state.spill.spill_quantized(state.quantized.work))
        spill_shared_blocks(state.spill.stored_array, SPILL_MIN_BYTES)
    if step.page_out_before and loaded.reference is not None:
        for model in (loaded.reference, loaded.unconverted):  # the model as given too: a float16 model's own
            if model is not None:
                page_out(model)
        state.spill.page_out()
    if step.trim_heap_before:
        trim_heap()


def run_steps(state: RunState, steps: tuple[Step, ...] | None = None) -> RunState:
    """steps: STEPS as it is when called (a test may add one)."""
    peaks = {}
    for step in STEPS if steps is None else steps:
        _before(step, state)
        start = time.perf_counter()
        with Heartbeat(step.doing or step.name):
            ran = _ran(step, state)
        if ran:
            state.timings[step.name] = time.perf_counter() - start
            peak = peak_rss_bytes()
            if peak is not None:
                peaks[step.name] = peak
        active_run().check_inputs_unchanged(f"after step {step.name}")  # a changed input stops the run at once
    if peaks and state.loaded.reference is not None:
        state.sections.append(MemoryUse(peaks, float_model_bytes(state)))
    return state
