"""Small questions about an onnx_ir graph, asked by handlers, passes and verification alike (and the one rule for
a fresh name)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

__all__ = ["producer", "attribute", "constant_array", "unique_name"]


def producer(value: ir.Value | None, op_type: str) -> ir.Node | None:
    """The node of this op type that produces the value, or None."""
    node = None if value is None else value.producer()
    return node if node is not None and node.op_type == op_type else None


def attribute(node: ir.Node, name: str, default: float | int = 0) -> float | int:
    """An attribute's value, or the default when the node does not set it."""
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's constant (initializer or Constant node) as an array, or None."""
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def unique_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, … — the first not in `taken`, which it joins."""
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name
