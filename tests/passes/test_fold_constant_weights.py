"""Each weight fold is the numpy operation ONNX specifies: a MatMul weight computed from a constant by each foldable
op (and a chain of them) folds into one float32 initializer, and the folded model computes exactly what ORT computes
on the model as given."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxq.passes.preparation.fold_constant_weights import folded_constant_weights

K, N = 8, 6


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


# Each case: (the nodes turning initializer "c" into the weight "w" [K, N], its extra initializers, c's shape).
CASES = {
    "Reshape with 0 and -1": ([helper.make_node("Reshape", ["c", "shape"], ["w"])], [_ints("shape", [0, -1])],
                              (K, 2, 3)),
    "Transpose": ([helper.make_node("Transpose", ["c"], ["w"], perm=[1, 0])], [], (N, K)),
    "Squeeze": ([helper.make_node("Squeeze", ["c", "axes"], ["w"])], [_ints("axes", [-1])], (K, N, 1)),
    "Slice with a negative step": ([helper.make_node("Slice", ["c", "s", "e", "a", "st"], ["w"])],
                                   [_ints("s", [-1]), _ints("e", [-2**63]), _ints("a", [1]), _ints("st", [-2])],
                                   (K, 2 * N)),
    "Concat, Cast, Unsqueeze, Squeeze": (
        [helper.make_node("Concat", ["c", "c"], ["cc"], axis=1), helper.make_node("Cast", ["cc"], ["c32"], to=1),
         helper.make_node("Unsqueeze", ["c32", "axes"], ["u"]), helper.make_node("Squeeze", ["u", "axes"], ["w"])],
        [_ints("axes", [0])], (K, N // 2)),
}


@pytest.mark.parametrize("case", CASES)
def test_fold_equals_onnxruntime(rng, case):
    nodes, extra, shape = CASES[case]
    dtype = np.float16 if case.startswith("Concat") else np.float32
    c = numpy_helper.from_array(rng.normal(0, 1, shape).astype(dtype), "c")
    graph = helper.make_graph(nodes + [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, N])], [c, *extra])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = ir.from_proto(proto)
    folded, note = folded_constant_weights(model)
    assert note is not None and f"{len(nodes)} node(s) computing a constant weight" in note
    assert [n.op_type for n in folded.graph] == ["MatMul"]
    assert len(model.graph) == len(nodes) + 1  # the model as given is unchanged
    x = {"x": rng.normal(0, 1, (3, K)).astype(np.float32)}
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = ort.InferenceSession(ir.to_proto(folded).SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, want)


def test_run_time_arguments_and_integer_constants_do_not_fold(rng):
    """A Reshape whose shape is a graph input, and a Transpose of an int64 constant, are not weights to fold."""
    c = numpy_helper.from_array(rng.normal(0, 1, (K, N)).astype(np.float32), "c")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["c", "shape"], ["w"]), helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Transpose", ["ids"], ["ids_t"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, K]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("ids_t", TensorProto.INT64, None)],
        [c, _ints("ids", [[1, 2], [3, 4]])])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    folded, note = folded_constant_weights(model)
    assert folded is model and note is None


@pytest.mark.parametrize("opset", [17, 18])  # ReduceL2's axes: an attribute, then an input
def test_a_weight_normalization_folds_to_what_onnxruntime_computes(rng, opset):
    """PyTorch's weight_norm as wav2vec2 / HuBERT / WavLM export it: w = v · (g / ‖v‖), the norm over K for each
    output column. Its Conv had no constant weight (and computed in float16 for a CUDA target, it crashed ORT)."""
    v = numpy_helper.from_array(rng.normal(0, 1, (K, N)).astype(np.float32), "v")
    g = numpy_helper.from_array(rng.uniform(0.5, 2, (1, N)).astype(np.float32), "g")
    axes = {"axes": [0]} if opset < 18 else {}
    reduce_inputs = ["v"] if opset < 18 else ["v", "axes"]
    nodes = [helper.make_node("ReduceL2", reduce_inputs, ["norm"], keepdims=1, **axes),
             helper.make_node("Div", ["g", "norm"], ["gain"]), helper.make_node("Mul", ["v", "gain"], ["w"]),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, N])],
                              [v, g, _ints("axes", [0])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    folded, note = folded_constant_weights(ir.from_proto(proto))
    assert note is not None and "1 Div / 1 Mul / 1 ReduceL2" in note
    assert [n.op_type for n in folded.graph] == ["MatMul"]
    x = {"x": rng.normal(0, 1, (3, K)).astype(np.float32)}
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = ort.InferenceSession(ir.to_proto(folded).SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # the norm's sum in float64, ORT's in float32
