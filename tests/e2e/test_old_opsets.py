"""A model below opset 13 is converted by onnx's version converter and quantized; the report says so, and the
verification compares with the model as given. Softmax changed meaning at opset 13 (axis:
one axis instead of everything from it on), so a conversion that kept the attribute as it was would fail here."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxq


def _opset11_model(rng) -> onnx.ModelProto:
    w = numpy_helper.from_array(rng.normal(0, 1, (16, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Unsqueeze", ["h"], ["hu"], axes=[1], name="unsqueeze"),
             helper.make_node("Squeeze", ["hu"], ["hs"], axes=[1], name="squeeze"),
             helper.make_node("Softmax", ["hs"], ["y"], axis=1, name="softmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    return model


def test_an_opset_11_model_is_converted_quantized_and_verified_against_itself(rng, tmp_path):
    model = _opset11_model(rng)
    path = tmp_path / "old.onnx"
    onnx.save(model, path)
    data = {"x": rng.normal(0, 1, (64, 4, 16)).astype(np.float32)}
    result = onnxq.quantize(path, data, output=tmp_path / "old.int8.onnx")
    report = result.report
    assert any("opset 11 converted to 13 with onnx's version converter" in n for n in report.notes)
    assert [e.name for e in report.quantized] == ["mm"] and report.passed
    assert report.verification.outputs[0].metrics.cosine_mean >= 0.999  # against the opset-11 model itself
    saved = onnx.load(str(tmp_path / "old.int8.onnx"))
    assert {o.domain: o.version for o in saved.opset_import}[""] == 13
    # The file the user gave is untouched, still opset 11.
    assert onnx.load(str(path)).opset_import[0].version == 11
    # The quantized model's Softmax normalizes over the same elements as the original's: each [4·8] block sums to 1
    # in opset 11 (everything from axis 1 on), not each row of 8.
    quantized = ort.InferenceSession(str(tmp_path / "old.int8.onnx"), providers=["CPUExecutionProvider"])
    out = quantized.run(None, {"x": data["x"][:2]})[0]
    np.testing.assert_allclose(out.reshape(2, -1).sum(axis=1), 1.0, atol=1e-5)


def test_an_opset_6_model_onnxruntime_cannot_run_is_verified_against_its_conversion(rng, tmp_path):
    # onnxruntime implements opset 7 and later: the Gemm-6 model as given has no kernel ("Could not find an
    # implementation for Gemm(6)", exit 2 before); its opset-13 conversion is the float reference instead.
    w = numpy_helper.from_array(rng.normal(0, 1, (8, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 1, (8,)).astype(np.float32), "b")
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="fc")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    model.ir_version = 3
    path = tmp_path / "opset6.onnx"
    onnx.save(model, path)
    data = {"x": rng.normal(0, 1, (40, 16)).astype(np.float32)}
    report = onnxq.quantize(path, data, output=tmp_path / "opset6.int8.onnx").report
    assert any("onnxruntime runs opset 7 and later, so the float model it is verified against is the converted one"
               in n for n in report.notes)
    assert [e.name for e in report.quantized] == ["fc"] and report.passed
    assert report.verification.samples == 20  # every 2nd batch of the model's fixed 4 held back: half the data
    assert report.verification.outputs[0].metrics.cosine_mean >= 0.999
    x = data["x"][36:40]
    expected = x @ numpy_helper.to_array(w).T + numpy_helper.to_array(b)  # the arithmetic of the model as given
    quantized = ort.InferenceSession(str(tmp_path / "opset6.int8.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(quantized.run(None, {"x": x})[0], expected, atol=0.1 * np.abs(expected).max())
