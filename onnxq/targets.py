"""Which CPU a model is quantized for, and what that means for its integer types.

ORT's CPU integer GEMM (MLAS) multiplies uint8 activations by int8 weights (U8S8). On x86 without VNNI (AVX2,
and AVX-512 without VNNI) the kernel multiplies byte pairs with vpmaddubsw, which adds the two products of
K indices 2i and 2i+1 in int16 *with saturation*, before widening to int32. With VNNI (vpdpbusd), on ARM
(sdot/udot or widening multiplies) and in U8U8 / S8S8, every product reaches int32 exactly. Measured on ORT 1.31
(tests/verify/test_emulate.py, tests/numerics/test_pairs.py): only U8S8 on a non-VNNI x86 saturates, for M = 1
(GEMV) and M > 1 alike.

Pure functions of the CPU flags: handlers and passes ask here; nothing else reads /proc/cpuinfo.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Literal

__all__ = ["Target", "TARGETS", "ISA_FLAGS", "cpu_flags", "cpu_model", "detect_target", "resolve_target",
           "saturating_targets", "needs_pair_limit", "integer_types_reason"]

Target = Literal["auto", "portable", "x86-vnni", "x86-avx2", "arm64"]
TARGETS: tuple[str, ...] = ("auto", "portable", "x86-vnni", "x86-avx2", "arm64")

# The flags that decide which MLAS integer kernel runs (Linux /proc/cpuinfo names).
ISA_FLAGS = ("avx2", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")
_VNNI = ("avx512_vnni", "avx_vnni", "amx_int8")


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The ISA flags of ISA_FLAGS this CPU has, from /proc/cpuinfo (x86 'flags', ARM 'Features')."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:  # not Linux: nothing known
            return frozenset()
    found: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            found.update(value.split())
    return frozenset(found & set(ISA_FLAGS))


def cpu_model(cpuinfo: str | None = None) -> str:
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor() or platform.machine()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "CPU part"):
            return value.strip()
    return platform.machine()


def detect_target(flags: frozenset[str], machine: str | None = None) -> str:
    """The concrete target of a CPU: x86-vnni, x86-avx2 or arm64."""
    machine = (machine or platform.machine()).lower()
    if machine in ("aarch64", "arm64"):
        return "arm64"
    return "x86-vnni" if flags & set(_VNNI) else "x86-avx2"


def resolve_target(target: str, flags: frozenset[str] | None = None, machine: str | None = None) -> str:
    """auto → this machine's concrete target; every other name stands as it is."""
    if target != "auto":
        return target
    return detect_target(cpu_flags() if flags is None else flags, machine)


def saturating_targets(target: str) -> bool:
    """Whether a CPU the target covers runs U8S8 with int16 pair saturation (x86 without VNNI)."""
    return target in ("portable", "x86-avx2")


def needs_pair_limit(target: str, activation_dtype: str, weight_dtype: str = "int8") -> bool:
    """Whether int8 weights must keep their K pairs within numerics.pairs.PAIR_LIMIT: uint8 activations × int8
    weights (U8S8) on a target that includes a non-VNNI x86 CPU. U8U8 and S8S8 never saturate (measured)."""
    return saturating_targets(resolve_target(target)) and activation_dtype == "uint8" and weight_dtype == "int8"


def integer_types_reason(target: str, activation_dtype: str, weight_dtype: str = "int8") -> str:
    """One line for the report: the integer types a node gets on this target, and why."""
    concrete = resolve_target(target)
    types = f"{'U' if activation_dtype == 'uint8' else 'S'}8{'S' if weight_dtype == 'int8' else 'U'}8"
    if needs_pair_limit(target, activation_dtype, weight_dtype):
        return (f"{types}, K pairs limited to ±128 (target {concrete}: AVX2's U8S8 kernel adds byte pairs in int16 "
                "with saturation; full speed, no saturation)")
    if types == "U8S8":
        return f"{types} full range (target {concrete}: the kernel adds every product in int32)"
    return f"{types} (no int16 step in ORT's kernel for these types)"
