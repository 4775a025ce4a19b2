"""A Relu (a Clip) after a quantized MatMul / Gemm whose output nothing quantizes (a residual Add, a float reader)
becomes Max(x, 0) (Max / Min of its bounds): ORT's QDQ fusions leave a product followed by Relu or Clip and no
QuantizeLinear unfused, and it ran as DequantizeLinear + float MatMul (a Gemm: float FusedGemm with its Relu)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq

_INTEGER = {"MatMul": "MatMulIntegerToFloat", "Gemm": "QGemm"}


def _model(op: str, reader: str, rng, clamp: str = "Relu") -> onnx.ModelProto:
    """x → op(W) → Relu (or Clip(0, 6)) → reader (Sigmoid, an Add of x, or a second product)."""
    shape = ["N", 6, 32] if op == "MatMul" else ["N", 32]
    weights = {"w": rng.normal(0, 0.2, (32, 32)), "w2": rng.normal(0, 0.2, (32, 32)), "low": np.zeros(()),
               "high": np.full((), 6.0)}
    bounds = ["low", "high"] if clamp == "Clip" else []
    nodes = [helper.make_node(op, ["x", "w"], ["h"], name="product"),
             helper.make_node(clamp, ["h", *bounds], ["r"], name="clamp")]
    if reader == "Add":
        nodes.append(helper.make_node("Add", ["r", "x"], ["y"], name="residual"))
    elif reader == "product":
        nodes.append(helper.make_node(op, ["r", "w2"], ["y"], name="next"))
    else:
        nodes.append(helper.make_node(reader, ["r"], ["y"], name="reader"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _deployed_ops(path, tmp_path) -> list[str]:
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "deployed.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(tmp_path / "deployed.onnx").graph.node]


def _run(model, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
@pytest.mark.parametrize("reader, config, clamp", [("Sigmoid", {}, "Relu"), ("Add", {}, "Relu"),
                                                   ("product", {"exclude_nodes": ["next"]}, "Relu"),
                                                   ("Sigmoid", {}, "Clip")])
def test_the_product_runs_on_an_integer_kernel(op, reader, config, clamp, rng, tmp_path):
    proto = _model(op, reader, rng, clamp)
    shape = (64, 6, 32) if op == "MatMul" else (64, 32)
    x = rng.normal(0, 1, shape).astype(np.float32)
    result = onnxq.quantize(proto, {"x": x}, output=tmp_path / "q.onnx",
                            config={**config, "verify": {"fallback": False}})
    assert any(note.startswith("1 Relu / Clip after a quantized product") for note in result.report.notes)
    written = [n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node]
    assert clamp not in written and "Max" in written and ("Min" in written) == (clamp == "Clip")
    ops = _deployed_ops(tmp_path / "q.onnx", tmp_path)
    assert _INTEGER[op] in ops and "FusedGemm" not in ops  # not DequantizeLinear + float MatMul / FusedGemm
    expected = _run(proto.SerializeToString(), x)
    got = _run(str(tmp_path / "q.onnx"), x)
    assert np.dot(got.ravel(), expected.ravel()) / (np.linalg.norm(got) * np.linalg.norm(expected)) > 0.999


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_a_relu_whose_output_is_quantized_stays(op, rng, tmp_path):
    proto = _model(op, "product", rng)
    x = rng.normal(0, 1, (64, 6, 32) if op == "MatMul" else (64, 32)).astype(np.float32)
    result = onnxq.quantize(proto, {"x": x}, output=tmp_path / "q.onnx")
    assert not any("written as Max" in note for note in result.report.notes)
    assert "Max" not in [n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node]
