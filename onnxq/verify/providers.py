"""The providers a verification runs on (CPU always, CUDA when asked for and present) and those asked for but absent
here, whose placement is predicted."""

from __future__ import annotations

from collections.abc import Sequence

import onnxruntime as ort

from onnxq.config import PROVIDER_ALIASES
from onnxq.targets import target_providers
from onnxq.verify.kernels.predict import predictable

__all__ = ["resolve_providers", "absent_providers"]


def resolve_providers(requested: Sequence[str]) -> tuple[list[str], list[str]]:
    """(providers to run, messages for requested ones this onnxruntime lacks). CPU always runs."""
    available = ort.get_available_providers()
    wanted = ["CPUExecutionProvider"]
    missing = []
    for name in requested:
        if name == "auto":
            wanted += [p for p in ("CUDAExecutionProvider",) if p in available]
            continue
        full = PROVIDER_ALIASES.get(name.lower(), name)
        if full in available:
            wanted.append(full)
        else:
            hint = " (install onnxruntime-gpu and a CUDA runtime)" if full == "CUDAExecutionProvider" else ""
            missing.append(f"{full} is not available in this onnxruntime{hint}; skipped")
    return list(dict.fromkeys(wanted)), missing



def absent_providers(requested: Sequence[str], target: str) -> tuple[str, ...]:
    """The providers a config names or the target is deployed on that this onnxruntime lacks and the kernel
    tables know: their placement is predicted."""
    named = [PROVIDER_ALIASES.get(n.lower(), n) for n in requested if n != "auto"]
    here = resolve_providers(requested)[0]
    return tuple(dict.fromkeys(p for p in (*named, *target_providers(target)) if p not in here and predictable(p)))
