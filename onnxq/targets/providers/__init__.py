"""ONNX Runtime's execution providers as a registry (one module per provider): names and aliases, session options,
kernel tables, how placement is read and what the report advises. CPU, CUDA and OpenVINO are registered here."""

from onnxq.targets.providers import cpu, cuda, openvino  # noqa: F401  (registers them)
from onnxq.targets.providers.registry import (
    CPU_PROVIDER,
    PLACEMENTS,
    PROVIDERS,
    ExecutionProvider,
    full_provider_name,
    provider_aliases,
    provider_named,
    register_provider,
    short_provider_name,
    unregister_provider,
)

__all__ = ["ExecutionProvider", "PROVIDERS", "PLACEMENTS", "CPU_PROVIDER", "register_provider",
           "unregister_provider", "provider_named", "full_provider_name", "provider_aliases", "short_provider_name"]
