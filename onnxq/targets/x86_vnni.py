"""x86 with VNNI (AVX-512 VNNI, AVX-VNNI, AMX): vpdpbusd adds every U8S8 product exactly in int32."""

from onnxq.targets.cpu import VNNI_FLAGS
from onnxq.targets.registry import Target, register_target

X86_VNNI = register_target(Target(
    "x86-vnni", "x86 with VNNI: U8S8 full range, every product added in int32",
    detects=lambda flags, machine: machine not in ("aarch64", "arm64") and bool(flags & VNNI_FLAGS), family="x86"))
