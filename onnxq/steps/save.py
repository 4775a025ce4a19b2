"""Step save: the quantized model staged through the output guard (moved into place when the run ends)."""

from __future__ import annotations

from onnxq.io import save_model
from onnxq.steps.state import RunState

__all__ = ["save"]


def save(state: RunState) -> bool:
    if state.given.output is None:
        return False
    state.written = save_model(state.work, state.given.output)
    return True
