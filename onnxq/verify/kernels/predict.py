"""Where ONNX Runtime will run each node on a provider that is not here: a placement predicted from the kernel
registrations (targets.ort_kernels), in the same form as one profiled from a real session, and the check of a
prediction against a real one when the provider is present.

What the prediction models: a node whose op has no kernel on the provider for its element type falls back to the
CPU (MatMulIntegerToFloat, DynamicQuantizeLinear, QLinear*, QGemm on CUDA); ORT's QDQ fusions into integer kernels
are CPU-only, so elsewhere DequantizeLinear feeds the float product it was written before; a blocked 4-bit
DequantizeLinear feeding MatMul is fused into MatMulNBits where the provider has it. A tensor passed between a node
on the provider and one on the CPU costs one copy each way it crosses (ORT's Memcpy nodes; graph inputs and outputs
are moved by the session itself and not counted). Ops the table does not list (onnxq writes none of them) are
assumed to run on the provider; ORT may still place small shape computations on the CPU, so a real session can
show more copies than predicted — the quantized nodes' placement is what the check compares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import onnx_ir as ir

from onnxq.targets.ort_kernels import INTEGER_KERNELS, KernelTable, has_kernel
from onnxq.targets.providers import CPU_PROVIDER, provider_named
from onnxq.verify.kernels.placement import NodeRun, Placement, short

__all__ = ["predict_placement", "predictable", "with_mismatches"]
_LOW_BIT = frozenset({"INT4", "UINT4"})


def predictable(provider: str) -> bool:
    """Whether the provider has a kernel table (targets.providers)."""
    return provider_named(provider).predictable


def predict_placement(model: ir.Model, provider: str, quantized: Mapping[str, str]) -> Placement:
    """The placement ORT would give the model on the provider, every node of every graph predicted."""
    runs: dict[str, NodeRun] = {}
    where: dict[ir.Node, str] = {}
    table = provider_named(provider).kernels
    for node in model.graph.all_nodes():
        op_type = _fused(node, table) or node.op_type
        domain = "com.microsoft" if op_type != node.op_type else ("" if node.domain == "ai.onnx" else node.domain)
        known = has_kernel(table, domain, op_type, _key_type(node, (domain, op_type), table))
        where[node] = provider if known is not False else CPU_PROVIDER
        runs[node.name or ""] = NodeRun(node.name or "", op_type, where[node])
    copies = _copies(where, provider)
    return Placement(provider, (*runs.values(), *copies), {n: runs.get(n) for n in quantized}, source="predicted")


def with_mismatches(profiled: Placement, predicted: Placement) -> Placement:
    """The real placement with every quantized node the prediction placed otherwise: on another provider, or on
    another kind of kernel (integer vs float product; the CPU's own fusions may rename a fallback's kernel, as
    MatMulInteger into MatMulIntegerToFloat, without changing its kind)."""
    differ = []
    for name, ran in profiled.quantized.items():
        guess = predicted.quantized.get(name)
        if ran is None or guess is None:
            continue
        if (_kind(ran.op_type), ran.provider) != (_kind(guess.op_type), guess.provider):
            differ.append(f"{name}: predicted {guess.op_type} on {short(guess.provider)}, ran {ran.op_type} on "
                          f"{short(ran.provider)}")
    return dataclasses.replace(profiled, mismatches=tuple(differ))


def _kind(op_type: str) -> str:
    return "integer" if op_type in INTEGER_KERNELS else "float"


def _fused(node: ir.Node, table: KernelTable | None) -> str | None:
    """MatMulNBits for a MatMul reading a blocked 4-bit DequantizeLinear weight (ORT's DQ → MatMul fusion, which
    runs for this provider when it has MatMulNBits for the activation's type)."""
    if node.op_type != "MatMul" or len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    dq = node.inputs[1].producer()
    if dq is None or dq.op_type != "DequantizeLinear" or "block_size" not in dq.attributes:
        return None
    if _element_type(dq.inputs[0]) not in _LOW_BIT:
        return None
    return "MatMulNBits" if has_kernel(table, "com.microsoft", "MatMulNBits", _element_type(node.inputs[0])) \
        else None


def _key_type(node: ir.Node, op: tuple[str, str], table: KernelTable | None) -> str | None:
    """The element type of the operand the provider's kernel table keys this op (domain, type) on (input 0 when
    unlisted)."""
    entry = None if table is None else table.get(op)
    kind, index = ("input", 0) if entry is None else entry.operand  # unlisted, or no kernel: input 0
    values = node.outputs if kind == "output" else node.inputs
    return _element_type(values[index]) if index < len(values) else None


def _element_type(value: ir.Value | None) -> str | None:
    """A value's element type by name ("INT8"), from its type, its constant, or the Q/DQ node producing it."""
    if value is None:
        return None
    if value.dtype is not None:
        return value.dtype.name
    if value.const_value is not None:
        return value.const_value.dtype.name
    node = value.producer()
    if node is None:
        return None
    if node.op_type == "DynamicQuantizeLinear" and value is node.outputs[0]:
        return "UINT8"
    if node.op_type == "QuantizeLinear":
        return _element_type(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else "UINT8"
    if node.op_type == "DequantizeLinear":
        return _element_type(node.inputs[1])
    return None


def _copies(where: Mapping[ir.Node, str], provider: str) -> list[NodeRun]:
    """One Memcpy per tensor and direction between a node on the provider and one on the CPU."""
    crossings = set()
    for node, place in where.items():
        for value in node.outputs:
            for consumer, _ in value.uses():
                other = where.get(consumer)
                if other is not None and other != place:
                    crossings.add((value.name, "MemcpyToHost" if place == provider else "MemcpyFromHost"))
    return [NodeRun(f"Memcpy_{i}", op, provider) for i, (_, op) in enumerate(sorted(crossings))]
