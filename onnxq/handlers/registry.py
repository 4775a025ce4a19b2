"""Handlers keyed by (domain, op_type). A handler looks at one node and returns a plan; it never edits."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from onnxq.handlers.plan import NodePlan, PlanContext, Skip

__all__ = ["Handler", "register", "unregister", "handler_for", "registered_op_types", "product_op_types"]

# A handler returns a plan, a reasoned Skip, or None when the node is no candidate at all.
Handler = Callable[[ir.Node, PlanContext], NodePlan | Skip | None]

_HANDLERS: dict[tuple[str, str], Handler] = {}
# Op types whose quantized form computes a product (MatMul, Gemm, …): placement looks for their integer kernels and
# reports them when ORT runs them as DequantizeLinear + the float op. Not a product: a Gather's table lookup.
_PRODUCTS: set[tuple[str, str]] = set()


def register(op_type: str, domain: str = "", *, product: bool = True) -> Callable[[Handler], Handler]:
    def decorate(handler: Handler) -> Handler:
        key = (domain, op_type)
        if key in _HANDLERS:
            raise ValueError(f"a handler for {key} is already registered")
        _HANDLERS[key] = handler
        if product:
            _PRODUCTS.add(key)
        return handler

    return decorate


def unregister(op_type: str, domain: str = "") -> None:
    """Remove a handler (a test's, or to replace a built-in one with register)."""
    del _HANDLERS[(domain, op_type)]
    _PRODUCTS.discard((domain, op_type))


def handler_for(node: ir.Node) -> Handler | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    return _HANDLERS.get((domain, node.op_type))


def registered_op_types() -> tuple[str, ...]:
    return tuple(sorted(op for _, op in _HANDLERS))


def product_op_types() -> frozenset[str]:
    """The planned op types that compute a product (register(..., product=True))."""
    return frozenset(op for _, op in _PRODUCTS)
