"""Where a model is deployed (a registry: one module per target): which CPUs, on which execution provider, and
what that means for its forms — integer types, int8 activations or not, float16 or float32 compute. Pure functions
of the CPU flags and the registry: planners and passes ask here; nothing else reads /proc/cpuinfo. ort_kernels.py
holds ORT's kernel registrations per provider, which verification predicts placement from."""

from onnxq.targets import fleet, openvino_cpu, portable  # noqa: F401  (the CPU targets, cuda, cpu+cuda, openvino-cpu)
from onnxq.targets.cpu import ISA_FLAGS, cpu_flags, cpu_model
from onnxq.targets.kernels import integer_types_reason, needs_pair_limit, saturating_targets
from onnxq.targets.registry import (
    DEFAULT_TARGET,
    TARGETS,
    Target,
    activation_defaults,
    cpu_target,
    covered_targets,
    detect_target,
    int8_activations_refusal,
    register_target,
    resolve_target,
    target_compute,
    target_providers,
    target_refusals,
    target_names,
    unregister_target,
)

__all__ = ["Target", "TARGETS", "DEFAULT_TARGET", "ISA_FLAGS", "cpu_flags", "cpu_model", "detect_target", "resolve_target",
           "covered_targets", "target_providers", "register_target", "unregister_target", "target_names",
           "saturating_targets", "needs_pair_limit", "integer_types_reason", "int8_activations_refusal",
           "target_compute", "cpu_target", "activation_defaults", "target_refusals"]
