"""ConvTranspose, GRU and RNN stay float with the reason: ORT's CPU provider has no integer
kernel for them. The premise is checked on the installed onnxruntime, so a release that adds one fails here."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.errors import UnsupportedModelError
from onnxq.handlers.float_only import NO_INTEGER_KERNEL


def _model(nodes, inits, x_shape) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _conv_then_transpose(rng) -> onnx.ModelProto:
    return _model([helper.make_node("Conv", ["x", "w1"], ["h"], name="conv", pads=[1, 1, 1, 1]),
                   # Overlapping 3×3 blocks at stride 2: not the kernel = stride kind made a Conv
                   # (passes/conv_transpose_as_conv.py).
                   helper.make_node("ConvTranspose", ["h", "w2"], ["y"], name="up", strides=[2, 2],
                                    pads=[1, 1, 1, 1], output_padding=[1, 1])],
                  {"w1": rng.normal(0, 0.2, (8, 3, 3, 3)).astype(np.float32),
                   "w2": rng.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32)}, ["n", 3, 16, 16])


def test_conv_transpose_is_left_float_with_the_reason(rng, tmp_path):
    data = {"x": rng.normal(0, 1, (32, 3, 16, 16)).astype(np.float32)}
    report = onnxq.quantize(_conv_then_transpose(rng), data, output=tmp_path / "q.onnx").report
    assert [e.name for e in report.quantized] == ["conv"]
    [entry] = report.left_float
    assert (entry.name, entry.op_type) == ("up", "ConvTranspose")
    assert "no integer ConvTranspose" in entry.detail
    saved = onnx.load(str(tmp_path / "q.onnx"))
    [up] = [n for n in saved.graph.node if n.op_type == "ConvTranspose"]
    assert up.input[1] == "w2"  # its float weight, untouched
    assert report.passed


def test_a_gru_alone_is_refused_with_its_reason(rng):
    hidden, features = 8, 6
    inits = {"W": rng.normal(0, 0.3, (1, 3 * hidden, features)).astype(np.float32),
             "R": rng.normal(0, 0.3, (1, 3 * hidden, hidden)).astype(np.float32)}
    model = _model([helper.make_node("GRU", ["x", "W", "R"], ["y"], name="gru", hidden_size=hidden)], inits,
                   [5, "n", features])
    with pytest.raises(UnsupportedModelError, match="all 1 candidate node.*gru: ORT has no integer GRU kernel"):
        onnxq.quantize(model, {"x": rng.normal(0, 1, (5, 16, features)).astype(np.float32)},
                       config=onnxq.QuantConfig(mode="static", calibration=onnxq.CalibrationConfig(
                           sample_axes={"x": 1})))


@pytest.mark.skipif("XnnpackExecutionProvider" in ort.get_available_providers(),
                    reason="this onnxruntime build has XNNPACK, whose QLinearConvTranspose the premise excludes")
def test_ort_has_no_integer_conv_transpose_on_cpu(rng, tmp_path):
    """The premise of NO_INTEGER_KERNEL["ConvTranspose"]: a QDQ ConvTranspose keeps its float kernel at
    ORT_ENABLE_ALL, and the contrib QLinearConvTranspose does not load."""
    assert "ConvTranspose" in NO_INTEGER_KERNEL
    weight = rng.integers(-100, 100, (8, 4, 3, 3)).astype(np.int8)
    inits = {"xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8), "wq": weight,
             "ws": np.full(4, 0.01, np.float32), "wz": np.zeros(4, np.int8), "ys": np.array(0.05, np.float32),
             "yz": np.array(128, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
             helper.make_node("ConvTranspose", ["xd", "wd"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"])]
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(_model(nodes, inits, [1, 8, 16, 16]).SerializeToString(), options,
                         providers=["CPUExecutionProvider"])
    kernels = [(n.op_type, n.domain) for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert ("ConvTranspose", "") in kernels and not any("QLinear" in op for op, _ in kernels)

    fused = helper.make_node("QLinearConvTranspose", ["x", "xs", "xz", "wq", "ws", "wz", "ys", "yz"], ["y"],
                             domain="com.microsoft", strides=[2, 2])
    graph = helper.make_graph([fused], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    with pytest.raises(Exception, match="QLinearConvTranspose"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
