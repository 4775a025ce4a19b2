"""One file for every CPU ORT runs on and for NVIDIA GPUs: what both run well, and nothing either runs badly.

MatMulNBits has CPU and CUDA kernels, so weight-only blocks serve both; int8 activations do not (CUDA runs them as
float or on the CPU: targets.cuda), and float16 compute does not (ORT's x86 CPU kernels cast it to float32 and
back: MiniLM 0.87x float on an AMD EPYC with AVX-512), so the fleet's file is weight-only with float32 compute and,
for AVX2's U8S8 kernels, nothing to saturate (no integer activations)."""

from onnxq.targets import cuda, portable  # noqa: F401  (registered before this covers them)
from onnxq.targets.registry import Target, register_target

FLEET = register_target(Target(
    "cpu+cuda", "every CPU ORT runs on and NVIDIA GPUs: one weight-only file, float32 compute",
    covers=("x86-vnni", "x86-avx2", "arm64", "cuda")))
