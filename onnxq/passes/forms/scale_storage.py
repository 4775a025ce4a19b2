"""How a weight's block scales are stored (blocks.scale_dtype) for MatMulNBits and GatherBlockQuantized, which read
float32 scales at float32 compute: float32 as they are; float16 behind a Cast where float16 holds every one exactly;
uint8, a code per block on its output channel's grid (numerics.scale_grid) behind Cast · Mul · Add. ORT folds those
nodes at load (constant folding, before any partitioning), so the kernels read the same float32 values; under
ORT_DISABLE_ALL they are computed at every run, the same values.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import onnx_ir as ir

from onnxq.numerics.blockwise import BlockQuantized, half_exact
from onnxq.passes.graph.builder import GraphBuilder, shared_block_form

__all__ = ["stored_scales", "ScaleStorage"]

ScaleStorage = Literal["uint8", "float16", "float32"]


def stored_scales(builder: GraphBuilder, quantized: BlockQuantized, names: tuple[str, tuple | None],
                  storage: ScaleStorage, shape: tuple[int, ...]) -> ir.Value:
    """The float32 scales [N, n_blocks] of quantized as a value of `shape` (MatMulNBits: flat; GatherBlockQuantized:
    [N, n_blocks]); names: the initializers' base name and the blocks' key in the run's memo (None: blocks of this
    graph's own). Each form falls back to the next where it cannot hold the scales exactly: uint8 → float16 →
    float32."""
    scales = quantized.scales
    if storage == "uint8" and quantized.scale_grid is not None:
        codes = _grid_codes(quantized, names[1])
        if codes is not None:
            return _decoded(builder, codes, quantized, names[0], shape)
    if storage != "float32" and half_exact(scales):
        halved = shared_block_form((names[1], "float16 scales"), lambda: scales.astype(np.float16))
        stored = builder.initializer(f"{names[0]}_block_scales_float16", halved.reshape(shape))
        return _as_float(builder, stored, f"{names[0]}_block_scales_Cast", next(iter(builder.graph)))
    return builder.initializer(f"{names[0]}_block_scales", scales.reshape(shape))


def _grid_codes(quantized: BlockQuantized, key: tuple | None) -> np.ndarray | None:
    """The scales' uint8 codes on their grid; None if any does not decode to its scale exactly (a grid the
    numerics did not choose the scales on)."""
    grid = quantized.scale_grid
    codes = shared_block_form((key, "scale codes"), lambda: grid.codes(quantized.scales))
    return codes if np.array_equal(grid.values(codes), quantized.scales) else None


def _decoded(builder: GraphBuilder, codes: np.ndarray, quantized: BlockQuantized, base: str,
             shape: tuple[int, ...]) -> ir.Value:
    """Cast(codes) · Cast(step) + Cast(low), reshaped: float32 products and sums, as numerics.scale_grid decodes."""
    grid = quantized.scale_grid
    first = next(iter(builder.graph))  # ahead of every node, in order: the weight's readers share its scales
    stored = {part: builder.initializer(f"{base}_block_scales_{part}", array) for part, array in
              (("codes", codes), ("step", grid.step.astype(np.float16)), ("low", grid.low.astype(np.float16)))}
    decoded = {part: _as_float(builder, value, f"{base}_block_scales_{part}_Cast", first)
               for part, value in stored.items()}
    product = builder.node("Mul", [decoded["codes"], decoded["step"]], f"{base}_block_scales_Mul", first)
    total = builder.node("Add", [product.outputs[0], decoded["low"]], f"{base}_block_scales_Add", first)
    out = total.outputs[0]
    if tuple(shape) != tuple(codes.shape):
        target = builder.initializer(f"{base}_block_scales_shape", np.array(shape, np.int64))
        out = builder.node("Reshape", [out, target], f"{base}_block_scales_Reshape", first).outputs[0]
    for value, dims in ((product.outputs[0], codes.shape), (total.outputs[0], codes.shape), (out, shape)):
        value.type, value.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape(dims)
    return out


def _as_float(builder: GraphBuilder, stored: ir.Value, name: str, before: ir.Node) -> ir.Value:
    cast = builder.node("Cast", [stored], name, before, attributes={"to": ir.DataType.FLOAT.value})
    out = cast.outputs[0]
    out.type, out.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape(tuple(stored.const_value.shape))
    return out
