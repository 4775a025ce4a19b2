"""Loop-invariant weights read as the constants they are. An exporter may pass a weight into a Loop as a
loop-carried value that starts as a main-graph initializer and that the body returns unchanged (an LSTM word
embedder): each iteration reads the same tensor, a constant in all but form, yet to a planner the body's MatMul
multiplies two activations. The prepared clone's body nodes read the outer constant directly (ONNX lets a body read
any value of the graphs around it); the carried value itself still flows through, so the Loop's outputs are the
same. The model as given stays the verification's reference."""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["captured_loop_invariants"]


def _invariants(loop: ir.Node) -> list[tuple[ir.Value, ir.Value]]:
    """(outer constant, body input) per loop-carried value the body returns unchanged and that starts constant."""
    body_attr = loop.attributes.get("body")
    if loop.op_type != "Loop" or loop.domain not in ("", "ai.onnx") or body_attr is None:
        return []
    body = body_attr.value
    found = []
    # Loop inputs: M, cond, then the carried values; body inputs: iteration, cond, carried; outputs: cond, carried.
    for outer, inner, returned in zip(loop.inputs[2:], body.inputs[2:], body.outputs[1:]):
        if outer is None or returned is not inner or not inner.uses():
            continue
        if ir.convenience.get_const_tensor(outer) is not None and not outer.is_graph_input():
            found.append((outer, inner))
    return found


def captured_loop_invariants(model: ir.Model) -> tuple[ir.Model, str | None]:
    """(a clone whose Loop bodies read their invariant weights from the outer constant, a note), or (the model
    itself, None) when no Loop carries one."""
    if not any(_invariants(node) for node in model.graph.all_nodes()):
        return model, None
    captured = model.clone()
    count = 0
    for node in list(captured.graph.all_nodes()):
        for outer, inner in _invariants(node):
            for use in list(inner.uses()):  # nodes only: the body's own output stays the carried value
                use.node.replace_input_with(use.idx, outer)
                count += 1
    return captured, (f"{count} read(s) of loop-invariant values (carried through a Loop unchanged from a constant) "
                      "read the constant itself: quantized as weights; verified against the model as given")
