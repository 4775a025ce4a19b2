"""Every CPU ORT runs on: a model for it must hold on each of the concrete CPU targets."""

from onnxq.targets import arm64, x86_avx2, x86_vnni  # noqa: F401  (registered before this covers them)
from onnxq.targets.registry import DEFAULT_TARGET, Target, register_target

PORTABLE = register_target(Target(
    DEFAULT_TARGET, "every CPU ORT runs on (x86 with and without VNNI, ARM64)", covers=("x86-vnni", "x86-avx2", "arm64")))
