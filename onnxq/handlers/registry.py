"""Handlers keyed by (domain, op_type). A handler looks at one node and returns a plan; it never edits."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from onnxq.handlers.plan import NodePlan, PlanContext, Skip

__all__ = ["Handler", "register", "handler_for", "registered_op_types"]

# A handler returns a plan, a reasoned Skip, or None when the node is no candidate at all.
Handler = Callable[[ir.Node, PlanContext], NodePlan | Skip | None]

_HANDLERS: dict[tuple[str, str], Handler] = {}


def register(op_type: str, domain: str = "") -> Callable[[Handler], Handler]:
    def decorate(handler: Handler) -> Handler:
        key = (domain, op_type)
        if key in _HANDLERS:
            raise ValueError(f"a handler for {key} is already registered")
        _HANDLERS[key] = handler
        return handler

    return decorate


def handler_for(node: ir.Node) -> Handler | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    return _HANDLERS.get((domain, node.op_type))


def registered_op_types() -> tuple[str, ...]:
    return tuple(sorted(op for _, op in _HANDLERS))
