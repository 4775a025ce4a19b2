"""Synthetic inputs for a smoke-test verification when the user gives no data at all."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.calibration.specs import Batch, InputSpec, laid_out

__all__ = ["synthetic_batches"]

# Dynamic dimensions get this size; a handful of batches suffices for a smoke test. An image's (rank ≥ 4) dynamic
# spatial dimensions get more: a CNN's strides and pools would shrink 8 pixels to nothing.
_DYNAMIC_DIM = 8
_DYNAMIC_SPATIAL_DIM = 64


def synthetic_batches(model: ir.Model, specs: list[InputSpec], count: int = 4, seed: int = 0) -> list[Batch]:
    """Float inputs ~ N(0, 1); integer inputs that index a Gather table are uniform over its rows, other
    integer inputs are ones (masks); booleans are True. Only a smoke test: real data says far more."""
    rng = np.random.default_rng(seed)
    bounds = _index_bounds(model)
    inner = _inner_dims(model)
    batches = []
    for _ in range(count):
        batch = {}
        for spec in specs:
            dims = list(spec.shape) if spec.shape is not None else [None] * (2 if spec.name in inner else 1)
            if spec.name in inner and not isinstance(dims[-1], int):
                dims[-1] = inner[spec.name]  # a MatMul's K, from its constant weight
            shape = tuple(d if isinstance(d, int) and d > 0  # ONNX files write -1 for dynamic too
                          else _DYNAMIC_SPATIAL_DIM if len(dims) >= 4 and i >= 2 else _DYNAMIC_DIM
                          for i, d in enumerate(dims))
            if spec.dtype.kind == "f":
                batch[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
            elif spec.dtype.kind in "iu" and spec.name in bounds:
                batch[spec.name] = rng.integers(0, bounds[spec.name], size=shape).astype(spec.dtype)
            elif spec.dtype.kind == "b":
                batch[spec.name] = np.ones(shape, dtype=bool)
            else:
                batch[spec.name] = np.ones(shape, dtype=spec.dtype)
        batches.append(laid_out(batch, {s.name: s.sample_axis for s in specs}))  # a scalar input is held constant
    return batches


def _inner_dims(model: ir.Model) -> dict[str, int]:
    """Graph inputs fed straight into a MatMul (or Gemm without transA) as A, with a constant 2-D B: its K, which
    the input's last dimension must match whatever the model declares."""
    dims: dict[str, int] = {}
    for value in model.graph.inputs:
        for node, index in value.uses():
            trans_a = node.attributes.get("transA")
            if index != 0 or node.op_type not in ("MatMul", "Gemm") or (trans_a is not None and trans_a.value):
                continue
            weight = ir.convenience.get_const_tensor(node.inputs[1])
            if weight is None or weight.shape is None or len(weight.shape) != 2:
                continue
            trans_b = node.attributes.get("transB")
            dims[value.name] = int(weight.shape[1] if trans_b is not None and trans_b.value else weight.shape[0])
    return dims


def _index_bounds(model: ir.Model) -> dict[str, int]:
    """Graph inputs used directly as Gather indices into a constant table: the table's row count."""
    bounds: dict[str, int] = {}
    for value in model.graph.inputs:
        for node, index in value.uses():
            if node.op_type != "Gather" or index != 1:
                continue
            table = ir.convenience.get_const_tensor(node.inputs[0])
            if table is not None and table.shape is not None and len(table.shape) >= 1:
                bounds[value.name] = min(bounds.get(value.name, 1 << 62), int(table.shape[0]))
    return bounds
