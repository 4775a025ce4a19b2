"""Step save: the quantized model staged through the output guard (moved into place when the run ends). A float16
model's weights left float are stored float16 first (passes.float16.storage), also in the model returned. A run
that kept every node float (a search's choice) writes the float model as given — its own bytes where it is one
file — never a rewritten copy, which could only be as large or larger."""

from __future__ import annotations

import shutil

from onnxq.io import save_model, write_output
from onnxq.passes.float16.storage import stored_as_float16
from onnxq.steps.records import Saved
from onnxq.steps.state import RunState

__all__ = ["save"]


def save(state: RunState) -> bool:
    output = state.loaded.given.output
    if not state.quantized.plans:
        written = () if output is None else _float_model_written(state)
        state.saved = Saved(state.as_given, written)
        return output is not None
    model = state.quantized.work
    if state.loaded.unconverted is not None:
        stored = stored_as_float16(model, state.loaded.unconverted)
        if stored:
            state.notes.append(f"{stored} float weight(s) left float stored float16 as given, each read through a "
                               "Cast to float32")
    state.saved = Saved(model, () if output is None else save_model(model, output))
    return output is not None


def _float_model_written(state: RunState):
    """The float model as given: a copy of its file where it is one file onnxruntime runs, else saved (given in
    memory, with external data, or converted from an opset onnxruntime does not run)."""
    source = state.loaded.input_path
    if source is not None and state.loaded.input_files == (source,) and state.loaded.given_runs:
        return [write_output(state.loaded.given.output, lambda staged: shutil.copyfile(source, staged))]
    return save_model(state.as_given, state.loaded.given.output)
