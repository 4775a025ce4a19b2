"""The one quantize pass: every plan rewritten by the form it names (passes.forms.registry)."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from onnxq.handlers.plan import NodePlan
# Each module registers its form.
from onnxq.passes.forms import (blockwise, conv_integer, dynamic, dynamic_lstm, qattention, qdq,  # noqa: F401
                                qembed_layer_norm)
from onnxq.passes.graph.contract import PlannedRewritePass
from onnxq.config import QuantConfig
from onnxq.passes.forms.registry import REWRITE_FORMS, RewriteInputs, RewriteResult, plan_tensors

__all__ = ["QuantizePass", "needed_ranges"]


def needed_ranges(plans: Sequence[NodePlan], config: QuantConfig) -> list[str]:
    """What calibration must collect for these plans: the values quantized with calibrated scales under their
    rewrite forms (passes.forms.registry.plan_tensors), then the requantized outputs (NodePlan.output), each once, in plan
    order. Run-time forms (dynamic, per token) and weights need none."""
    inputs = (p.node.inputs[t.input].name for p in plans for t in plan_tensors(p, config)
              if t.scheme.source == "calibrated")
    outputs = (p.output.name for p in plans if p.output is not None and p.form in REWRITE_FORMS
               and REWRITE_FORMS[p.form].calibrated)
    return list(dict.fromkeys((*inputs, *outputs)))


class QuantizePass(PlannedRewritePass):
    """requires (besides PlannedRewritePass's): every plan's form registered, and a calibrated range for every
    activation a calibrated form quantizes. ensures: PlannedRewritePass's. Notes come back in the result."""

    def __init__(self, plans: Sequence[NodePlan], inputs: RewriteInputs) -> None:
        super().__init__(plans)
        self.inputs = inputs

    def requires(self, model: ir.Model) -> None:
        super().requires(model)
        for plan in self.plans:
            form = REWRITE_FORMS.get(plan.form)
            if form is None:
                raise ir.passes.PreconditionError(f"{plan.node.name!r}: no rewrite form {plan.form!r}")
            missing = [name for name in needed_ranges([plan], self.inputs.config) if name not in self.inputs.ranges]
            if missing:
                raise ir.passes.PreconditionError(f"{plan.node.name!r}: no calibrated range for {missing}")

    def call(self, model: ir.Model) -> RewriteResult:
        notes: dict[str, str] = {}
        for form in sorted(REWRITE_FORMS.values(), key=lambda f: f.stage):
            plans = [p for p in self.plans if p.form == form.name]
            if plans:
                notes.update(form.rewrite(model, plans, self.inputs))
        return RewriteResult(model, modified=bool(self.plans), notes=notes)
