"""An operator's typed signature: which type each formal input and output has, and what each type variable admits.

From ONNX's schemas for the ONNX domain, else from onnxruntime's own registry, which also holds the operators ORT
runs that onnx.defs does not define: com.microsoft's (GroupQueryAttention, SkipSimplifiedLayerNormalization,
MatMulNBits, …) and the ONNX-domain SimplifiedLayerNormalization that onnxruntime-genai's builder writes into every
model. Without ORT's, element types stop at the first such node and a float16 plan cannot see through it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import onnx
import onnxruntime as ort

__all__ = ["Signature", "signature", "defined", "canonical_domain"]


@dataclasses.dataclass(frozen=True)
class Signature:
    inputs: tuple[str, ...]  # each formal parameter's type: a type variable ("T") or a type ("tensor(int64)")
    outputs: tuple[str, ...]
    admits: Mapping[str, frozenset[str]]  # type variable → the type strings it may be bound to

    def input_type(self, index: int) -> str:
        return _at(self.inputs, index)

    def output_type(self, index: int) -> str:
        return _at(self.outputs, index)


def _at(params: tuple[str, ...], index: int) -> str:
    """The formal parameter at a position (the last one when it is variadic)."""
    return params[min(index, len(params) - 1)]


def signature(domain: str, op_type: str, version: int) -> Signature | None:
    """The signature at the domain's opset version; None for an operator neither registry knows, or one without
    formal parameters."""
    schema = _schema(domain, op_type, version)
    if schema is None or not (schema.inputs or schema.outputs):
        return None
    return Signature(tuple(_type_str(p) for p in schema.inputs), tuple(_type_str(p) for p in schema.outputs),
                     {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints})


def defined(domain: str, op_type: str, version: int) -> bool:
    """Whether ONNX or this onnxruntime defines the op at that opset version. Asked of ORT's schemas, not of its
    kernel definitions (get_all_opkernel_def): onnxruntime-gpu 1.31.1 loads every provider library for those, and
    where TensorRT's cannot load (no libnvinfer: pip's onnxruntime-gpu alone) the process dies (SIGSEGV on an H100).
    A defined op without a CPU kernel is then named by ORT's own error when the session is made."""
    return _schema(domain, op_type, version) is not None


def canonical_domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _schema(domain: str, op_type: str, version: int):
    """ONNX's schema for the ONNX domain, else ORT's."""
    domain = canonical_domain(domain)
    return _onnx_schema(domain, op_type, version) or _ort_schema(domain, op_type, version)


def _type_str(param) -> str:
    return param.type_str if hasattr(param, "type_str") else param.typeStr  # onnx's name, ORT's name


def _onnx_schema(domain: str, op_type: str, version: int):
    if domain != "":
        return None
    try:
        return onnx.defs.get_schema(op_type, version, "")
    except onnx.defs.SchemaError:
        return None


def _ort_schema(domain: str, op_type: str, version: int):
    """The newest of ORT's schemas for the op that is not newer than the model's opset for its domain."""
    fitting = [s for s in _ort_schemas().get((domain, op_type), ()) if s.since_version <= version]
    return max(fitting, key=lambda s: s.since_version, default=None)


@functools.cache
def _ort_schemas() -> dict[tuple[str, str], tuple]:
    registry = getattr(ort.capi.onnxruntime_pybind11_state, "get_all_operator_schema", None)
    if registry is None:  # a build without schemas: only ONNX's operators are typed
        return {}
    schemas: dict[tuple[str, str], list] = {}
    for schema in registry():
        schemas.setdefault((schema.domain, schema.name), []).append(schema)
    return {key: tuple(found) for key, found in schemas.items()}
