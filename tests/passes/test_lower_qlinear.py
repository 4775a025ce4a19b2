"""--format qlinear: ONNX-standard integer operators only, run by ORT and by ONNX's reference implementation alike,
as accurate as the QDQ form they were lowered from."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxq
from onnxq.errors import ConfigError
from onnxq.io.model_sessions import make_session
from onnxq.verify.kernels.emulate import integer_products
from onnxq.verify.kernels.qdq_view import qdq_view


def _cnn_mlp(rng: np.random.Generator, opset: int = 21):
    """Conv → Relu → MaxPool → Conv → Relu → MaxPool → Reshape → Gemm(transB, bias) → MatMul → Relu → MatMul."""
    def weight(name, shape, scale=0.3):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    inits = [weight("w1", (8, 3, 3, 3)), weight("b1", (8,), 0.1), weight("w2", (16, 8, 3, 3)),
             weight("b2", (16,), 0.1), weight("g1", (10, 16 * 4 * 4), 0.05), weight("gb1", (10,), 0.1),
             weight("m1", (10, 12)), weight("m2", (12, 6)), numpy_helper.from_array(np.array([0, -1], np.int64), "shp")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p2", "shp"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "g1", "gb1"], ["h"], name="gemm1", transB=1),
             helper.make_node("MatMul", ["h", "m1"], ["h2"], name="mm1"),
             helper.make_node("Relu", ["h2"], ["h3"], name="relu3"),
             helper.make_node("MatMul", ["h3", "m2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "cnn_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return model, {"x": rng.normal(0, 1, (64, 3, 16, 16)).astype(np.float32)}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(a * b) / np.linalg.norm(a) / np.linalg.norm(b))


def test_qlinear_is_standard_onnx_that_ort_and_the_reference_agree_on(tmp_path, rng):
    """Every product lowered (2 QLinearConv, a QLinearMatMul with the Relu folded, Gemm and the output MatMul as
    MatMulInteger chains), MaxPool / Reshape on the uint8 values (no DequantizeLinear left at all), no com.microsoft
    operator; onnx.checker accepts it; onnx.reference computes ORT's outputs exactly (measured: 0.0 apart), and the
    file is as accurate as the QDQ form (ORT_DISABLE_ALL outputs within 1e-5; cosine to float ≥ 0.999, measured
    0.99989). ORT runs all five products on integer kernels."""
    model, data = _cnn_mlp(rng)
    path = tmp_path / "cnn_mlp.onnx"
    onnx.save(model, path)
    qlinear = onnxq.quantize(path, data, output=tmp_path / "q.onnx", config=onnxq.QuantConfig(format="qlinear"))
    qdq = onnxq.quantize(path, data)
    ops = sorted(n.op_type for n in qlinear.model.graph)
    assert {n.domain for n in qlinear.model.graph} == {""} and "com.microsoft" not in qlinear.model.opset_imports
    assert ops.count("QLinearConv") == 2 and ops.count("QLinearMatMul") == 1 and ops.count("MatMulInteger") == 2
    assert "DequantizeLinear" not in ops and "Relu" not in ops and ops.count("MaxPool") == 2
    assert not [n for n in qlinear.report.notes if "kept in QDQ form" in n]
    proto = onnx.load(qlinear.output)
    onnx.checker.check_model(proto)
    held_out = {"x": rng.normal(0, 1, (8, 3, 16, 16)).astype(np.float32)}
    reference = ReferenceEvaluator(proto).run(None, held_out)[0]
    deployed = make_session(qlinear.model, optimize=True).run(None, held_out)[0]
    np.testing.assert_allclose(reference, deployed, atol=1e-5)
    exact_qdq = make_session(qdq.model, optimize=False).run(None, held_out)[0]
    np.testing.assert_allclose(make_session(qlinear.model, optimize=False).run(None, held_out)[0], exact_qdq,
                               atol=1e-5)
    want = make_session(path, optimize=False).run(None, held_out)[0]
    assert _cosine(want, deployed) >= 0.999
    placement = qlinear.report.to_dict()["verification"]["providers"]["CPUExecutionProvider"]["placement"]
    kernels = {name: run["op_type"] for name, run in placement["quantized"].items()}
    assert kernels == {"conv1": "QLinearConv", "conv2": "QLinearConv", "mm1": "QLinearMatMul",
                       "gemm1": "MatMulInteger", "mm2": "MatMulInteger"}


def test_the_emulator_sees_qlinear_products_as_their_qdq_form(rng):
    """QLinearMatMul / QLinearConv admit no error input: the emulator reads them back as DequantizeLinear → product
    → QuantizeLinear (the spec's definition), so all five products are found and checked, as in the QDQ file."""
    model, data = _cnn_mlp(rng)
    result = onnxq.quantize(model, data, config=onnxq.QuantConfig(format="qlinear", target="x86-vnni"))
    names = sorted(p.name for p in integer_products(qdq_view(result.model)))
    assert names == ["conv1", "conv2", "gemm1", "mm1", "mm2"]
    assert result.report.verification.passed


def test_a_conv_writing_a_model_output_stays_qdq_and_says_why(tmp_path, rng):
    """No requantized output to take: the Conv stays DequantizeLinear + float Conv (ConvInteger is slower)."""
    w = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 6, 6])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    data = {"x": rng.normal(0, 1, (16, 3, 8, 8)).astype(np.float32)}
    result = onnxq.quantize(model, data, config=onnxq.QuantConfig(format="qlinear"))
    assert [n for n in result.report.notes if n.startswith("format qlinear: conv kept in QDQ form (output not "
                                                              "requantized")]
    assert result.report.verification.passed


@pytest.mark.parametrize("granularity", ["per-tensor", "per-token"])
def test_dynamic_qlinear_has_no_contrib_operator(samples_dir, granularity):
    """Dynamic mode: DynamicQuantizeLinear → MatMulInteger already; per-token's com.microsoft MatMulIntegerToFloat
    becomes MatMulInteger → Cast → Mul. Verified within the default tolerance (cosine ≥ 0.99)."""
    config = onnxq.QuantConfig(mode="dynamic", format="qlinear", activation_granularity=granularity)
    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx", config=config)
    assert {n.domain for n in result.model.graph} == {""}
    assert sum(n.op_type == "MatMulInteger" for n in result.model.graph) == 6
    assert result.report.verification.passed


def test_weight_only_qlinear_is_refused():
    with pytest.raises(ConfigError, match="format qlinear with weight-only int4 weights: weight-only blocks are "
                                          "com.microsoft MatMulNBits"):
        onnxq.QuantConfig(format="qlinear", weights=onnxq.QScheme("int4", symmetric=True))
