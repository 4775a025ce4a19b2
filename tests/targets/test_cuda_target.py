"""Target cuda: only forms CUDA EP runs fast or small — weight-only MatMulNBits blocks with float16
compute — and why in the report; int8 activations refused with the measured reason; cpu+cuda, one file good on
both. On a machine without CUDA the file is checked on this CPU and its CUDA placement predicted; on one with CUDA
it runs there (the cuda-marked test)."""

import json
import re

import jsonschema
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxq
from onnxq.cli.main import main
from onnxq.errors import ConfigError
from onnxq.search import speed
from onnxq.targets import target_providers

CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"
HAS_CUDA = CUDA in ort.get_available_providers()
NO_SENSITIVITY = onnxq.VerifyConfig(sensitivity_samples=0)


def test_the_target_says_what_it_plans():
    config = onnxq.QuantConfig(target="cuda")
    assert config.weight_only and config.compute_dtype == "float16" and target_providers("cuda") == (CUDA,)
    fleet = onnxq.QuantConfig(target="cpu+cuda")
    assert fleet.weight_only and fleet.compute_dtype == "float32"
    assert target_providers("cpu+cuda") == (CPU, CUDA) and target_providers("portable") == (CPU,)
    assert onnxq.QuantConfig(target="cuda", compute="float32").compute_dtype == "float32"
    assert not onnxq.QuantConfig().weight_only and onnxq.QuantConfig().compute_dtype == "float32"


@pytest.mark.parametrize("changes, asks", [({"mode": "static"}, "mode static"), ({"mode": "dynamic"}, "mode dynamic"),
                                           ({"activation_granularity": "per-token"}, "per-token activations"),
                                           ({"smooth": "auto"}, "smoothing")])
def test_int8_activations_are_refused_for_cuda_with_the_measured_reason(changes, asks):
    for target in ("cuda", "cpu+cuda"):
        with pytest.raises(ConfigError, match=re.escape(f"target {target} with {asks}: int8 activations run on CUDA "
                                                        "EP as DequantizeLinear + float MatMul (0.76x float")):
            onnxq.QuantConfig(target=target, **changes)
    with pytest.raises(ConfigError, match="compute float16 pairs with weight-only blocks"):
        onnxq.QuantConfig(compute="float16")


def test_cli_refuses_int8_activations_for_cuda_with_one_line(samples_dir, tmp_path, capsys):
    code = main([str(samples_dir / "mlp.onnx"), "--calib", str(samples_dir / "mlp_calib.npz"), "--target", "cuda",
                 "--mode", "static", "-o", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "target cuda with mode static" in err[0]
    assert not (tmp_path / "q.onnx").exists()


def test_a_cuda_model_is_weight_only_float16_and_checked(samples_dir, tmp_path):
    """The sample transformer for CUDA: 8-bit MatMulNBits / GatherBlockQuantized blocks, float16 arithmetic, the
    inputs and outputs as the float model's; within tolerance; its CUDA placement predicted (or profiled), and
    the report says why each choice."""
    out = tmp_path / "cuda.onnx"
    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx", output=out,
                            verify_data=samples_dir / "tiny_transformer_calib.npz",
                            config=onnxq.QuantConfig(target="cuda", verify=NO_SENSITIVITY))
    report = result.report
    assert report.mode == "weight-only" and report.passed
    written = onnx.load(out)
    ops = {n.op_type for n in written.graph.node}
    assert {"MatMulNBits", "GatherBlockQuantized"} <= ops and not ops & {"QuantizeLinear", "MatMulInteger"}
    assert all(a.i == 8 for n in written.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
               if a.name == "bits")
    float_model = onnx.load(samples_dir / "tiny_transformer.onnx")
    assert [o.name for o in written.graph.output] == [o.name for o in float_model.graph.output]
    assert [o.name for o in written.graph.input] == [i.name for i in float_model.graph.input]
    assert all(o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for o in written.graph.output)
    assert sum(i.data_type == onnx.TensorProto.FLOAT16 for i in written.graph.initializer) >= 6
    precision = report.section("precision").to_dict()
    assert precision["compute"] == "float16" and precision["float16_nodes"] > 20
    (last_hidden,) = report.verification.outputs
    assert last_hidden.metrics.cosine_mean >= 0.999  # measured 1.0000: 8-bit blocks, float16
    v = report.verification
    placement = (v.providers[1].placement if HAS_CUDA else v.predicted[0])
    assert placement.provider == CUDA and len(placement.integer) == 6 and placement.elsewhere == []
    (cuda_check,) = v.coverage.targets
    assert cuda_check.target == "cuda" and cuda_check.passed
    assert cuda_check.how.startswith("ran on CUDA" if HAS_CUDA else "exact arithmetic on this CPU")


def test_the_fleet_file_holds_on_every_cpu_and_cuda(samples_dir):
    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx",
                            verify_data=samples_dir / "tiny_transformer_calib.npz",
                            config=onnxq.QuantConfig(target="cpu+cuda", verify=NO_SENSITIVITY))
    report = result.report
    assert report.passed and report.section("precision") is None  # float32 compute: the CPUs' arithmetic
    assert [t.target for t in report.verification.coverage.targets] == ["x86-vnni", "x86-avx2", "arm64", "cuda"]
    assert {n.op_type for n in result.model.graph} >= {"MatMulNBits"}


