"""AVX2 U8S8 emulation: known counts, ORT's real kernel (where this CPU saturates), and whole models."""

import numpy as np
import onnxruntime as ort
import pytest
from conftest import matmul_integer_session

import onnxq
from onnxq.io.model_sessions import make_session
from onnxq.verify.kernels.emulate import SaturationEmulator, integer_products, saturation_error


def _this_cpu_saturates() -> bool:
    b = np.full((2, 1), 127, np.int8)
    return int(matmul_integer_session(b).run(None, {"a": np.full((1, 2), 255, np.uint8)})[0][0, 0]) != 2 * 255 * 127


def test_known_counts():
    a = np.array([[255, 255, 255, 255, 10, 10]], np.uint8)
    b = np.zeros((6, 3), np.int8)
    b[0:2, 0] = 127  # 64770: saturates to 32767
    b[2:4, 1] = -128  # -65280: saturates to -32768
    b[1:3, 2] = 127  # indices 1 and 2 lie in different pairs: never summed together
    b[4:6, :] = 127  # 2540: far inside int16
    error, saturated = saturation_error(a, b)
    assert saturated == 2
    np.testing.assert_array_equal(error, [[32767 - 64770, -32768 + 65280, 0]])


@pytest.mark.parametrize("k", [7, 256, 1001])
@pytest.mark.parametrize("m", [1, 5, 64])
def test_emulation_equals_ort_kernel(rng, m, k):
    """ORT's U8S8 output = exact product + emulated error, bit for bit (M = 1 is MLAS's GEMV path). On a CPU
    whose kernel does not saturate (VNNI, ARM) ORT equals the exact product and the emulation still counts."""
    a = rng.choice([0, 128, 200, 255], size=(m, k)).astype(np.uint8)
    b = rng.choice([-128, -100, 0, 90, 127], size=(k, 48)).astype(np.int8)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    error, saturated = saturation_error(a, b)
    assert saturated > 0
    got = matmul_integer_session(b).run(None, {"a": a})[0]
    if _this_cpu_saturates():
        np.testing.assert_array_equal(got, exact + error)
    else:
        np.testing.assert_array_equal(got, exact)


