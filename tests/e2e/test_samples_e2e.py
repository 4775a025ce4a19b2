"""End to end on the models/ samples through real ONNX Runtime sessions."""

import hashlib

import numpy as np
import onnx
import pytest

import onnxq
from onnxq.io.model_sessions import make_session


def _cosine(a, b):
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_tiny_transformer_static(samples_dir, tmp_path):
    model = samples_dir / "tiny_transformer.onnx"
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    result = onnxq.quantize(model, samples_dir / "tiny_transformer_calib.npz", output=tmp_path / "q.onnx")
    report = result.report
    assert hashlib.sha256(model.read_bytes()).hexdigest() == digest
    assert sorted(e.name for e in report.quantized if e.op_type == "MatMul") == sorted(
        f"/{n}/MatMul" for n in ["attention.query", "attention.key", "attention.value", "attention.output",
                                 "ffn.intermediate", "ffn.output"])
    assert {e.name for e in report.left_float} == {"/attention/scores/MatMul", "/attention/context/MatMul"}
    # Every quantized MatMul became an ORT integer kernel.
    assert report.verification.kernels["MatMulIntegerToFloat"] == 6
    assert report.verification.data.startswith("held-out calibration samples")
    assert report.verification.samples == 12  # every 10th of 128
    assert report.calibration_samples == 116
    # Independent check on fresh inputs: float reference without optimizations vs the saved model.
    ids = np.random.default_rng(1).integers(0, 2048, (16, 24))
    expected = make_session(model, optimize=False).run(None, {"input_ids": ids})[0]
    got = make_session(result.output, optimize=True).run(None, {"input_ids": ids})[0]
    assert _cosine(expected, got).mean() >= 0.999  # measured 0.9999
    assert report.quant_bytes <= 0.3 * report.float_bytes


def test_mlp_gemm_becomes_qgemm(samples_dir, tmp_path):
    # Numeric bars only: the sample MLP's random weights leave a held-out near tie that int8 flips (top-1 0.96),
    # which the default top-1 gate would restore by keeping two Gemms float (tests/e2e/test_task_gate.py).
    numeric = onnxq.QuantConfig(verify=onnxq.VerifyConfig(tolerance=onnxq.Tolerance(task="numeric")))
    result = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", output=tmp_path / "q.onnx",
                            config=numeric)
    kernels = result.report.verification.kernels
    assert kernels.get("QGemm") == 3 and "Gemm" not in kernels
    check = result.report.verification.outputs[0]
    assert check.name == "logits" and check.metrics.cosine_mean >= 0.999  # measured 0.9998
    assert all("bias int32" in e.detail for e in result.report.quantized)


def test_quantize_attention_switch_quantizes_both_inputs(samples_dir, tmp_path):
    config = onnxq.QuantConfig(quantize_activation_matmul=True)
    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz",
                            config=config)
    assert result.report.left_float == ()
    assert result.report.verification.outputs[0].metrics.cosine_mean >= 0.999


def test_dynamic_mode_without_data_verifies_on_synthetic_inputs(samples_dir):
    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx")
    report = result.report
    assert report.mode == "dynamic" and result.output is None
    assert report.verification.data == "synthetic inputs"
    assert any("synthetic" in n for n in report.notes)
    assert report.verification.kernels.get("DynamicQuantizeMatMul", 0) >= 1
    assert report.verification.outputs[0].metrics.cosine_mean >= 0.995  # measured 0.9996


def test_in_memory_proto_is_not_modified(samples_dir):
    proto = onnx.load(samples_dir / "mlp.onnx")
    before = proto.SerializeToString()
    data = dict(np.load(samples_dir / "mlp_calib.npz"))
    result = onnxq.quantize(proto, data, verify_data={"x": data["x"][:20]})
    assert proto.SerializeToString() == before
    assert result.report.input == "(in-memory model)"
    assert result.report.verification.samples == 20
    assert result.report.calibration_samples == 256  # separate verification data: nothing held back
    assert any(n.op_type == "QuantizeLinear" for n in result.model.graph)


def test_nothing_to_quantize_is_a_clear_error(samples_dir):
    with pytest.raises(onnxq.OnnxqError, match="nothing to quantize: all 3 candidate node"):
        onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz",
                       config=onnxq.QuantConfig(exclude_op_types=("Gemm",)))


def test_tolerance_gates_the_result(samples_dir):
    strict = onnxq.QuantConfig(verify=onnxq.VerifyConfig(tolerance=onnxq.Tolerance(min_sqnr_db=60.0)))
    result = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz", config=strict)
    assert result.report.passed is False
    assert "SQNR" in result.report.verification.outputs[0].failures[0]


def test_generator_batches_of_different_sequence_lengths(samples_dir):
    rng = np.random.default_rng(0)
    lengths = [8, 16, 5, 32, 12, 16, 7, 9, 20, 11]

    def batches():
        for seq in lengths:
            yield {"input_ids": rng.integers(0, 2048, (4, seq))}

    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx", batches())
    report = result.report
    assert report.calibration_samples + report.verification.samples == 4 * len(lengths)
    assert report.verification.samples == 4  # every 10th of 40 samples
    assert report.verification.outputs[0].metrics.cosine_mean >= 0.999
