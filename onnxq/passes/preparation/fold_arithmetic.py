"""Arithmetic on constants that makes a weight, folded before planning (registry entries of
passes.preparation.fold_constant_weights.WEIGHT_FOLDS): PyTorch's weight normalization exports as w = v · (g / ‖v‖) —
ReduceL2 → Div → Mul on the two parameters — and wav2vec2 / HuBERT / WavLM keep it so in their positional Conv,
which then had no constant weight to quantize. Each fold is the numpy operation ONNX specifies, in the inputs'
float type (ReduceL2's sum of squares in float64)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from onnxq.io.irquery import attribute, constant_array

__all__ = ["ARITHMETIC_FOLDS"]


def _binary(operation: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[ir.Node, np.ndarray],
                                                                                    np.ndarray | None]:
    """A broadcasting binary op whose second input is a constant of the first's type."""
    def fold(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
        other = constant_array(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
        if other is None or other.dtype != array.dtype:
            return None
        with np.errstate(all="ignore"):  # as ONNX computes it: a division by 0 is inf, not an error
            return np.asarray(operation(array, other), dtype=array.dtype)
    return fold


def _unary(operation: Callable[[np.ndarray], np.ndarray]) -> Callable[[ir.Node, np.ndarray], np.ndarray]:
    def fold(node: ir.Node, array: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(operation(array), dtype=array.dtype)
    return fold


def _reduce_l2(node: ir.Node, array: np.ndarray) -> np.ndarray | None:
    """ReduceL2: axes an attribute before opset 18, input 1 from then on; all axes when none are given (unless
    noop_with_empty_axes)."""
    axes = attribute(node, "axes", None)
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = constant_array(node.inputs[1])
        if axes is None:
            return None  # axes computed at run time
    keepdims = bool(attribute(node, "keepdims", 1))
    if axes is None or np.size(axes) == 0:
        if attribute(node, "noop_with_empty_axes", 0):
            return array
        axes = range(array.ndim)
    axes = tuple(int(a) % array.ndim for a in np.asarray(axes).reshape(-1))
    squares = np.square(array.astype(np.float64))
    return np.sqrt(squares.sum(axis=axes, keepdims=keepdims)).astype(array.dtype)


ARITHMETIC_FOLDS: dict[str, Callable[[ir.Node, np.ndarray], np.ndarray | None]] = {
    "Mul": _binary(np.multiply), "Div": _binary(np.divide), "Add": _binary(np.add), "Sub": _binary(np.subtract),
    "Pow": _binary(np.power), "Sqrt": _unary(np.sqrt), "Neg": _unary(np.negative), "Abs": _unary(np.abs),
    "Reciprocal": _unary(np.reciprocal), "ReduceL2": _reduce_l2,
}
