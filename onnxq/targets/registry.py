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
from onnxq.targets.providers import CPU_PROVIDER

__all__ = ["Target", "TARGETS", "DEFAULT_TARGET", "CHECKS", "register_target", "unregister_target", "target_names", "covered_targets",
           "detect_target", "cpu_target", "resolve_target", "target_providers", "int8_activations_refusal", "target_compute", "activation_defaults", "target_refusals"]

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
    provider: str = CPU_PROVIDER
    # Why int8 activations are not planned for this target (measured), or "" when they are: a target that covers
    # such a target plans weight-only blocks in mode auto and refuses static / dynamic modes with this reason.
    no_int8_activations: str = ""
    # The float arithmetic its models compute in by default (QuantConfig.compute "auto"): float16 where the
    # provider runs it faster (passes.float16.compute), float32 on CPUs.
    compute: str = "float32"
    # The CPU family of a concrete CPU target ("x86", "arm64"): this machine's target is the one of its family
    # whose U8S8 saturation matches what the kernel itself does (cpu_target).
    family: str = ""
    # checked_by "provider": how the exact arithmetic on this CPU stands for the provider where it is absent.
    exact_check: str = ""
    # The activation types its kernels take, as (dtype, symmetric), the first the one a config gets by default;
    # () takes any. A config that asks for another is refused (QuantConfig), one that left the default gets the first.
    activation_types: tuple[tuple[str, bool], ...] = ()
    # Whether its kernels take symmetric weights only (zero point 0): a config with asymmetric weights is refused.
    symmetric_weights: bool = False

    def __post_init__(self) -> None:
        if self.checked_by not in CHECKS:
            raise ValueError(f"target {self.name}: checked_by must be one of {CHECKS}")
        if self.saturates_u8s8 and not self.saturation:
            raise ValueError(f"target {self.name}: a saturating target says what saturates (saturation)")
        if self.checked_by == "provider" and not self.exact_check:
            raise ValueError(f"target {self.name}: a target checked on its provider says how the exact arithmetic "
                             "stands for it where the provider is absent (exact_check)")

    def activations_refusal(self, dtype: str, symmetric: bool) -> str:
        """Why these activations do not suit this target's kernels ("" when they do)."""
        if not self.activation_types or (dtype, symmetric) in self.activation_types:
            return ""
        takes = ", ".join(f"{d} {'symmetric' if s else 'asymmetric'}" for d, s in self.activation_types)
        return f"target {self.name} takes activations {takes}"


TARGETS: dict[str, Target] = {}
# The target a config gets by default (targets.portable: every CPU ORT runs on).
DEFAULT_TARGET = "portable"


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


def cpu_target(saturates: bool, flags: frozenset[str], machine: str | None = None) -> str:
    """This machine's target as its kernels behave: the kernel's own answer (saturates or not) decides between the
    targets of its CPU family, the flags the family (a VNNI flag a hypervisor hides, a kernel that ignores one)."""
    flagged = TARGETS[detect_target(flags, machine)]
    if flagged.saturates_u8s8 == saturates or not flagged.family:
        return flagged.name
    twins = [t.name for t in TARGETS.values() if t.family == flagged.family and t.detects is not None
             and not t.covers and t.saturates_u8s8 == saturates]
    return twins[0] if twins else flagged.name


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
    return tuple(sorted(found, key=lambda p: (p != CPU_PROVIDER, p)))


def int8_activations_refusal(target: str) -> str:
    """Why a model for `target` gets no int8 activations ("" when every covered target runs them well)."""
    return "; ".join(TARGETS[t].no_int8_activations for t in covered_targets(target) if TARGETS[t].no_int8_activations)


def activation_defaults(target: str) -> tuple[str, bool] | None:
    """The activations a config that left them at their default gets for this target (None: the default stands)."""
    chosen = [TARGETS[t].activation_types[0] for t in covered_targets(target) if TARGETS[t].activation_types]
    return chosen[0] if chosen else None


def target_refusals(target: str, activations: tuple[str, bool], symmetric_weights: bool) -> list[str]:
    """Why a config's activations (dtype, symmetric) or weights do not suit a target it covers."""
    found = []
    for t in covered_targets(target):
        rule = TARGETS[t]
        found += [r for r in [rule.activations_refusal(*activations)] if r]
        if rule.symmetric_weights and not symmetric_weights:
            found.append(f"target {t} takes symmetric weights only (zero point 0)")
    return found


def target_compute(target: str) -> str:
    """float16 only when every covered target prefers it (one file for a CPU and a GPU stays float32)."""
    return "float16" if all(TARGETS[t].compute == "float16" for t in covered_targets(target)) else "float32"
