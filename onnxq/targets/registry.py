"""Targets by name: what a CPU's integer kernels do, which is what a model quantized for it must respect.

A target is data. `saturates_u8s8` is the one kernel behaviour that constrains a plan today (AVX2's int16 pair
sums: weights get a K-pair limit, numerics.pairs); `checked_by` says how a verification covers the target when it
does not run on this machine ("exact": the exact quantization, ORT_DISABLE_ALL, is what its kernels compute;
"emulated": the exact quantization plus the kernel's saturation in numpy). A target that covers others (portable)
holds where every one of them holds. A new target is one module with one `register_target` call.
"""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Callable

from onnxq.targets.cpu import cpu_flags

__all__ = ["Target", "TARGETS", "CHECKS", "register_target", "unregister_target", "target_names", "covered_targets",
           "detect_target", "resolve_target", "target_providers", "int8_activations_refusal", "target_compute"]

# How a target off this machine is checked (verify.kernels.coverage reads these). "provider": a GPU target, run on its
# execution provider where present, else by its exact arithmetic on this CPU (targets.cuda).
CHECKS = ("exact", "emulated", "provider")


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    description: str
    # Names of the concrete targets this one stands for; () for a concrete target (one kind of CPU).
    covers: tuple[str, ...] = ()
    saturates_u8s8: bool = False
    # What saturates, for the report's line on a limited plan (a saturating target must say).
    saturation: str = ""
    checked_by: str = "exact"
    # Whether a CPU with these ISA flags and this machine name is this target (concrete targets only; at most one
    # says yes).
    detects: Callable[[frozenset[str], str], bool] | None = None
    # The ONNX Runtime execution provider the model is deployed on: the CPU's, or a GPU's (targets.cuda).
    provider: str = "CPUExecutionProvider"
    # Why int8 activations are not planned for this target (measured), or "" when they are: a target that covers
    # such a target plans weight-only blocks in mode auto and refuses static / dynamic modes with this reason.
    no_int8_activations: str = ""
    # The float arithmetic its models compute in by default (QuantConfig.compute "auto"): float16 where the
    # provider runs it faster (passes.float16.compute), float32 on CPUs.
    compute: str = "float32"

    def __post_init__(self) -> None:
        if self.checked_by not in CHECKS:
            raise ValueError(f"target {self.name}: checked_by must be one of {CHECKS}")
        if self.saturates_u8s8 and not self.saturation:
            raise ValueError(f"target {self.name}: a saturating target says what saturates (saturation)")


TARGETS: dict[str, Target] = {}


def register_target(target: Target) -> Target:
    if target.name in TARGETS or target.name == "auto":
        raise ValueError(f"a target named {target.name!r} is already registered")
    unknown = [c for c in target.covers if c not in TARGETS]
    if unknown:
        raise ValueError(f"target {target.name} covers unregistered targets {unknown}")
    TARGETS[target.name] = target
    return target


def unregister_target(name: str) -> None:
    """For tests that register a target of their own."""
    TARGETS.pop(name)


def target_names() -> tuple[str, ...]:
    """Every name a config may give: auto (this machine's), then the targets that cover others, then the rest."""
    return ("auto", *sorted(TARGETS, key=lambda name: (not TARGETS[name].covers, name)))


def detect_target(flags: frozenset[str], machine: str | None = None) -> str:
    """The concrete target of a CPU."""
    machine = (machine or platform.machine()).lower()
    found = [t.name for t in TARGETS.values() if t.detects is not None and t.detects(flags, machine)]
    if len(found) != 1:
        raise ValueError(f"targets {found} detect machine {machine!r} with flags {sorted(flags)}: exactly one must")
    return found[0]


def resolve_target(target: str, flags: frozenset[str] | None = None, machine: str | None = None) -> str:
    """auto → this machine's concrete target; every other name stands as it is."""
    if target != "auto":
        return target
    return detect_target(cpu_flags() if flags is None else flags, machine)


def covered_targets(target: str) -> tuple[str, ...]:
    """The concrete targets a model for `target` must hold on."""
    concrete = resolve_target(target)
    return TARGETS[concrete].covers or (concrete,)


def target_providers(target: str) -> tuple[str, ...]:
    """The execution providers a model for `target` is deployed on, CPU first when it is one of them."""
    found = {TARGETS[t].provider for t in covered_targets(target)}
    return tuple(sorted(found, key=lambda p: (p != "CPUExecutionProvider", p)))


def int8_activations_refusal(target: str) -> str:
    """Why a model for `target` gets no int8 activations ("" when every covered target runs them well)."""
    return "; ".join(TARGETS[t].no_int8_activations for t in covered_targets(target) if TARGETS[t].no_int8_activations)


def target_compute(target: str) -> str:
    """float16 only when every covered target prefers it (one file for a CPU and a GPU stays float32)."""
    return "float16" if all(TARGETS[t].compute == "float16" for t in covered_targets(target)) else "float32"
