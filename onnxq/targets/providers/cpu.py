"""ONNX Runtime's CPU provider: every op onnxq writes runs there, and every other provider falls back to it."""

from onnxq.targets.providers.registry import CPU_PROVIDER, ExecutionProvider, register_provider

CPU = register_provider(ExecutionProvider(CPU_PROVIDER, aliases=("cpu",), runs_everything=True))
