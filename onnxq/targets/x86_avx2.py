"""x86 without VNNI (AVX2, and AVX-512 without VNNI).

ORT's CPU integer GEMM (MLAS) multiplies uint8 activations by int8 weights (U8S8). Without VNNI the kernel multiplies
byte pairs with vpmaddubsw, which adds the two products of K indices 2i and 2i+1 in int16 *with saturation*, before
widening to int32. U8U8 and S8S8 reach int32 exactly. Measured on ORT 1.31 (tests/verify/test_emulate.py,
tests/numerics/test_pairs.py): only U8S8 saturates here, for M = 1 (GEMV) and M > 1 alike. Off such a CPU the
saturation is emulated (verify.kernels.emulate). Every x86 CPU without a VNNI flag is detected as this target.
"""

from onnxq.targets.cpu import VNNI_FLAGS
from onnxq.targets.registry import Target, register_target

X86_AVX2 = register_target(Target(
    "x86-avx2", "x86 without VNNI: U8S8 adds byte pairs in int16 with saturation", saturates_u8s8=True,
    saturation="AVX2's U8S8 kernel adds byte pairs in int16 with saturation", checked_by="emulated",
    detects=lambda flags, machine: machine not in ("aarch64", "arm64") and not flags & VNNI_FLAGS, family="x86"))
