"""Within reused_sessions() a model timed again reuses its deployed session (the float model as given is timed by
every check of a run, the speed search's choice against each kind's candidate); the sessions of models not being
timed are dropped first, so that no more are alive than an uncached timing holds; the figures are real timings."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from onnxq.io import model_sessions
from onnxq.verify.speed import latency, sessions
from onnxq.verify.speed.latency import check_speed
from onnxq.verify.speed.sessions import reused_sessions


def _matmul(seed: int) -> ir.Model:
    w = np.random.default_rng(seed).standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def test_a_model_timed_again_reuses_its_session_and_only_the_timed_pair_is_kept(monkeypatch):
    made = []
    real = model_sessions.make_session

    def counted(model, **kwargs):
        made.append(model)
        return real(model, **kwargs)

    monkeypatch.setattr(sessions, "make_session", counted)
    monkeypatch.setattr(latency, "make_session", counted)
    a, b, c = _matmul(0), _matmul(1), _matmul(2)
    batch = {"x": np.ones((8, 64), np.float32)}
    cpu = ["CPUExecutionProvider"]
    with reused_sessions():
        first = check_speed(a, b, batch, cpu, rounds=3)[0]
        check_speed(a, c, batch, cpu, rounds=3)  # a kept, b dropped, c made
        check_speed(a, c, batch, cpu, rounds=3)  # both kept
        kept = sessions._KEPT.get()
        assert {id(model) for model, _ in kept.values()} == {id(a), id(c)}
    assert [id(m) for m in made] == [id(a), id(b), id(c)]
    assert first.rounds == 3 and first.float_ms > 0 and first.quantized_ms > 0
    made.clear()
    check_speed(a, b, batch, cpu, rounds=3)  # outside: each timing makes its own
    check_speed(a, b, batch, cpu, rounds=3)
    assert len(made) == 4
