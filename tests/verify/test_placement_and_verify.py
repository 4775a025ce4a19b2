"""Placement from ORT's profiler, provider handling, and the verify command's exit codes."""

import importlib
import json

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model, weight

import onnxq
from onnxq.cli.main import main
from onnxq.data.specs import input_specs
from onnxq.data.batching import samples_in
from onnxq.data.dataset import reread_batches
from onnxq.io import load_model
from onnxq.verify import profile_placement, quantized_nodes, resolve_providers
from onnxq.verify.reference import Reference

reference = importlib.import_module("onnxq.verify.reference")  # the module (onnxq.verify is also a function)


@pytest.fixture(scope="module")
def quantized_transformer(samples_dir, tmp_path_factory):
    """The sample transformer with one projection left float (by name)."""
    out = tmp_path_factory.mktemp("q") / "q.onnx"
    config = onnxq.QuantConfig(exclude_nodes=("/attention.output/MatMul",))
    onnxq.quantize(samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz",
                   output=out, config=config)
    return out


def test_cpu_placement_shows_integer_kernels_and_the_float_node(quantized_transformer, samples_dir):
    batch = {"input_ids": np.load(samples_dir / "tiny_transformer_calib.npz")["input_ids"][:4]}
    nodes = quantized_nodes(quantized_transformer)
    assert len(nodes) == 5 and "/attention.output/MatMul" not in nodes
    placement = profile_placement(quantized_transformer, "CPUExecutionProvider", batch, nodes)
    assert {n: r.op_type for n, r in placement.quantized.items()} == dict.fromkeys(nodes, "MatMulIntegerToFloat")
    assert sorted(placement.integer) == sorted(nodes) and placement.float_fallbacks == []
    float_run = next(r for r in placement.runs if r.name == "/attention.output/MatMul")
    assert float_run.op_type == "MatMul" and float_run.provider == "CPUExecutionProvider"
    assert placement.by_provider == {"CPUExecutionProvider": len(placement.runs)}
    assert placement.findings() == []


def test_unfused_qdq_is_flagged_as_running_in_float(rng, tmp_path):
    """Q/DQ on the activation of a MatMul whose weight is float: ORT has no integer kernel for that pair.

    (A weight-only int8 DequantizeLinear → MatMul, by contrast, ORT 1.31's CPU fuses into MatMulNBits.)"""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 16])
    scale = tape.initializer(ir.tensor(np.array(0.05, np.float32), name="x_scale"))
    zero = tape.initializer(ir.tensor(np.array(128, np.uint8), name="x_zero"))
    x_q = tape.op("QuantizeLinear", [x, scale, zero], name="x_q")
    x_dq = tape.op("DequantizeLinear", [x_q, scale, zero], name="x_dq")
    y = tape.op("MatMul", [x_dq, weight(tape, rng, "w", (16, 8))], name="mm")
    ir.save(to_model(tape, [x], [y]), tmp_path / "a.onnx")
    nodes = quantized_nodes(tmp_path / "a.onnx")
    assert nodes == {"mm": "MatMul"}
    placement = profile_placement(tmp_path / "a.onnx", "CPUExecutionProvider",
                                  {"x": np.ones((2, 16), np.float32)}, nodes)
    assert placement.float_fallbacks == ["mm"] and placement.integer == []
    assert placement.findings() == ["1 quantized node(s) ran on CPU as DequantizeLinear + float MatMul"]


def test_an_integer_kernel_for_a_node_left_float_is_flagged(rng, tmp_path):
    """A float Conv between a per-tensor DequantizeLinear and a QuantizeLinear: ORT's WeightBiasQuantization
    quantizes its weight itself and runs it as QLinearConv (what passes.forms.qdq keeps from happening)."""
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 4, 8, 8])
    scale = tape.initializer(ir.tensor(np.array(0.05, np.float32), name="x_scale"))
    zero = tape.initializer(ir.tensor(np.array(128, np.uint8), name="x_zero"))
    x_dq = tape.op("DequantizeLinear", [tape.op("QuantizeLinear", [x, scale, zero], name="x_q"), scale, zero],
                   name="x_dq")
    conv = tape.op("Conv", [x_dq, weight(tape, rng, "w", (4, 4, 3, 3))], attributes={"pads": [1, 1, 1, 1]},
                   name="conv")
    y = tape.op("DequantizeLinear", [tape.op("QuantizeLinear", [conv, scale, zero], name="y_q"), scale, zero],
                name="y_dq")
    ir.save(to_model(tape, [x], [y]), tmp_path / "a.onnx")
    placement = profile_placement(tmp_path / "a.onnx", "CPUExecutionProvider",
                                  {"x": np.ones((2, 4, 8, 8), np.float32)}, {})  # onnxq quantized nothing
    assert [r.op_type for r in placement.unplanned_integer] == ["QLinearConv"]
    assert placement.findings()[0].startswith("1 integer kernel(s) ran for node(s) onnxq left float (e.g. conv")


