"""The deployed sessions a run's timings reuse: within reused_sessions(), timing a model again (the float model as
given in every timing, the speed search's current choice against each kind's candidate) reuses its session instead of
making it again — making a deployed session (ORT's graph optimizations, the weights packed) cost more than the timed
rounds themselves on a small CNN (ShuffleNet: 30 sessions, 3.2 of the speed check's 4.1 s). Only the sessions of the
pair being timed are kept, so no more are alive at once than an uncached timing holds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import onnx_ir as ir

from onnxq.io.model_sessions import ModelSource, make_session

__all__ = ["reused_sessions", "deployed_sessions"]

# (id of the model, provider) → (the model, kept alive so that its id is not reused; its session).
_KEPT: ContextVar[dict | None] = ContextVar("onnxq_reused_sessions", default=None)


@contextlib.contextmanager
def reused_sessions() -> Iterator[None]:
    token = _KEPT.set({})
    try:
        yield
    finally:
        _KEPT.reset(token)


def deployed_sessions(models: Sequence[ModelSource], provider: str) -> list:
    """The models' deployed sessions on the provider, made now or (an in-memory model timed before, within
    reused_sessions) kept from before; the kept sessions of other models are dropped first. A model timed so must not
    be changed in place afterwards: onnxq's searches build new graphs and never rewrite a timed one."""
    kept = _KEPT.get()
    if kept is None:
        return [make_session(model, optimize=True, provider=provider) for model in models]
    wanted = {(id(model), provider) for model in models if isinstance(model, ir.Model)}
    for key in [k for k in kept if k not in wanted]:
        del kept[key]
    sessions = []
    for model in models:
        key = (id(model), provider)
        if key not in kept:
            session = make_session(model, optimize=True, provider=provider)
            if key not in wanted:
                sessions.append(session)
                continue
            kept[key] = (model, session)
        sessions.append(kept[key][1])
    return sessions