def test_check_speed_keeps_float32_where_float16_is_slower(samples_dir, monkeypatch):
    """Given timings (our timer replaced, ORT untouched): float16 slower twice on the deciding provider → the model
    is rebuilt in float32, verified, and the report says so. Decided on the CPU here: 4-bit weights for the CPU
    with compute float16 (on this machine's ORT, float16 arithmetic is cast to float32 and back)."""
    def timed(quantized, floating, batch, provider, rounds):
        halves = any(v.dtype is not None and v.dtype.name == "FLOAT16" for n in quantized.graph for v in n.outputs)
        return (2.0, 1.0) if halves else (1.0, 1.0)

    monkeypatch.setattr(speed, "_timed", timed)
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4"), compute="float16",
                               verify=onnxq.VerifyConfig(check_speed=True, sensitivity_samples=0))
    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx", config=config)
    timing = result.report.section("speed_by_compute")
    assert timing.kept_float32 and timing.float16_ms == 2.0 and result.report.section("precision") is None
    assert not any(v.dtype is not None and v.dtype.name == "FLOAT16" for n in result.model.graph for v in n.outputs)
    assert any("float32 compute kept: float16 ran slower on this CPU" in n for n in result.report.notes)


def test_the_report_of_a_cuda_run_follows_the_schema(samples_dir, tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main([str(samples_dir / "tiny_transformer.onnx"), "--target", "cuda", "--no-sensitivity", "-o",
                 str(tmp_path / "q.onnx"), "--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "compute:     float16 in" in out and "target cuda" in out
    if not HAS_CUDA:
        # The summary's count; the kernels themselves in the report (and with -v).
        assert "kernels:     6/6 quantized nodes on integer kernels of CUDA (predicted: no such provider here)" in out
        predicted = json.loads(path.read_text())["verification"]["predicted"]["CUDAExecutionProvider"]
        assert predicted["kernels"]["MatMulNBits"] == 6
        assert "target cuda is not meant for CPU" in out or "speed on CPU" in out
    schema = json.loads((samples_dir.parent / "onnxq" / "report_schema.json").read_text())
    jsonschema.validate(json.loads(path.read_text()), schema)


@pytest.mark.cuda
def test_a_cuda_model_runs_on_cuda_as_planned(samples_dir):
    """On a GPU machine: every MatMulNBits on CUDA, nothing falls back, the table's prediction holds."""
    result = onnxq.quantize(samples_dir / "tiny_transformer.onnx",
                            verify_data=samples_dir / "tiny_transformer_calib.npz",
                            config=onnxq.QuantConfig(target="cuda", verify=NO_SENSITIVITY))
    cuda = result.report.verification.providers[1]
    assert cuda.provider == CUDA and cuda.passed and cuda.placement.mismatches == ()
    assert len(cuda.placement.integer) == 6 and cuda.placement.elsewhere == []
    assert np.isfinite(cuda.outputs[0].metrics.cosine_mean)
