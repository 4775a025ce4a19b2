"""Model-local functions (torch.onnx.export's export_modules_as_functions, torch 2.1–2.4 dynamo exports) are inlined
before planning: each call's products are planned under the call's name, the clone computes what ONNX Runtime
computes on the model as given (which it inlines too), and a function that cannot be inlined stays a call, noted."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq import QuantConfig
from onnxq.handlers import plan_model
from onnxq.passes.preparation.inline_functions import inlined_functions
from onnxq.passes.preparation.steps import prepared

_WIDTH = 16


def _block(opset: int = 17) -> onnx.FunctionProto:
    """x + MatMul(LeakyRelu(MatMul(x, w1), alpha = the call's slope), w2)."""
    slope = onnx.AttributeProto(name="alpha", ref_attr_name="slope", type=onnx.AttributeProto.FLOAT)
    leaky = helper.make_node("LeakyRelu", ["h"], ["a"], name="act")
    leaky.attribute.append(slope)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"), leaky,
             helper.make_node("MatMul", ["a", "w2"], ["o"], name="fc2"),
             helper.make_node("Add", ["x", "o"], ["y"], name="residual")]
    return helper.make_function("local", "Block", ["x", "w1", "w2"], ["y"], nodes,
                                [helper.make_opsetid("", opset)], attributes=["slope"])


def _pair() -> onnx.FunctionProto:
    """Two Blocks in a row: a function calling a function."""
    nodes = [helper.make_node("Block", ["x", "w1", "w2"], ["h"], name="first", domain="local", slope=0.1),
             helper.make_node("Block", ["h", "w1", "w2"], ["y"], name="second", domain="local", slope=0.3)]
    return helper.make_function("local", "Pair", ["x", "w1", "w2"], ["y"], nodes,
                                [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def _model(rng, nested: bool = False, block_opset: int = 17) -> onnx.ModelProto:
    """x → blk1 → blk2 (or one Pair call, pair) → MatMul head."""
    weights = {name: rng.normal(0, 0.3, (_WIDTH, _WIDTH)) for name in ("w1", "w2", "w3", "w4")}
    weights["wh"] = rng.normal(0, 0.3, (_WIDTH, 4))
    if nested:
        calls = [helper.make_node("Pair", ["x", "w1", "w2"], ["h2"], name="pair", domain="local")]
    else:
        calls = [helper.make_node("Block", ["x", "w1", "w2"], ["h1"], name="blk1", domain="local", slope=0.1),
                 helper.make_node("Block", ["h1", "w3", "w4"], ["h2"], name="blk2", domain="local", slope=0.2)]
    graph = helper.make_graph(
        [*calls, helper.make_node("MatMul", ["h2", "wh"], ["y"], name="head")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", _WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()])
    functions = [_block(block_opset)] + ([_pair()] if nested else [])
    return helper.make_model(graph, functions=functions, ir_version=10,
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def _run(model: ir.Model | onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    proto = model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _planned(model: ir.Model) -> list[str]:
    plans, _ = plan_model(model.graph, QuantConfig(), "static")
    return sorted(p.node.name for p in plans)


def test_each_call_is_inlined_with_its_products_named_under_the_call(rng):
    proto = _model(rng)
    given = ir.serde.deserialize_model(proto)
    assert _planned(given) == ["head"]  # the calls' four products are not seen before inlining
    inlined, note = inlined_functions(given)
    assert _planned(inlined) == ["blk1/fc1", "blk1/fc2", "blk2/fc1", "blk2/fc2", "head"]
    assert not inlined.functions
    assert note.startswith("model-local function(s) local:Block inlined (2 call(s) in the graph)")
    assert len(given.functions) == 1 and [n.name for n in given.graph] == ["blk1", "blk2", "head"]  # as given
    x = rng.normal(0, 1, (8, _WIDTH)).astype(np.float32)
    # The same float operations in the same order as ORT's own inlining, each call's slope its own.
    np.testing.assert_allclose(_run(inlined, x), _run(proto, x), rtol=1e-6, atol=1e-6)


def test_nested_calls_are_named_by_their_whole_call_path(rng):
    proto = _model(rng, nested=True)
    model, notes = prepared(ir.serde.deserialize_model(proto))
    assert _planned(model) == ["head", "pair/first/fc1", "pair/first/fc2", "pair/second/fc1", "pair/second/fc2"]
    assert any("local:Block, local:Pair inlined (1 call(s)" in n for n in notes)
    x = rng.normal(0, 1, (8, _WIDTH)).astype(np.float32)
    np.testing.assert_allclose(_run(model, x), _run(proto, x), rtol=1e-6, atol=1e-6)


def _calling_itself(rng) -> onnx.ModelProto:
    proto = _model(rng)
    block = proto.functions[0]
    block.node.append(helper.make_node("Block", ["y", "w1", "w2"], ["z"], name="again", domain="local", slope=0.1))
    block.output[0] = "z"
    block.opset_import.append(helper.make_opsetid("local", 1))
    return proto


@pytest.mark.parametrize("make, why", [
    (lambda rng: _model(rng, block_opset=18), "(function local:Block imports opset ai.onnx 18, the model 17)"),
    (_calling_itself, "(function local:Block calls itself through its calls)"),
])
def test_a_function_that_cannot_be_inlined_stays_a_call_with_a_note(rng, make, why):
    given = ir.serde.deserialize_model(make(rng))
    same, note = inlined_functions(given)
    assert same is given and len(given.functions) == 1 and _planned(given) == ["head"]
    assert note == f"model-local function(s) local:Block not inlined {why}: the products inside them stay float — " \
                   "export with functions inlined"


def test_a_call_inside_an_if_branch_is_inlined_there(rng):
    weights = {name: rng.normal(0, 0.3, (_WIDTH, _WIDTH)).astype(np.float32) for name in ("w1", "w2")}
    then_branch = helper.make_graph(
        [helper.make_node("Block", ["x", "w1", "w2"], ["t"], name="blk", domain="local", slope=0.1)], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", _WIDTH])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="pass")], "else", [],
                                    [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", _WIDTH])])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", _WIDTH]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", _WIDTH])],
        [numpy_helper.from_array(a, n) for n, a in weights.items()])
    proto = helper.make_model(graph, functions=[_block()], ir_version=10,
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    inlined, note = inlined_functions(ir.serde.deserialize_model(proto))
    body = inlined.graph.node("branch").attributes["then_branch"].as_graph()
    assert [n.name for n in body] == ["blk/fc1", "blk/act", "blk/fc2", "blk/residual"] and not inlined.functions
    assert note.startswith("model-local function(s) local:Block inlined (1 call(s) in the graph)")
    x = rng.normal(0, 1, (4, _WIDTH)).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
               for m in (proto, ir.serde.serialize_model(inlined))]
        np.testing.assert_allclose(run[1], run[0], rtol=1e-6, atol=1e-6)


def test_a_model_that_calls_no_function_is_left_as_it_is(rng):
    proto = _model(rng)
    del proto.graph.node[:2]
    proto.graph.node[0].input[0] = "x"
    model = ir.serde.deserialize_model(proto)
    assert inlined_functions(model) == (model, None)


def test_quantize_quantizes_the_products_inside_functions_and_writes_none(rng, tmp_path):
    proto = _model(rng)
    data = {"x": rng.normal(0, 1, (64, _WIDTH)).astype(np.float32)}
    result = onnxq.quantize(proto, data, output=tmp_path / "q.onnx")
    assert sorted(e.name for e in result.report.quantized) == ["blk1/fc1", "blk1/fc2", "blk2/fc1", "blk2/fc2",
                                                                "head"]
    assert result.report.passed
    written = onnx.load(tmp_path / "q.onnx")
    assert not written.functions
    x = data["x"][:8]
    assert _cosine(_run(written, x), _run(proto, x)) >= 0.999  # int8 of a 3-product chain: 0.9999 measured
    assert len(proto.functions) == 1  # the caller's model as given


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))
