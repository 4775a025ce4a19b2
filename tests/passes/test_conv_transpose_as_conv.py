"""A kernel = stride ConvTranspose made a 1×1 Conv + DepthToSpace (passes/conv_transpose_as_conv.py): the
same outputs under ORT, every other ConvTranspose untouched, and the rewritten one quantized as a Conv."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.passes.preparation.conv_transpose_as_conv import conv_transposes_as_convs


def _model(attributes: dict, weight: np.ndarray, bias: np.ndarray | None, channels: int = 6) -> onnx.ModelProto:
    inits = {"w": weight} | ({} if bias is None else {"b": bias})
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias is not None else []), ["y"], name="up",
                            **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          ["n", channels, 5, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize(("k", "attributes", "with_bias"), [
    (2, {"strides": [2, 2]}, True),
    (3, {"strides": [3, 3], "kernel_shape": [3, 3], "pads": [0, 0, 0, 0]}, False),
    (2, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, True),
    (1, {}, True),
])
def test_the_rewrite_computes_what_the_conv_transpose_does(rng, k, attributes, with_bias):
    weight = rng.normal(0, 0.3, (6, 4, k, k)).astype(np.float32)
    bias = rng.normal(0, 0.5, 4).astype(np.float32) if with_bias else None
    model = _model(attributes, weight, bias)
    rewritten, note = conv_transposes_as_convs(ir.serde.deserialize_model(model))
    assert note is not None and "1 ConvTranspose" in note
    proto = ir.serde.serialize_model(rewritten)
    assert [n.op_type for n in proto.graph.node] == ["Conv", "DepthToSpace"]
    assert proto.graph.node[0].name == "up"
    x = rng.normal(0, 1, (3, 6, 5, 7)).astype(np.float32)
    expected, got = _run(model, x), _run(proto, x)
    assert got.shape == expected.shape == (3, 4, 5 * k, 7 * k)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("shape", "attributes"), [
    ((6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),  # overlapping blocks
    ((6, 4, 2, 2), {"strides": [2, 2], "pads": [1, 1, 0, 0]}),
    ((6, 2, 2, 2), {"strides": [2, 2], "group": 2}),
    ((6, 4, 2, 2), {"strides": [2, 2], "dilations": [2, 2]}),
    ((6, 4, 2, 2), {"strides": [2, 2], "output_shape": [10, 14]}),
    ((6, 4, 2, 3), {"strides": [2, 3]}),  # not square: DepthToSpace takes one block size
])
def test_other_conv_transposes_are_left_as_they_are(rng, shape, attributes):
    model = ir.serde.deserialize_model(_model(attributes, rng.normal(0, 0.3, shape).astype(np.float32), None))
    same, note = conv_transposes_as_convs(model)
    assert same is model and note is None


def test_the_rewritten_upsampling_is_quantized_as_a_conv(rng, tmp_path):
    model = _model({"strides": [2, 2]}, rng.normal(0, 0.3, (6, 4, 2, 2)).astype(np.float32),
                   rng.normal(0, 0.5, 4).astype(np.float32))
    calib = {"x": rng.normal(0, 1, (32, 6, 5, 7)).astype(np.float32)}
    held = {"x": rng.normal(0, 1, (16, 6, 5, 7)).astype(np.float32)}
    result = onnxq.quantize(model, calib, output=tmp_path / "q.onnx", verify_data=held,
                            config=onnxq.QuantConfig(verify=onnxq.VerifyConfig(sensitivity_samples=0,
                                                                               check_speed=False)))
    report = result.report
    assert [(e.name, e.op_type) for e in report.quantized] == [("up", "Conv")]
    assert any("ConvTranspose node(s) with kernel = stride" in n for n in report.notes)
    saved = onnx.load(str(tmp_path / "q.onnx"))
    assert "ConvTranspose" not in {n.op_type for n in saved.graph.node}
    assert report.passed
    # int8 weights and activations of a 6-channel sum: at least 30 dB from float's outputs (seeded).
    assert report.verification.outputs[0].metrics.sqnr_db >= 30.0
