"""A Conv kept float (excluded, or by the fallback) after a requantized Conv output reads its own DequantizeLinear,
per channel: behind the shared per-tensor one, ORT's WeightBiasQuantization quantized its weight (per tensor) and bias
itself, and with a quantized Conv after it ran it as QLinearConv — a node the report calls float."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq


def _chain(rng, between: str | None) -> onnx.ModelProto:
    """conv1 → Relu → [MaxPool 1×1] → conv2 → Relu → conv3 → Relu; conv2 has one channel 50× the others."""
    weights = {f"w{i}": rng.normal(0, 0.2, (16, 3 if i == 1 else 16, 3, 3)) for i in (1, 2, 3)}
    weights["w2"][0] *= 50  # int8 per tensor leaves the other 15 channels ~2 levels
    weights.update({f"b{i}": rng.normal(0, 0.1, (16,)) for i in (1, 2, 3)})
    nodes, previous = [], "x"
    for i in (1, 2, 3):
        if i == 2 and between:
            nodes.append(helper.make_node(between, [previous], ["moved"], name="between", kernel_shape=[1, 1]))
            previous = "moved"
        nodes += [helper.make_node("Conv", [previous, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        previous = f"r{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])],
                              [helper.make_tensor_value_info("r3", TensorProto.FLOAT, ["N", 16, 12, 12])],
                              [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _session(path, level: ort.GraphOptimizationLevel, saved=None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    if saved is not None:
        options.optimized_model_filepath = str(saved)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("between", [None, "MaxPool"])
def test_a_float_conv_after_a_requantized_output_runs_float_on_ort(between, rng, tmp_path):
    proto = _chain(rng, between)
    x = rng.normal(0, 1, (48, 3, 12, 12)).astype(np.float32)
    # Every 10th sample held back (verify.max_samples set: the fixed rule, not the default's what-a-bar-needs):
    # the 44 calibration samples whose ranges put no requantized value on a rounding edge between the two runs.
    result = onnxq.quantize(proto, {"x": x}, output=tmp_path / "q.onnx",
                            config={"exclude_nodes": ["conv2"], "verify": {"fallback": False, "max_samples": 64}})
    assert sorted(e.name for e in result.report.quantized) == ["conv1", "conv3"]
    _session(tmp_path / "q.onnx", ort.GraphOptimizationLevel.ORT_ENABLE_ALL, tmp_path / "deployed.onnx")
    ops = [n.op_type for n in onnx.load(tmp_path / "deployed.onnx").graph.node]
    # Not 3 QLinearConv: conv2, excluded, is not quantized per tensor by ORT either.
    assert ops.count("QLinearConv") == 2 and sum(op in ("Conv", "FusedConv") for op in ops) == 1
    held = x[:8]
    deployed = _session(tmp_path / "q.onnx", ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": held})[0]
    exact = _session(tmp_path / "q.onnx", ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, {"x": held})[0]
    np.testing.assert_allclose(deployed, exact, rtol=0, atol=1e-3 * np.abs(exact).max())  # the same model, run alike
