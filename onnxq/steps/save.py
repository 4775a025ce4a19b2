"""Step save: the quantized model staged through the output guard (moved into place when the run ends). A float16
model's weights left float are stored float16 first (passes.float16_storage), also in the model returned."""

from __future__ import annotations

from onnxq.io import save_model
from onnxq.passes.float16_storage import stored_as_float16
from onnxq.steps.state import RunState

__all__ = ["save"]


def save(state: RunState) -> bool:
    if state.unconverted is not None:
        stored = stored_as_float16(state.work, state.unconverted)
        if stored:
            state.notes.append(f"{stored} float weight(s) left float stored float16 as given, each read through a "
                               "Cast to float32")
    if state.given.output is None:
        return False
    state.written = save_model(state.work, state.given.output)
    return True
