"""The shapes of synthetic inputs: what the graph fixes, one size per named dimension, and where a model declares
only names (Hugging Face exports: pixel_values [batch_size, num_channels, height, width]), the sizes it runs on.

- fixed by the graph: a MatMul's K from its constant weight, a Conv's input channels from its weight and groups;
- one value per dimension name, wherever it appears (a decoder's attention_mask and input_ids share
  sequence_length); a name that is a sum of names ('past_sequence_length + sequence_length') is that sum;
- extents: a float input's open dimensions other than its samples axis (an image's sides, audio samples, frames)
  start at 8 (64 for an image's sides); where onnxruntime does not run the model on them (a ViT's position
  embeddings want 224 / 16 patches, a CNN's strides 8 pixels too few, Whisper's 3000 frames), the common sizes
  are tried in turn on one batch and the first the model runs on is kept.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping, Sequence

import onnx_ir as ir

from onnxq.data.specs import InputSpec

__all__ = ["fixed_dims", "shapes_for", "probed_extent", "open_extents"]

DYNAMIC_DIM = 8
DYNAMIC_SPATIAL_DIM = 64
# Tried in turn when the model does not run on the first sizes: image sides (ImageNet's 224 first, then small and
# large), a second of 16 kHz audio, Whisper's 3000 mel frames.
EXTENTS = (224, 32, 16, 128, 256, 384, 512, 1024, 3000, 16000)

Shapes = dict[str, tuple[int, ...]]


def fixed_dims(model: ir.Model) -> dict[tuple[str, int], int]:
    """(input name, axis) → the size the graph's constant weights fix for it."""
    fixed: dict[tuple[str, int], int] = {}
    for value in model.graph.inputs:
        for node, index in _direct_uses(value):
            weight = ir.convenience.get_const_tensor(node.inputs[1]) if len(node.inputs) > 1 \
                and node.inputs[1] is not None else None
            if weight is None or weight.shape is None or index != 0:
                continue
            fixed.update(_fixed_by(node, value, tuple(weight.shape)))
    return fixed


def _fixed_by(node: ir.Node, value: ir.Value, weight: tuple[int, ...]) -> dict[tuple[str, int], int]:
    rank = value.shape.rank() if value.shape is not None else None
    if node.op_type in ("MatMul", "Gemm") and len(weight) == 2:
        if _attribute(node, "transA"):
            return {}
        k = weight[1] if _attribute(node, "transB") else weight[0]
        return {(value.name, (rank or 2) - 1): int(k)}
    if node.op_type == "Conv" and len(weight) >= 3:
        return {(value.name, 1): int(weight[1]) * max(1, _attribute(node, "group") or 1)}
    return {}


# Ops that pass an input on unchanged in shape when their other operand is a constant (an image normalized or
# cast before its first Conv).
_PASS_THROUGH = frozenset({"Cast", "Identity", "Sub", "Div", "Mul", "Add"})


def _direct_uses(value: ir.Value, depth: int = 4) -> list[tuple[ir.Node, int]]:
    """The nodes that read the value, seen through _PASS_THROUGH ops whose other operands are constants."""
    found = []
    for node, index in value.uses():
        others = [v for i, v in enumerate(node.inputs) if i != index and v is not None]
        if node.op_type in _PASS_THROUGH and depth > 0 and all(v.const_value is not None for v in others):
            found += _direct_uses(node.outputs[0], depth - 1)
        else:
            found.append((node, index))
    return found


def _attribute(node: ir.Node, name: str) -> int:
    attribute = node.attributes.get(name)
    return int(attribute.value) if attribute is not None else 0


def open_extents(specs: Sequence[InputSpec], fixed: Mapping[tuple[str, int], int]) -> bool:
    """Whether a float input has an open dimension besides its samples axis that the graph does not fix."""
    return any(spec.dtype.kind == "f" and spec.shape is not None and any(
        not _given(d) and axis != spec.sample_axis and (spec.name, axis) not in fixed
        for axis, d in enumerate(spec.shape)) for spec in specs)


def shapes_for(specs: Sequence[InputSpec], fixed: Mapping[tuple[str, int], int], extent: int | None = None) -> Shapes:
    """Each input's shape: its given sizes, the graph's fixed ones, one value per name; extent (None: the first
    sizes) for a float input's other open dimensions. Float inputs are sized first: their names set the others'."""
    symbols: dict[str, int] = {}
    for spec in specs:  # a size the graph fixes holds for its name everywhere
        for axis, dim in enumerate(spec.shape or ()):
            if isinstance(dim, str) and (spec.name, axis) in fixed:
                symbols.setdefault(dim, fixed[(spec.name, axis)])
    ordered = sorted(specs, key=lambda s: s.dtype.kind != "f")
    shapes = {}
    for expressions in (False, True):  # sums of names once every plain name has its value
        for spec in ordered:
            dims = list(spec.shape) if spec.shape is not None else [None] * (2 if (spec.name, 1) in fixed else 1)
            if _is_expression_free(dims) != expressions:
                shapes[spec.name] = tuple(_size(spec, axis, dim, len(dims), fixed, symbols, extent)
                                          for axis, dim in enumerate(dims))
    return {spec.name: shapes[spec.name] for spec in specs}


def _is_expression_free(dims: list) -> bool:
    return not any(isinstance(d, str) and not d.isidentifier() for d in dims)


def _size(spec: InputSpec, axis: int, dim, rank: int, fixed: Mapping[tuple[str, int], int],
          symbols: dict[str, int], extent: int | None) -> int:
    if _given(dim):
        return int(dim)
    if (spec.name, axis) in fixed:
        return fixed[(spec.name, axis)]
    if isinstance(dim, str) and dim in symbols:
        return symbols[dim]
    value = _evaluated(dim, symbols) if isinstance(dim, str) else None
    if value is None:
        floating = spec.dtype.kind == "f" and axis != spec.sample_axis
        value = (extent if floating and extent is not None
                 else DYNAMIC_SPATIAL_DIM if floating and rank >= 4 and axis >= 2 else DYNAMIC_DIM)
    if isinstance(dim, str):
        symbols[dim] = value
    return value


def _given(dim) -> bool:
    return isinstance(dim, int) and dim > 0  # ONNX files write -1 for dynamic too


_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _evaluated(expression: str, symbols: Mapping[str, int]) -> int | None:
    """A dimension named by arithmetic on other names ('past_sequence_length + sequence_length'), where each name
    has its value; None otherwise."""
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return None

    def value(node) -> int | None:
        if isinstance(node, ast.Name):
            return symbols.get(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and right == 0):
                return None
            return _OPERATORS[type(node.op)](left, right)
        return None

    result = value(tree)
    return result if result is not None and result > 0 else None


def probed_extent(runs: Callable[[int | None], bool]) -> int | None:
    """The first extent the model runs on: None (the first sizes), then EXTENTS in turn; None if none runs (the
    run that follows then fails with onnxruntime's own reason)."""
    for extent in (None, *EXTENTS):
        if runs(extent):
            return extent
    return None
