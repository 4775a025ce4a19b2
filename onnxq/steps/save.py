"""Step save: the quantized model staged through the output guard (moved into place when the run ends). A float16
model's weights left float are stored float16 first (passes.float16.storage), also in the model returned. A run
that kept every node float (a search's choice) writes the float model as given — its own bytes where it is one
file — never a rewritten copy, which could only be as large or larger."""

from __future__ import annotations

import shutil

from onnxq.io import save_model, write_output
from onnxq.passes.float16.storage import stored_as_float16
from onnxq.steps.state import RunState

__all__ = ["save"]


def save(state: RunState) -> bool:
    if not state.plans:
        state.work = state.as_given
        if state.given.output is None:
            return False
        state.written = _float_model_written(state)
        return True
    if state.unconverted is not None:
        stored = stored_as_float16(state.work, state.unconverted)
        if stored:
            state.notes.append(f"{stored} float weight(s) left float stored float16 as given, each read through a "
                               "Cast to float32")
    if state.given.output is None:
        return False
    state.written = save_model(state.work, state.given.output)
    return True


def _float_model_written(state: RunState):
    """The float model as given: a copy of its file where it is one file onnxruntime runs, else saved (given in
    memory, with external data, or converted from an opset onnxruntime does not run)."""
    source = state.input_path
    if source is not None and state.input_files == [source] and state.given_runs:
        return [write_output(state.given.output, lambda staged: shutil.copyfile(source, staged))]
    return save_model(state.as_given, state.given.output)
