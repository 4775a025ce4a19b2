"""Synthetic inputs for a smoke-test verification when the user gives no data at all."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxq.calibration.data import Batch, InputSpec

__all__ = ["synthetic_batches"]

# Dynamic dimensions get this size; a handful of batches suffices for a smoke test.
_DYNAMIC_DIM = 8


def synthetic_batches(model: ir.Model, specs: list[InputSpec], count: int = 4, seed: int = 0) -> list[Batch]:
    """Float inputs ~ N(0, 1); integer inputs that index a Gather table are uniform over its rows, other
    integer inputs are ones (masks); booleans are True. Only a smoke test: real data says far more."""
    rng = np.random.default_rng(seed)
    bounds = _index_bounds(model)
    batches = []
    for _ in range(count):
        batch = {}
        for spec in specs:
            shape = tuple(d if isinstance(d, int) else _DYNAMIC_DIM for d in (spec.shape or (_DYNAMIC_DIM,)))
            if spec.dtype.kind == "f":
                batch[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
            elif spec.dtype.kind in "iu" and spec.name in bounds:
                batch[spec.name] = rng.integers(0, bounds[spec.name], size=shape).astype(spec.dtype)
            elif spec.dtype.kind == "b":
                batch[spec.name] = np.ones(shape, dtype=bool)
            else:
                batch[spec.name] = np.ones(shape, dtype=spec.dtype)
        batches.append(batch)
    return batches


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
