"""A new target is one registration (targets.register_target): the config and the CLI accept it, planning applies
its kernel constraint, verification checks it the way it says — nothing else changes."""

from __future__ import annotations

import pytest

import onnxq
from onnxq.cli.main import build_parser
from onnxq.targets import Target, register_target, target_names, unregister_target


@pytest.fixture
def avx512_without_vnni():
    """A target this test adds: Skylake-SP's AVX-512BW multiplies byte pairs with vpmaddubsw like AVX2 (int16
    saturation), so it needs the pair limit and is checked by emulation off such a CPU."""
    register_target(Target("x86-avx512bw-test", "AVX-512BW without VNNI", saturates_u8s8=True, checked_by="emulated",
                           saturation="vpmaddubsw adds byte pairs in int16 with saturation"))
    register_target(Target("x86-fleet-test", "every x86 in a fleet", covers=("x86-avx512bw-test", "x86-vnni")))
    yield
    unregister_target("x86-fleet-test")
    unregister_target("x86-avx512bw-test")


def _quantize(samples_dir, target: str):
    return onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz",
                          config=onnxq.QuantConfig(target=target))


def test_a_registered_target_constrains_the_plan_and_is_checked_as_it_says(samples_dir, avx512_without_vnni):
    assert {"x86-avx512bw-test", "x86-fleet-test"} <= set(target_names())
    assert build_parser().parse_args(["m.onnx", "--target", "x86-fleet-test"]).target == "x86-fleet-test"
    result = _quantize(samples_dir, "x86-fleet-test")
    coverage = result.report.verification.coverage
    # x86-vnni is run where this machine is one (its deployed kernels), checked exactly elsewhere: AVX2, ARM.
    vnni_how = ("ran on this CPU (ORT's deployed kernels)" if coverage.platform["cpu_target"] == "x86-vnni"
                else "exact quantization (ORT_DISABLE_ALL, less any emulated AVX2 saturation)")
    assert [(t.target, t.how.split(":")[0]) for t in coverage.targets] == [
        ("x86-avx512bw-test", "emulated"), ("x86-vnni", vnni_how)]
    assert not result.report.verification.failed and all(  # no bar measured below
        "K pairs limited to ±128 (target x86-fleet-test: vpmaddubsw adds byte pairs in int16" in e.detail
        for e in result.report.quantized if e.op_type == "Gemm")
    # Limited pairs: no integer product can saturate (AVX2 emulation over every product).
    assert coverage.saturation and not any(n.can_saturate for n in coverage.saturation)


def test_a_target_without_saturation_keeps_full_range(samples_dir):
    register_target(Target("arm64-sve-test", "ARM64 with SVE"))
    try:
        result = _quantize(samples_dir, "arm64-sve-test")
    finally:
        unregister_target("arm64-sve-test")
    assert [t.target for t in result.report.verification.coverage.targets] == ["arm64-sve-test"]
    assert all("full range" in e.detail for e in result.report.quantized if e.op_type == "Gemm")
    assert any(n.can_saturate for n in result.report.verification.coverage.saturation)  # as on a VNNI CPU


def test_a_saturating_target_must_say_what_saturates():
    with pytest.raises(ValueError, match="says what saturates"):
        Target("x86-mystery-test", "a CPU that saturates", saturates_u8s8=True, checked_by="emulated")