def test_absent_provider_is_a_message_not_a_crash():
    import onnxruntime as ort

    run, missing = resolve_providers(("cpu", "cuda", "auto"))
    assert run[0] == "CPUExecutionProvider"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert run == ["CPUExecutionProvider"]
        assert missing == ["CUDAExecutionProvider is not available in this onnxruntime (install onnxruntime-gpu "
                           "and a CUDA runtime); skipped"]


def test_verify_api_per_output_tolerance(quantized_transformer, samples_dir):
    data = samples_dir / "tiny_transformer_calib.npz"
    model = samples_dir / "tiny_transformer.onnx"
    ok = onnxq.verify(model, quantized_transformer, data)
    assert ok.passed and ok.samples == 128 and ok.cpu.placement is not None
    strict = onnxq.VerifyConfig(output_tolerances={"last_hidden_state": onnxq.Tolerance(min_sqnr_db=60.0)})
    failed = onnxq.verify(model, quantized_transformer, data, config=strict)
    assert not failed.passed and "SQNR" in failed.outputs[0].failures[0]


def test_verify_command_exit_codes(quantized_transformer, samples_dir, tmp_path, capsys):
    model, data = str(samples_dir / "tiny_transformer.onnx"), str(samples_dir / "tiny_transformer_calib.npz")
    quant = str(quantized_transformer)
    assert main(["verify", model, quant, "--data", data, "--report", str(tmp_path / "v.json")]) == 0
    out = capsys.readouterr().out
    assert "5/5 quantized nodes on integer kernels" in out and "result: within tolerance" in out
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["verification"]["providers"]["CPUExecutionProvider"]["passed"] is True
    assert main(["verify", model, quant, "--data", data, "--tolerance", "last_hidden_state:sqnr=60"]) == 1
    assert "OUT OF TOLERANCE" in capsys.readouterr().out
    # Bad input: one line, exit 2.
    assert main(["verify", model, str(samples_dir / "mlp.onnx"), "--data", data]) == 2
    assert "different inputs" in capsys.readouterr().err
    assert main(["verify", model, quant, "--data", str(samples_dir / "mlp_calib.npz")]) == 2
    assert "matches no model input" in capsys.readouterr().err
    assert main(["verify", model, quant, "--data", data, "--tolerance", "cosine>0.9"]) == 2
    assert "expected [OUTPUT:]METRIC=VALUE" in capsys.readouterr().err


@pytest.mark.cuda
def test_cuda_verification_and_agreement(quantized_transformer, samples_dir):
    v = onnxq.verify(samples_dir / "tiny_transformer.onnx", quantized_transformer,
                     samples_dir / "tiny_transformer_calib.npz", providers=("cpu", "cuda"))
    assert [p.provider for p in v.providers] == ["CPUExecutionProvider", "CUDAExecutionProvider"]
    # Each provider within tolerance of float passes; the agreement is held to what two such providers meet.
    assert v.passed and all(o.passed for o in v.agreement["CUDAExecutionProvider"])
    assert v.agreement_bounds["last_hidden_state"].min_cosine == pytest.approx(0.92)
    # The float model's own CUDA arithmetic is reported beside it (TF32, fused kernels: small).
    assert all(o.metrics.cosine_mean >= 0.999 for o in v.providers[1].float_drift)
    cuda = v.providers[1].placement
    # ORT has no CUDA QDQ MatMul fusion: the int8 MatMuls run as DequantizeLinear + float MatMul, and say so.
    assert sorted(cuda.float_fallbacks) == sorted(quantized_nodes(quantized_transformer))
    assert any("MatMulNBits" in f for f in cuda.findings()) and cuda.mismatches == ()


def test_verification_batches_are_cut_to_the_output_budget(samples_dir, quantized_transformer, monkeypatch):
    """A language model's batch of logits is held in several float64 copies at once (SmolLM2: 8.0 GB peak with 8
    windows a batch, 4.1 GB cut to 2): batches whose float outputs pass the budget are cut, and the figures are the
    same as uncut (sums in another order: equal to 1e-9)."""
    data = samples_dir / "tiny_transformer_calib.npz"
    whole = onnxq.verify(samples_dir / "tiny_transformer.onnx", quantized_transformer, data)
    monkeypatch.setattr(reference, "OUTPUT_BUDGET", 1)  # every batch cut to one sample
    cut = onnxq.verify(samples_dir / "tiny_transformer.onnx", quantized_transformer, data)
    assert cut.samples == whole.samples
    for a, b in zip(whole.outputs, cut.outputs):
        assert b.metrics.cosine_mean == pytest.approx(a.metrics.cosine_mean, abs=1e-9)
        assert b.metrics.sqnr_db == pytest.approx(a.metrics.sqnr_db, abs=1e-6)
        assert b.metrics.samples == a.metrics.samples
    batches = Reference(samples_dir / "tiny_transformer.onnx", reread_batches(data, input_specs(load_model(
        samples_dir / "tiny_transformer.onnx")), 8)).batches
    assert {samples_in(b) for b in batches} == {1}
