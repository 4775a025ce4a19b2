"""This machine's CPU, read from /proc/cpuinfo: the only place onnxq reads it."""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["ISA_FLAGS", "VNNI_FLAGS", "cpu_flags", "cpu_model"]

# The flags that decide which MLAS integer kernel runs (Linux /proc/cpuinfo names).
ISA_FLAGS = ("avx2", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def _cpuinfo() -> str | None:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: nothing known
        return None


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The ISA flags of ISA_FLAGS this CPU has, from /proc/cpuinfo (x86 'flags', ARM 'Features')."""
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    found: set[str] = set()
    for line in (cpuinfo or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            found.update(value.split())
    return frozenset(found & set(ISA_FLAGS))


def cpu_model(cpuinfo: str | None = None) -> str:
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    if cpuinfo is None:
        return platform.processor() or platform.machine()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "CPU part"):
            return value.strip()
    return platform.machine()
