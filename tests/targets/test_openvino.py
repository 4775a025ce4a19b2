"""OpenVINO as the third provider: --providers openvino verifies, places and times the quantized file on
OpenVINOExecutionProvider, and --target openvino-cpu implies it. The tests that run it need onnxruntime-openvino in
place of onnxruntime (docs/guides/openvino.md: /work/venv-ov/bin/python -m pytest -m openvino) and skip elsewhere;
the last test is the other side: without it, the target is checked by its exact quantization and the provider is
skipped with how to get it."""

from __future__ import annotations

import onnxruntime as ort
import pytest

import onnxq
from onnxq.targets import target_providers
from onnxq.verify import resolve_providers

OPENVINO = "OpenVINOExecutionProvider"
HERE = OPENVINO in ort.get_available_providers()
needs_openvino = pytest.mark.skipif(not HERE, reason="needs onnxruntime-openvino's OpenVINOExecutionProvider "
                                                     "(docs/guides/openvino.md); this onnxruntime lacks it")


def _quantize(samples_dir, tmp_path, **config):
    return onnxq.quantize(samples_dir / "tiny_transformer.onnx", samples_dir / "tiny_transformer_calib.npz",
                          output=tmp_path / "q.onnx", config=onnxq.QuantConfig(**config))


@pytest.mark.openvino
@needs_openvino
def test_providers_openvino_verifies_places_and_times_on_openvino(samples_dir, tmp_path):
    result = _quantize(samples_dir, tmp_path, verify=onnxq.VerifyConfig(providers=("openvino",)))
    verification = result.report.verification
    checks = {p.provider: p for p in verification.providers}
    assert set(checks) == {"CPUExecutionProvider", OPENVINO}
    on_openvino = checks[OPENVINO]
    # The same int8 arithmetic on both: within tolerance, and close to the CPU's own outputs.
    assert on_openvino.passed and min(o.metrics.cosine_mean for o in on_openvino.outputs) > 0.99
    placement = on_openvino.placement
    assert placement.source == "assigned" and placement.subgraphs >= 1
    # Every quantized MatMul went into OpenVINO's subgraphs with its DequantizeLinear: none left to the CPU.
    assert len(placement.integer) == len(placement.quantized) > 0 and not placement.float_fallbacks
    assert "compiled into OpenVINO with their DequantizeLinear" in result.summary()
    assert {c.provider for c in result.report.speed} == {"CPUExecutionProvider", OPENVINO}


@pytest.mark.openvino
@needs_openvino
def test_target_openvino_cpu_runs_on_openvino_and_checks_there(samples_dir, tmp_path):
    result = _quantize(samples_dir, tmp_path, target="openvino-cpu")
    assert resolve_providers(["auto"], "openvino-cpu")[0] == ["CPUExecutionProvider", OPENVINO]
    coverage = result.report.verification.coverage
    assert [(t.target, t.how) for t in coverage.targets] == [("openvino-cpu", "ran on OpenVINO (ORT's deployed "
                                                                             "kernels)")]
    assert coverage.passed or not coverage.failed


@pytest.mark.skipif(HERE, reason="the case without onnxruntime-openvino")
def test_without_openvino_the_target_is_checked_exactly_and_the_provider_skipped(samples_dir, tmp_path):
    assert target_providers("openvino-cpu") == (OPENVINO,)
    assert resolve_providers(["openvino"]) == (["CPUExecutionProvider"], [
        f"{OPENVINO} is not available in this onnxruntime (pip install onnxruntime-openvino in place of onnxruntime "
        "(docs/guides/openvino.md)); skipped"])
    result = _quantize(samples_dir, tmp_path, target="openvino-cpu")
    (target,) = result.report.verification.coverage.targets
    assert target.target == "openvino-cpu" and target.how.startswith("exact quantization on this CPU (OpenVINO "
                                                                     "absent here)")
    assert not result.report.verification.failed
    # Symmetric weights and onnxq's default uint8 asymmetric activations: OpenVINO's int8 forms.
    assert result.report.config["activations"] == {"dtype": "uint8", "symmetric": False}


@pytest.mark.skipif(HERE, reason="the case without onnxruntime-openvino")
def test_the_result_line_says_a_provider_asked_for_was_not_checked(samples_dir, tmp_path):
    """-q prints the result line alone: a run asked to verify on OpenVINO where it is absent must not read as a
    check there."""
    result = _quantize(samples_dir, tmp_path, verify=onnxq.VerifyConfig(providers=("openvino",)))
    assert result.report.verification.unavailable
    assert result.report.result == ("within tolerance; not checked on OpenVINOExecutionProvider (not in this "
                                    "onnxruntime)")