@pytest.mark.parametrize("op", ["MatMulIntegerToFloat", "QGemm"])
def test_s8s8_kernels_are_exact(rng, op):
    """int8 activations × int8 weights never saturate (why S8S8 needs no pair limit), on adversarial data."""
    from onnx import TensorProto, helper, numpy_helper

    a = rng.choice([-128, -100, 0, 100, 127], size=(8, 64)).astype(np.int8)
    b = rng.choice([-127, -100, 0, 90, 127], size=(64, 16)).astype(np.int8)
    inputs = (["a", "b", "s", "s", "zp", "zp"] if op == "MatMulIntegerToFloat" else ["a", "s", "zp", "b", "s", "zp"])
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], domain="com.microsoft")], "g",
        [helper.make_tensor_value_info("a", TensorProto.INT8, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(1.0, np.float32), "s"),
         numpy_helper.from_array(np.array(0, np.int8), "zp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    assert saturation_error((a.astype(np.int32) + 128), b)[1] > 0  # as U8S8 these values would saturate


def _mlp(samples_dir, target, mode):
    data = np.load(samples_dir / "mlp_calib.npz")
    config = onnxq.QuantConfig(target=target, mode=mode, verify=onnxq.VerifyConfig(enabled=False))
    model = onnxq.quantize(samples_dir / "mlp.onnx", dict(data) if mode == "static" else None, config=config).model
    batches = [{k: data[k][i:i + 8] for k in data.files} for i in range(0, 64, 8)]
    return model, batches


def test_full_range_static_model_emulated_like_the_avx2_kernel(samples_dir):
    model, batches = _mlp(samples_dir, "x86-vnni", "static")
    assert len(integer_products(model)) == 3
    names = [o.name for o in model.graph.outputs]
    emulator = SaturationEmulator(model, names, base_saturates=False)  # QDQ: the base run is exact anywhere
    emulated = [emulator.run(b)[1] for b in batches]
    assert sum(n.saturated for n in emulator.nodes) > 0 and emulator.nodes[0].name == "/fc0/Gemm"
    if not _this_cpu_saturates():
        pytest.skip("this CPU's U8S8 kernel does not saturate: the counts above are all it can check")
    deployed = make_session(model, optimize=True)
    exact = make_session(model, optimize=False)
    for batch, outputs in zip(batches, emulated):
        got = deployed.run(names, batch)[0]
        if outputs is None:
            np.testing.assert_allclose(got, exact.run(names, batch)[0], atol=1e-5)
        else:
            np.testing.assert_allclose(got, outputs[0], atol=1e-5)  # measured: 1e-6
            assert np.abs(got - exact.run(names, batch)[0]).max() > 0.05  # saturation moved it


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_portable_models_cannot_saturate(samples_dir, mode):
    model, batches = _mlp(samples_dir, "portable", mode)
    emulator = SaturationEmulator(model, [o.name for o in model.graph.outputs], base_saturates=True)
    assert len(emulator.products) == 3 and not emulator.risky
    assert all(emulator.run(b)[1:] == (None, None) for b in batches)
    deployed, exact = make_session(model, optimize=True), make_session(model, optimize=False)
    for batch in batches:  # the deployed kernels equal the exact quantization on every CPU
        np.testing.assert_allclose(deployed.run(None, batch)[0], exact.run(None, batch)[0], atol=1e-4)


def test_report_says_where_it_ran_and_the_gate_names_saturating_nodes(samples_dir):
    data = samples_dir / "mlp_calib.npz"
    report = onnxq.quantize(samples_dir / "mlp.onnx", data).report.to_dict()
    coverage = report["verification"]["coverage"]
    assert coverage["target"] == "portable" and coverage["platform"]["onnxruntime"] == ort.__version__
    assert {t["target"] for t in coverage["targets"]} == {"x86-vnni", "x86-avx2", "arm64"}
    assert all(t["verdict"] != "out of tolerance" for t in coverage["targets"])
    assert not any(n["can_saturate"] for n in coverage["saturation"])
    # A full-range model checked for AVX2 with a tight bar: the AVX2 target fails and names the culprit.
    tight = onnxq.VerifyConfig(tolerance=onnxq.Tolerance(min_sqnr_db=30.0), sensitivity_samples=0)
    result = onnxq.quantize(samples_dir / "mlp.onnx", data,
                            config=onnxq.QuantConfig(target="x86-avx2", verify=tight))
    assert not result.report.verification.failed  # limited weights: 33.9 dB measured
    vnni_model = onnxq.quantize(samples_dir / "mlp.onnx", data, config=onnxq.QuantConfig(
        target="x86-vnni", verify=onnxq.VerifyConfig(enabled=False))).model
    checked = onnxq.verify(samples_dir / "mlp.onnx", vnni_model, data, config=tight, target="x86-avx2")
    assert checked.failed
    assert any("/fc0/Gemm" in line and "x86-avx2" in line for line in checked.coverage.failures())
    # On a saturating CPU the kernels themselves cost accuracy (measured 0.9969 deployed vs 0.9998 exact).
    assert checked.coverage.kernels_cost_accuracy == _this_cpu_saturates()


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_integer_operators_corrected_to_exact_and_to_avx2(samples_dir, mode):
    """QOperator and dynamic models run integer kernels even under ORT_DISABLE_ALL: on a saturating CPU the
    emulator takes the saturation out (exact = the QDQ file's float arithmetic), elsewhere it adds it in (AVX2 =
    ORT's kernel here). Both directions are checked against a real run where this CPU allows."""
    data = np.load(samples_dir / "mlp_calib.npz")
    batches = [{k: data[k][i:i + 8] for k in data.files} for i in range(0, 64, 8)]
    config = onnxq.QuantConfig(target="x86-vnni", mode=mode, format="qoperator",
                               verify=onnxq.VerifyConfig(enabled=False))
    model = onnxq.quantize(samples_dir / "mlp.onnx", dict(data) if mode == "static" else None, config=config).model
    ops = {n.op_type for n in model.graph}
    assert ops >= ({"QGemm"} if mode == "static" else {"MatMulInteger"}) and "DequantizeLinear" not in ops
    names = [o.name for o in model.graph.outputs]
    here_saturates = _this_cpu_saturates()
    emulator = SaturationEmulator(model, names, base_saturates=here_saturates)
    runs = [emulator.run(b) for b in batches]
    assert sum(n.saturated for n in emulator.nodes) > 0
    if mode == "static":
        qdq = onnxq.quantize(samples_dir / "mlp.onnx", dict(data), config=config.replace(format="qdq")).model
        exact_reference = make_session(qdq, optimize=False)
        emulated_avx2 = []
        for batch, (base, avx2, exact) in zip(batches, runs):
            truth = exact_reference.run(names, batch)[0]
            got = (exact or base)[0]
            np.testing.assert_allclose(got, truth, atol=2e-4)  # first order: errors on saturated activations
            if here_saturates:
                assert np.abs(base[0] - truth).max() > 0.05
            elif avx2 is not None:  # a batch whose products saturate on AVX2: the emulation must show it
                emulated_avx2.append(np.abs(avx2[0] - truth).max())
        # Off an AVX2 CPU, at least one batch saturates (sum of saturated > 0 above) and each one that does differs.
        assert here_saturates or (emulated_avx2 and min(emulated_avx2) > 0)
