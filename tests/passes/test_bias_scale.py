"""A bias that int32 codes cannot hold at the input's scale (activations near zero beside a bias of ordinary size):
the weight's scale is widened on those channels until they do, as onnxruntime.quantization does. Left float, ORT's
WeightBiasQuantization would quantize it all the same and wrap its codes: LR-ASPP's random-init classifier head
read cosine 0.87 on ORT's deployed kernels against 1.0000 exactly quantized."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq

# The scale of the input: its uint8 scale ~8e-9, the weights' ~7e-3 — int32 bias codes hold up to ~0.1; the bias is
# 0.01 on every channel but the first (1.0).
_TINY = 5e-7


def _model(op: str, rng) -> onnx.ModelProto:
    """x → Relu → op(W, b) → Relu → op(W2, b2): the first product's output is the second's quantized input, so ORT
    runs the first as one integer node (QLinearConv, QGemm) whose bias it quantizes."""
    if op == "Conv":
        shapes, out = [(8, 4, 3, 3), (8, 8, 3, 3)], ["N", 8, 8, 8]
        x_shape, attributes = ["N", 4, 8, 8], {"pads": [1, 1, 1, 1]}
    else:
        shapes, out, x_shape, attributes = [(32, 16), (16, 16)], ["N", 16], ["N", 32], {}
    bias = np.full(shapes[0][0] if op == "Conv" else shapes[0][1], 0.01)
    bias[0] = 1.0  # one channel's bias far past what int32 codes hold at this scale
    inits = {"w": rng.normal(0, 0.3, shapes[0]), "b": bias, "w2": rng.normal(0, 0.3, shapes[1]),
             "b2": rng.normal(0, 0.1, bias.shape)}
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node(op, ["r", "w", "b"], ["p"], name="product", **attributes),
             helper.make_node("Relu", ["p"], ["rp"], name="relu2"),
             helper.make_node(op, ["rp", "w2", "b2"], ["y"], name="next", **attributes)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                              [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _run(model: onnx.ModelProto, x: np.ndarray, level: ort.GraphOptimizationLevel) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("op", ["Conv", "Gemm"])
def test_a_bias_past_int32_widens_the_weight_scale_and_ort_computes_it(op, rng, tmp_path):
    proto = _model(op, rng)
    shape = [64] + [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim[1:]]
    x = (rng.normal(0, 1, shape) * _TINY).astype(np.float32)
    result = onnxq.quantize(proto, {"x": x}, output=tmp_path / "q.onnx", config={"verify": {"fallback": False}})
    entry = next(e for e in result.report.quantized if e.name == "product")
    assert "the weight's scale widened on 1 channel(s)" in entry.detail
    quantized = onnx.load(tmp_path / "q.onnx")
    codes = [numpy_helper.to_array(t).astype(np.int64) for t in quantized.graph.initializer
             if t.data_type == TensorProto.INT32 and t.name.endswith("_quantized")]
    near_the_edge = [c for c in codes if c.max() > 2**30]  # the first product's channel 0, inside int32
    assert len(codes) == 2 and len(near_the_edge) == 1 and near_the_edge[0].argmax() == 0
    assert near_the_edge[0].max() < 2**31 - 1
    held = x[:8]
    expected = _run(proto, held, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    deployed = _run(quantized, held, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    exact = _run(quantized, held, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    # Left float: cosine 0.63 (Conv) and 0.52 (Gemm) deployed here, 0.99998 exact.
    assert _cosine(deployed, expected) > 0.9999 and _cosine(exact, expected) > 0.9999
    assert result.report.passed


def test_a_bias_that_fits_keeps_the_weight_s_own_scale(rng):
    proto = _model("Conv", rng)
    x = rng.normal(0, 1, (64, 4, 8, 8)).astype(np.float32)
    result = onnxq.quantize(proto, {"x": x})
    entry = next(e for e in result.report.quantized if e.name == "product")
    assert "widened" not in entry.detail and "bias int32" in entry.detail
