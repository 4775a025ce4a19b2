"""The providers a verification runs on (CPU always; those asked for, the target's, and with "auto" every
registered provider marked auto, where this onnxruntime has them) and those asked for but absent here, whose
placement is predicted (targets.providers)."""

from __future__ import annotations

from collections.abc import Sequence

import onnxruntime as ort

from onnxq.targets import target_providers
from onnxq.targets.providers import CPU_PROVIDER, PROVIDERS, full_provider_name, provider_named
from onnxq.verify.kernels.predict import predictable

__all__ = ["resolve_providers", "absent_providers"]


def resolve_providers(requested: Sequence[str], target: str | None = None) -> tuple[list[str], list[str]]:
    """(providers to run, messages for requested ones this onnxruntime lacks). CPU always runs; with "auto", a
    target deployed on a provider this onnxruntime has runs there too (its absence is said by its prediction)."""
    available = ort.get_available_providers()
    wanted = [CPU_PROVIDER]
    missing = []
    for name in requested:
        if name == "auto":
            wanted += [p.name for p in PROVIDERS.values() if p.auto and p.name in available]
            continue
        provider = provider_named(name)
        if provider.name in available:
            wanted.append(provider.name)
        else:
            hint = f" ({provider.install_hint})" if provider.install_hint else ""
            missing.append(f"{provider.name} is not available in this onnxruntime{hint}; skipped")
    if target is not None and "auto" in requested:
        wanted += [p for p in target_providers(target) if p in available]
    return list(dict.fromkeys(wanted)), missing


def absent_providers(requested: Sequence[str], target: str) -> tuple[str, ...]:
    """The providers a config names or the target is deployed on that this onnxruntime lacks and the kernel
    tables know: their placement is predicted."""
    named = [full_provider_name(n) for n in requested if n != "auto"]
    here = resolve_providers(requested, target)[0]
    return tuple(dict.fromkeys(p for p in (*named, *target_providers(target)) if p not in here and predictable(p)))
