"""ARM64: sdot/udot (or widening multiplies) add every product exactly in int32."""

from onnxq.targets.registry import Target, register_target

ARM64 = register_target(Target(
    "arm64", "ARM64: every product added in int32",
    detects=lambda flags, machine: machine in ("aarch64", "arm64"), family="arm64"))
