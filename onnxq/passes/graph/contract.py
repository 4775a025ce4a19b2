"""What every onnxq pass promises (onnx_ir's requires / ensures, run by PassBase.__call__ around call()).

A broken promise is onnxq's bug, not the user's: onnx_ir raises PreconditionError / PostconditionError, which the
CLI reports as an internal error (exit 3).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from onnxq.handlers.plan import NodePlan

__all__ = ["KeepsOutputNames", "PlannedRewritePass"]


class KeepsOutputNames(ir.passes.InPlacePass):
    """requires: node names unique (io.naming makes them so at load). ensures: the graph's outputs keep their names
    and order (a user's pipeline reads them by name)."""

    def requires(self, model: ir.Model) -> None:
        names = [n.name for n in model.graph]
        if len(set(names)) != len(names):
            raise ir.passes.PreconditionError(f"{type(self).__name__}: node names are not unique")
        self._output_names = [o.name for o in model.graph.outputs]

    def ensures(self, model: ir.Model) -> None:
        if [o.name for o in model.graph.outputs] != self._output_names:
            raise ir.passes.PostconditionError(f"{type(self).__name__} renamed graph outputs")


class PlannedRewritePass(KeepsOutputNames):
    """A pass that applies plans. requires, besides: every planned node is in the main graph. ensures, besides: no
    planned node still in the graph reads its float weight."""

    def __init__(self, plans: Sequence[NodePlan]) -> None:
        super().__init__()
        self.plans = plans

    def requires(self, model: ir.Model) -> None:
        super().requires(model)
        outside = [p.node.name for p in self.plans if p.node.graph is not model.graph]
        if outside:
            raise ir.passes.PreconditionError(f"{type(self).__name__}: planned nodes not in the main graph: {outside}")
        self._float_weights = [(p.node, s.input_index, p.node.inputs[s.input_index])
                               for p in self.plans for s in p.weights]

    def ensures(self, model: ir.Model) -> None:
        super().ensures(model)
        still = [node.name for node, index, weight in self._float_weights
                 if node.graph is model.graph and node.inputs[index] is weight]
        if still:
            raise ir.passes.PostconditionError(f"{type(self).__name__}: planned nodes read float weights: {still}")
