"""A new kind of accelerator is two registrations, both in this file: its execution provider (absent from this
onnxruntime: its sessions fall back to the CPU, and its placement is predicted from its kernel table) and its
target, whose kernels take 16-bit activations and symmetric weights. The plan follows the target, and the
verification checks it the way the target says — nothing else in onnxq changes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxq
from onnxq.errors import ConfigError
from onnxq.targets import Target, register_target, unregister_target
from onnxq.targets.ort_kernels import KernelTypes
from onnxq.targets.providers import ExecutionProvider, register_provider, unregister_provider
from onnxq.verify import resolve_providers

NPU = "NpuLikeExecutionProvider"
_QDQ16 = KernelTypes(frozenset({"INT16", "UINT16"}))


@pytest.fixture
def npu_like():
    register_provider(ExecutionProvider(
        NPU, aliases=("npu-like",), install_hint="a vendor's onnxruntime build",
        kernels={("", "MatMul"): KernelTypes(frozenset({"FLOAT"})), ("", "DequantizeLinear"): _QDQ16,
                 ("", "QuantizeLinear"): KernelTypes(_QDQ16.types, ("output", 0))}))
    register_target(Target(
        "npu-like", "an NPU: 16-bit activations, symmetric int8 weights", checked_by="provider", provider=NPU,
        activation_types=(("int16", True), ("uint16", False)), symmetric_weights=True,
        exact_check="exact quantization on this CPU (the NPU absent): its integer products, exactly"))
    yield
    unregister_target("npu-like")
    unregister_provider(NPU)


def _mlp(path) -> None:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)
               for name, shape in (("w1", (32, 64)), ("w2", (64, 10)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 10])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)


def test_the_npu_like_target_plans_16_bit_activations_and_symmetric_weights(tmp_path, npu_like):
    _mlp(tmp_path / "mlp.onnx")
    data = {"x": np.random.default_rng(1).standard_normal((512, 32)).astype(np.float32)}
    config = onnxq.QuantConfig(target="npu-like")
    assert config.activations == onnxq.QScheme("int16", symmetric=True)  # the target's, the default left
    result = onnxq.quantize(tmp_path / "mlp.onnx", data, output=tmp_path / "q.onnx", config=config)
    model = onnx.load(tmp_path / "q.onnx")
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    quantize = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert len(quantize) == 2 and all(initializers[n.input[2]].dtype == np.int16 for n in quantize)
    assert all(initializers[n.input[2]] == 0 for n in quantize)  # symmetric activations: zero point 0
    weights = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in initializers]
    assert len(weights) == 2
    assert all(initializers[n.input[0]].dtype == np.int8 and not initializers[n.input[2]].any() for n in weights)
    verification = result.report.verification
    assert [(t.target, t.how.split(" (")[0]) for t in verification.coverage.targets] == [
        ("npu-like", "exact quantization on this CPU")]
    # 16 bits of activation lose almost nothing: the int8 weights' rounding is what remains (SQNR over 36 dB).
    cpu = verification.cpu.outputs[0].metrics
    assert cpu.cosine_mean > 0.9999 and cpu.sqnr_db > 36.0, (cpu.cosine_mean, cpu.sqnr_db)
    assert not verification.failed
    predicted = {p.provider: p for p in verification.predicted}[NPU]  # its kernel table, the provider absent
    assert len(predicted.quantized) == 2 and not predicted.elsewhere


def test_the_npu_like_target_refuses_what_its_kernels_do_not_take(npu_like):
    with pytest.raises(ConfigError, match="target npu-like takes activations int16 symmetric, uint16 asymmetric"):
        onnxq.QuantConfig(target="npu-like", activations=onnxq.QScheme("int8", symmetric=True))
    with pytest.raises(ConfigError, match="target npu-like takes symmetric weights only"):
        onnxq.QuantConfig(target="npu-like", weights=onnxq.QScheme("int8", symmetric=False))
    # Its alias is a provider name a config may give; absent here, it is skipped with the way to get it.
    assert resolve_providers(["npu-like"]) == (["CPUExecutionProvider"], [
        f"{NPU} is not available in this onnxruntime (a vendor's onnxruntime build); skipped"])


def test_16_bit_activations_need_opset_21(samples_dir, tmp_path):
    with pytest.raises(onnxq.OnnxqError, match="activations int16 need opset 21"):
        onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", output=tmp_path / "q.onnx",
                       config=onnxq.QuantConfig(activations=onnxq.QScheme("int16", symmetric=True)))
    assert not (tmp_path / "q.onnx").exists()
