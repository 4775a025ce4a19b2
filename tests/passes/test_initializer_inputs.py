"""Initializers listed as graph inputs (required before IR version 4) are read as constants: the prepared clone lists
only the data's inputs and computes what the model as given computes with its defaults; the model as given keeps
its inputs."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxq import QuantConfig
from onnxq.handlers import plan_model
from onnxq.passes.preparation.initializer_inputs import initializers_as_constants
from onnxq.passes.preparation.steps import prepared


def _ir3_model(rng) -> onnx.ModelProto:
    """x → Gemm(W, B) → Relu → MatMul(W2): opset 9, IR version 3, each initializer also a graph input."""
    inits = {"W": rng.normal(0, 1, (16, 32)), "B": rng.normal(0, 1, (32,)), "W2": rng.normal(0, 1, (32, 8))}
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["h"], name="gemm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inits.items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                              [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    onnx.checker.check_model(model)
    return model


def _run(model: ir.Model, x: np.ndarray) -> np.ndarray:
    proto = ir.serde.serialize_model(model).SerializeToString()
    return ort.InferenceSession(proto, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_initializer_inputs_become_constants_in_a_clone(rng):
    given = ir.serde.deserialize_model(_ir3_model(rng))
    constant, note = initializers_as_constants(given)
    assert constant is not given
    assert [v.name for v in constant.graph.inputs] == ["x"]
    assert sorted(constant.graph.initializers) == ["B", "W", "W2"]
    assert constant.ir_version >= 4  # IR 3 requires every initializer to be an input
    assert note.startswith("3 initializer(s) also listed as graph inputs (IR version 3)")
    # The model as given keeps its inputs, and the clone computes what it computes with its defaults.
    assert [v.name for v in given.graph.inputs] == ["x", "W", "B", "W2"] and given.ir_version == 3
    x = rng.normal(0, 1, (4, 16)).astype(np.float32)
    np.testing.assert_array_equal(_run(constant, x), _run(given, x))


def test_a_model_without_initializer_inputs_is_left_as_it_is(rng):
    proto = _ir3_model(rng)
    del proto.graph.input[1:]
    proto.ir_version = 4
    model = ir.serde.deserialize_model(proto)
    assert initializers_as_constants(model) == (model, None)


def test_the_planners_see_the_weights_after_preparation(rng):
    """Initializers that are also graph inputs (the Model Zoo's opset 7-9 CNNs, old PyTorch exports with
    keep_initializers_as_inputs) are weights to quantize, not 'B is an initializer that is also a graph input'."""
    model, notes = prepared(ir.serde.deserialize_model(_ir3_model(rng)))
    plans, skips = plan_model(model.graph, QuantConfig(), "static")
    assert sorted(p.node.name for p in plans) == ["gemm", "mm"] and skips == []
    assert any("read as constants" in n for n in notes) and any("opset 9 converted" in n for n in notes)
