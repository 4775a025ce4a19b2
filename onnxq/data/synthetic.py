"""Synthetic inputs for a smoke-test verification when the user gives no data at all: shaped as the model runs
(data.synthetic_shapes), valued as its inputs are read, and a decoder's caches, attention mask and position ids
made as its first step takes them (data.completion), as from a user's token windows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxq.data.axes import inferred_constants
from onnxq.data.completion import completable, completed
from onnxq.data.specs import Batch, InputSpec, laid_out, with_layout
from onnxq.io.sessions import ORT_ERRORS
from onnxq.io.model_sessions import make_session
from onnxq.data.synthetic_shapes import Shapes, fixed_dims, open_extents, probed_extent, shapes_for

__all__ = ["synthetic_batches"]

_PROBE_BYTES = 256 * 2**20  # a size whose batch would pass this is not tried (an image's sides of 3000 or 16000)


def synthetic_batches(model: ir.Model, specs: list[InputSpec], count: int = 4, seed: int = 0) -> list[Batch]:
    """Float inputs ~ N(0, 1); integer inputs that index a Gather table are uniform over its rows, other
    integer inputs are ones (masks); booleans are True. Only a smoke test: real data says far more."""
    fixed, bounds = fixed_dims(model), _index_bounds(model)
    extent = None
    if open_extents([s for s in specs if not completable(s, specs)], fixed):
        extent = _probed(model, specs, fixed, bounds)
    shapes = shapes_for(specs, fixed, extent)
    # Inputs whose every size the model fixes, beside inputs of 8 samples (an Optimum merged decoder's
    # use_cache_branch [1]), held constant as a user's data gives them once (data.axes).
    held = inferred_constants(specs, shapes)
    specs = with_layout(specs, {}, held) if held else specs
    rng = np.random.default_rng(seed)
    return [_batch(specs, shapes, bounds, rng) for _ in range(count)]


def _probed(model: ir.Model, specs: list[InputSpec], fixed: Mapping[tuple[str, int], int],
            bounds: Mapping[str, int]) -> int | None:
    """The extent of the open float dimensions the model runs on (synthetic_shapes.probed_extent), tried on one
    batch in a session without optimizations (no copy of the weights)."""
    try:
        session = make_session(model, optimize=False)
    except ORT_ERRORS:
        return None  # the model's own refusal is worded where its first session is made

    def runs(extent: int | None) -> bool:
        shapes = shapes_for(specs, fixed, extent)
        if sum(int(np.prod(shapes[s.name])) * s.dtype.itemsize for s in specs) > _PROBE_BYTES:
            return False  # 3000 × 3000 pixels are no image size
        batch = _batch(specs, shapes, bounds, np.random.default_rng(0))
        try:
            session.run(None, batch)
        except ORT_ERRORS:
            return False
        return True

    return probed_extent(runs)


def _batch(specs: Sequence[InputSpec], shapes: Shapes, bounds: Mapping[str, int],
           rng: np.random.Generator) -> Batch:
    """One batch: the inputs the completion rules make (a decoder's caches, mask, positions) left to them."""
    batch = {s.name: _values(s, shapes[s.name], bounds, rng) for s in specs if not completable(s, list(specs))}
    batch = dict(completed(batch, list(specs)))
    for spec in specs:
        if spec.name not in batch:
            batch[spec.name] = _values(spec, shapes[spec.name], bounds, rng)
    return laid_out(batch, {s.name: s.sample_axis for s in specs})  # a scalar input is held constant


def _values(spec: InputSpec, shape: tuple[int, ...], bounds: Mapping[str, int],
            rng: np.random.Generator) -> np.ndarray:
    if spec.dtype.kind == "f":
        return rng.standard_normal(shape).astype(spec.dtype)
    if spec.dtype.kind in "iu" and spec.name in bounds:
        return rng.integers(0, bounds[spec.name], size=shape).astype(spec.dtype)
    if spec.dtype.kind == "b":
        return np.ones(shape, dtype=bool)
    return np.ones(shape, dtype=spec.dtype)


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
