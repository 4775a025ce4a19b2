"""Which ONNX Runtime kernels exist per execution provider for the ops onnxq writes, and for which element types.

Where a provider is absent (CI has no GPU), this table predicts where each quantized node runs (verify.kernels.predict);
where it is present, the prediction is checked against the real session's profile and every difference is
reported, so a new onnxruntime that changes its registrations shows up as a finding, not a silent error.

Source: onnxruntime's kernel registrations, `onnxruntime/core/providers/cuda/cuda_execution_provider.cc` and
`onnxruntime/contrib_ops/cuda/cuda_contrib_kernels.cc` (main, commit 004b79e; 1.31 registers the same
for these ops), and a profiled run on an H100 (onnxruntime-gpu 1.31.1): MatMulIntegerToFloat and
DynamicQuantizeLinear fall back to the CPU with copies, MatMulNBits runs on CUDA, DequantizeLinear → MatMul runs
unfused on CUDA. The CPU provider registers every op onnxq writes for every type it writes (it is ORT's fallback).
Each provider carries its table (targets.providers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

__all__ = ["INTEGER_KERNELS", "MEMCPY_OPS", "KernelTypes", "KernelTable", "CUDA_KERNELS", "has_kernel", "ANY_TYPE"]

# Kernels that compute a product on integers or low-bit weights.
INTEGER_KERNELS = frozenset({
    "QLinearMatMul", "MatMulInteger", "MatMulIntegerToFloat", "QGemm", "DynamicQuantizeMatMul", "QLinearConv",
    "ConvInteger", "MatMulNBits", "QAttention", "DynamicQuantizeLSTM"})
MEMCPY_OPS = frozenset({"MemcpyFromHost", "MemcpyToHost"})
ANY_TYPE = frozenset({"*"})

_FLOATS = frozenset({"FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE"})
_QUANTIZED = frozenset({"INT8", "UINT8", "INT4", "UINT4", "FLOAT8E4M3FN", "FLOAT8E5M2"})
_MS = "com.microsoft"


@dataclasses.dataclass(frozen=True)
class KernelTypes:
    """The element types a provider registers an op for, read off one operand: ("input", i) or ("output", i)."""

    types: frozenset[str]
    operand: tuple[str, int] = ("input", 0)


# (domain, op type) → KernelTypes, or None: no kernel there for any type (the node falls back to the CPU). Ops
# onnxq neither writes nor plans are not listed: verify.kernels.predict assumes they run on the provider.
CUDA_KERNELS: dict[tuple[str, str], KernelTypes | None] = {
    ("", "MatMul"): KernelTypes(_FLOATS),
    ("", "Gemm"): KernelTypes(_FLOATS),
    ("", "Conv"): KernelTypes(frozenset({"FLOAT", "FLOAT16", "DOUBLE"})),
    ("", "ConvTranspose"): KernelTypes(frozenset({"FLOAT", "FLOAT16", "DOUBLE"})),
    ("", "LSTM"): KernelTypes(frozenset({"FLOAT", "FLOAT16", "DOUBLE"})),
    ("", "GRU"): KernelTypes(frozenset({"FLOAT", "FLOAT16", "DOUBLE"})),
    ("", "RNN"): KernelTypes(frozenset({"FLOAT", "FLOAT16", "DOUBLE"})),
    ("", "Einsum"): KernelTypes(frozenset({"FLOAT", "FLOAT16", "DOUBLE"})),
    ("", "Gather"): KernelTypes(ANY_TYPE),
    ("", "Cast"): KernelTypes(ANY_TYPE),
    ("", "DequantizeLinear"): KernelTypes(_QUANTIZED),
    ("", "QuantizeLinear"): KernelTypes(_QUANTIZED, ("output", 0)),
    # int8 × int8 only: uint8 activations (onnxq's default) have no CUDA MatMulInteger.
    ("", "MatMulInteger"): KernelTypes(frozenset({"INT8"})),
    (_MS, "MatMulNBits"): KernelTypes(frozenset({"FLOAT", "FLOAT16", "BFLOAT16"})),
    (_MS, "GatherBlockQuantized"): KernelTypes(frozenset({"UINT8", "INT4", "UINT4"})),
    (_MS, "FusedMatMul"): KernelTypes(_FLOATS),
    (_MS, "FusedConv"): KernelTypes(frozenset({"FLOAT"})),
    ("", "QLinearMatMul"): None,
    ("", "QLinearConv"): None,
    ("", "ConvInteger"): None,
    ("", "DynamicQuantizeLinear"): None,
    (_MS, "MatMulIntegerToFloat"): None,
    (_MS, "DynamicQuantizeMatMul"): None,
    (_MS, "QGemm"): None,
    (_MS, "DynamicQuantizeLSTM"): None,
}

KernelTable = Mapping[tuple[str, str], KernelTypes | None]


def has_kernel(table: KernelTable | None, domain: str, op_type: str, element_type: str | None) -> bool | None:
    """Whether a provider with this kernel table registers this op for this element type; None when that is not
    known: no table (the provider is not predicted), the table does not list the op (onnxq writes none of those:
    assumed to run there), or the element type is unknown (a value the model leaves untyped)."""
    if table is None:
        return None
    if (domain, op_type) not in table:
        return None
    entry = table[(domain, op_type)]
    if entry is None:
        return False
    if entry.types is ANY_TYPE or element_type in entry.types:
        return True
    return None if element_type is None else False
