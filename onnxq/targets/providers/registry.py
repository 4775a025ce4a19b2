"""Execution providers by name: what onnxq needs to know of each ONNX Runtime EP it verifies and times on.

A provider is data: its ORT name and the short names a config may give, how its sessions are asked for (provider
options), the hint when this onnxruntime lacks it, its kernel table (targets.ort_kernels: placement predicted where
it is absent), how its placement is read from a real session (ORT's profiler per node, or its graph assignment for
a provider that compiles what it takes into subgraphs of its own), and the advice the report gives for it. A new
provider is one module with one `register_provider` call; nothing outside targets/ names one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from onnxq.targets.ort_kernels import KernelTypes

__all__ = ["ExecutionProvider", "PROVIDERS", "PLACEMENTS", "register_provider", "unregister_provider",
           "provider_named", "full_provider_name", "provider_aliases", "CPU_PROVIDER", "short_provider_name"]

# ONNX Runtime's own provider: every op onnxq writes has a kernel there, and every other provider falls back to it.
CPU_PROVIDER = "CPUExecutionProvider"
# How a provider's placement is read off a real session: "profiled", ORT's profiler names each kernel and the
# provider that ran it; "assigned", the provider compiles the nodes it takes into subgraphs the profiler shows as
# one node each, so ORT's graph assignment (session.record_ep_graph_assignment_info) says which node went where.
PLACEMENTS = ("profiled", "assigned")


@dataclasses.dataclass(frozen=True)
class ExecutionProvider:
    name: str  # ONNX Runtime's name, e.g. CPUExecutionProvider
    aliases: tuple[str, ...] = ()  # short names a config or the command line may give (lower case)
    # Asked for by providers = ["auto"] where this onnxruntime has it (a GPU present is meant to be used).
    auto: bool = False
    # Said where this onnxruntime lacks the provider: how to get it.
    install_hint: str = ""
    # ORT's provider options for a session on it (e.g. OpenVINO's device_type).
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # (domain, op type) → KernelTypes or None (no kernel: CPU fallback); None: no table, placement not predicted.
    kernels: Mapping[tuple[str, str], KernelTypes | None] | None = None
    # Whether this is ORT's fallback provider, with a kernel for every op onnxq writes.
    runs_everything: bool = False
    placement: str = "profiled"
    # Whether a deployed session runs ORT's own graph optimizations before the provider takes the graph: off for
    # a provider that optimizes what it takes itself and reads the Q/DQ pairs ORT's optimizations rewrite.
    ort_optimizations: bool = True
    # The report's advice where quantized nodes ran as DequantizeLinear + a float product on this provider.
    float_product_advice: str = ""
    # The advice where a model not meant for this provider runs slower quantized on it ("" : none).
    target_hint: str = ""
    # The docs guide a slower-than-float note points to.
    guide: str = "cpu-fleets"

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"provider {self.name}: placement must be one of {PLACEMENTS}")
        if any(a != a.lower() for a in self.aliases):
            raise ValueError(f"provider {self.name}: aliases are lower case")

    @property
    def short(self) -> str:
        return short_provider_name(self.name)

    @property
    def predictable(self) -> bool:
        """Whether its placement can be predicted where it is absent (it has a kernel table)."""
        return self.kernels is not None

    def session_entry(self) -> str | tuple[str, dict[str, str]]:
        """What onnxruntime.InferenceSession's providers list takes for it: the name, with its options if any."""
        return (self.name, dict(self.options)) if self.options else self.name


PROVIDERS: dict[str, ExecutionProvider] = {}


def register_provider(provider: ExecutionProvider) -> ExecutionProvider:
    taken = {a for p in PROVIDERS.values() for a in p.aliases}
    if provider.name in PROVIDERS or taken & set(provider.aliases):
        raise ValueError(f"a provider named {provider.name!r} or aliased {provider.aliases} is already registered")
    PROVIDERS[provider.name] = provider
    return provider


def unregister_provider(name: str) -> None:
    """For tests that register a provider of their own."""
    PROVIDERS.pop(name)


def provider_aliases() -> dict[str, str]:
    """Every short name → its provider's ORT name."""
    return {alias: p.name for p in PROVIDERS.values() for alias in p.aliases}


def full_provider_name(name: str) -> str:
    """An alias (any case) as its ORT name; any other name as it is."""
    return provider_aliases().get(name.lower(), name)


def provider_named(name: str) -> ExecutionProvider:
    """The registered provider of this name or alias; an unregistered ORT provider gets a plain record (profiled
    placement, no kernel table)."""
    full = full_provider_name(name)
    return PROVIDERS.get(full) or ExecutionProvider(full)


def short_provider_name(name: str) -> str:
    return name.replace("ExecutionProvider", "")
