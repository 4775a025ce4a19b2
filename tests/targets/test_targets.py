"""Target choice as a pure function of the CPU flags (faked flag sets), and its effect on the plan."""

import pytest

from onnxq import QuantConfig
from onnxq.errors import ConfigError
from onnxq.targets import cpu_flags, cpu_model, detect_target, integer_types_reason, needs_pair_limit, resolve_target

ZEN3 = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n"
ICELAKE = "model name\t: Intel(R) Xeon(R) Platinum 8375C\nflags\t\t: avx2 avx512f avx512bw avx512_vnni\n"
ALDERLAKE = "model name\t: 12th Gen Intel(R) Core(TM) i7\nflags\t\t: avx2 avx_vnni\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd asimddp i8mm sve\nCPU part\t: 0xd40\n"


@pytest.mark.parametrize("cpuinfo, machine, flags, target", [
    (ZEN3, "x86_64", {"avx2"}, "x86-avx2"),
    (ICELAKE, "x86_64", {"avx2", "avx512bw", "avx512_vnni"}, "x86-vnni"),
    (ALDERLAKE, "x86_64", {"avx2", "avx_vnni"}, "x86-vnni"),
    (GRAVITON3, "aarch64", {"asimddp", "i8mm"}, "arm64"),
])
def test_flags_and_target_from_cpuinfo(cpuinfo, machine, flags, target):
    assert cpu_flags(cpuinfo) == flags
    assert detect_target(cpu_flags(cpuinfo), machine) == target
    assert resolve_target("auto", cpu_flags(cpuinfo), machine) == target
    assert resolve_target("portable", cpu_flags(cpuinfo), machine) == "portable"


def test_cpu_model_names_the_cpu():
    assert cpu_model(ICELAKE) == "Intel(R) Xeon(R) Platinum 8375C"
    assert cpu_model(GRAVITON3) == "0xd40"


@pytest.mark.parametrize("target, activations, limited", [
    ("portable", "uint8", True), ("x86-avx2", "uint8", True), ("x86-vnni", "uint8", False),
    ("arm64", "uint8", False), ("portable", "int8", False),  # S8S8 never saturates (measured)
])
def test_pair_limit_only_where_u8s8_can_saturate(target, activations, limited):
    assert needs_pair_limit(target, activations) is limited
    reason = integer_types_reason(target, activations)
    assert ("limited" in reason) is limited and reason.startswith("U8S8" if activations == "uint8" else "S8S8")


def test_default_target_is_portable_and_unknown_targets_are_refused():
    assert QuantConfig().target == "portable"
    with pytest.raises(ConfigError, match="unknown target 'avx9'"):
        QuantConfig(target="avx9")
    with pytest.raises(ConfigError, match="target"):
        QuantConfig.from_dict({"target": "avx9"})


@pytest.mark.parametrize("saturates, flags, machine, target", [
    (True, frozenset({"avx2"}), "x86_64", "x86-avx2"),
    (False, frozenset({"avx2"}), "x86_64", "x86-vnni"),  # a kernel that does not saturate: VNNI the flags hide
    (True, frozenset({"avx2", "avx512_vnni"}), "x86_64", "x86-avx2"),  # the kernel's answer decides
    (False, frozenset({"avx512_vnni"}), "x86_64", "x86-vnni"),
    (False, frozenset({"asimddp"}), "aarch64", "arm64"),
])
def test_this_machines_target_follows_its_kernel_within_its_cpu_family(saturates, flags, machine, target):
    from onnxq.targets import cpu_target

    assert cpu_target(saturates, flags, machine) == target
