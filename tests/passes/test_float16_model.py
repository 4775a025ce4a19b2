"""A float16 model made float32 inside (passes.float16.model): exact — the clone computes what the float32 model with
the float16 weights computes, bit for bit, and rounds its outputs to float16 — with the float16 inputs and outputs
kept, subgraphs and constants included, the model as given unchanged, and a float32 model left as it is."""

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxq.passes.float16.model import computed_in_float32

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from float16_models import as_float16  # noqa: E402

_FLOAT, _HALF = TensorProto.FLOAT, TensorProto.FLOAT16


def _float_model(rng) -> onnx.ModelProto:
    """x → MatMul → Add → Relu → Cast → Mul(Constant) → MatMul → y, Softmax(y) → scores, and an If whose
    then-branch scales y by its own constant."""
    weights = {"w1": rng.normal(0, 1, (8, 16)), "b1": rng.normal(0, 1, 16), "w2": rng.normal(0, 1, (16, 4))}
    branch = lambda name, nodes, inits: helper.make_graph(  # noqa: E731
        nodes, name, [], [helper.make_tensor_value_info(f"{name}_z", _FLOAT, None)], inits)
    then = branch("then", [helper.make_node("Mul", ["y", "c_then"], ["then_z"])],
                  [numpy_helper.from_array(np.array(3.0, np.float32), "c_then")])
    other = branch("else", [helper.make_node("Identity", ["y"], ["else_z"])], [])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("Cast", ["r"], ["rc"], to=_FLOAT),
             helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(np.array(0.5, np.float32))),
             helper.make_node("Mul", ["rc", "half"], ["m"]), helper.make_node("MatMul", ["m", "w2"], ["y"]),
             helper.make_node("Softmax", ["y"], ["scores"], axis=-1),
             helper.make_node("If", ["flag"], ["z"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", _FLOAT, ["batch", 8]),
                     helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(n, _FLOAT, None) for n in ("y", "scores", "z")],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run(model: onnx.ModelProto | ir.Model, feed: dict) -> list[np.ndarray]:
    proto = ir.to_proto(model) if isinstance(model, ir.Model) else model
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def _with_weights_of(model: onnx.ModelProto, half: onnx.ModelProto) -> onnx.ModelProto:
    """The float32 model with the float16 model's (rounded) weights, in float32."""
    rounded = onnx.ModelProto()
    rounded.CopyFrom(model)
    halves = {t.name: numpy_helper.to_array(t) for t in half.graph.initializer}
    for tensor in rounded.graph.initializer:
        tensor.CopyFrom(numpy_helper.from_array(halves[tensor.name].astype(np.float32), tensor.name))
    return rounded


def test_the_float32_clone_computes_the_float16_weights_exactly_and_keeps_float16_io(rng):
    model32 = _float_model(rng)
    half = as_float16(model32)
    given = ir.from_proto(half)
    before = ir.to_proto(given).SerializeToString()
    upcast, note = computed_in_float32(given)
    assert upcast is not given and "float16 model" in note and "1 float16 input(s) and 3 output(s)" in note
    assert ir.to_proto(given).SerializeToString() == before  # the model as given is the reference: unchanged
    assert [v.dtype for v in (*upcast.graph.inputs, *upcast.graph.outputs)] == [
        ir.DataType.FLOAT16, ir.DataType.BOOL, *[ir.DataType.FLOAT16] * 3]
    assert [o.name for o in upcast.graph.outputs] == ["y", "scores", "z"]
    proto = ir.to_proto(upcast)
    for graph in (proto.graph, *(a.g for n in proto.graph.node for a in n.attribute if a.type == a.GRAPH)):
        assert all(t.data_type != _HALF for t in graph.initializer)
    x = rng.normal(0, 1, (5, 8)).astype(np.float16)
    for flag in (True, False):
        got = _run(upcast, {"x": x, "flag": np.array(flag)})
        expected = _run(_with_weights_of(model32, half), {"x": x.astype(np.float32), "flag": np.array(flag)})
        for g, e in zip(got, expected):
            assert g.dtype == np.float16 and np.array_equal(g, e.astype(np.float16))


def test_a_float32_model_is_left_as_it_is(rng):
    model = ir.from_proto(_float_model(rng))
    assert computed_in_float32(model) == (model, None)
