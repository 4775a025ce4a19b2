"""A large model's speed is timed one model after the other (memory near the model's size): the float and
the quantized deployed sessions, each owning its weights, are never alive at once — both at once they would be the
peak of SmolLM2-135M's default run. Smaller models keep both sessions, timed in alternation."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from decoder_model import kv_decoder, token_windows

from onnxq.data.specs import input_specs
from onnxq.data.completion import completed
from onnxq.io import load_model
from onnxq.verify.speed import decode as decode_speed# modules (onnxq.verify is also the function of that name)
from onnxq.verify.speed import latency as speed# modules (onnxq.verify is also the function of that name)
from onnxq.verify.speed import sessions


class _Counted:
    """A session that counts how many are alive."""
    live = most = 0

    def __init__(self, session) -> None:
        self._session = session
        _Counted.live += 1
        _Counted.most = max(_Counted.most, _Counted.live)

    def __getattr__(self, name):
        return getattr(self._session, name)

    def __del__(self) -> None:
        _Counted.live -= 1


@pytest.fixture
def counted(monkeypatch):
    _Counted.live = _Counted.most = 0
    real = speed.make_session  # what both timings make their sessions with (speed.timed_in_turns, or together
    # through speed.sessions.deployed_sessions)
    monkeypatch.setattr(speed, "make_session", lambda *a, **k: _Counted(real(*a, **k)))
    monkeypatch.setattr(sessions, "make_session", lambda *a, **k: _Counted(real(*a, **k)))
    return _Counted


@pytest.mark.parametrize("in_turn,most", [(True, 1), (False, 2)])
def test_the_batch_timing_holds_one_session_at_a_time_in_turn(counted, in_turn, most):
    model = ir.serde.deserialize_model(kv_decoder())
    batch = completed(token_windows(np.random.default_rng(0), 2, 8), input_specs(model))
    (check,) = speed.check_speed(model, model, batch, ["CPUExecutionProvider"], rounds=4, in_turn=in_turn)
    assert counted.most == most and counted.live == 0
    assert check.in_turn == in_turn and check.rounds == 4 and check.float_ms > 0 and check.quantized_ms > 0
    assert ("one model after the other" in check.text()) == in_turn and check.to_dict()["in_turn"] == in_turn


@pytest.mark.parametrize("in_turn,most", [(True, 1), (False, 2)])
def test_the_decode_timing_holds_one_session_at_a_time_in_turn(counted, in_turn, most):
    model = load_model(kv_decoder())
    windows = token_windows(np.random.default_rng(0), 1, 12)
    timed = decode_speed.decode_speed((model, model), windows, input_specs(model), steps=4, rounds=2,
                                      in_turn=in_turn)
    assert counted.most == most and counted.live == 0
    assert timed.steps == 4 and timed.rounds == 2 and timed.float_tokens_per_s > 0 and timed.quantized_tokens_per_s > 0
