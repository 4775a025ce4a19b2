"""Apply a set of plans with the pass of the mode, then the format's lowering: the one place both quantize() and
fallback rewrite."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnxq.config import QuantConfig
from onnxq.handlers.plan import NodePlan
from onnxq.passes.insert_dynamic import InsertDynamicPass
from onnxq.passes.insert_qdq import InsertQdqPass
from onnxq.passes.lower_qoperator import LowerToQOperatorPass

__all__ = ["apply_plans", "Rewritten"]


@dataclasses.dataclass(frozen=True)
class Rewritten:
    bias_fallbacks: dict[str, str]  # nodes whose int32 bias stayed float, with why
    kept_qdq: dict[str, str]  # format qoperator: nodes left in QDQ form, with why


def apply_plans(model: ir.Model, plans: Sequence[NodePlan], ranges: Mapping[str, tuple[float, float]],
                config: QuantConfig, mode: str) -> Rewritten:
    """Rewrite the model in place. Dynamic models are operator form already (MatMulInteger): nothing to lower."""
    if mode != "static":
        InsertDynamicPass(plans, config)(model)
        return Rewritten({}, {})
    rewrite = InsertQdqPass(plans, ranges, config)
    rewrite(model)
    kept: dict[str, str] = {}
    if config.format == "qoperator":
        lowering = LowerToQOperatorPass()
        lowering(model)
        planned = {p.node.name for p in plans if not p.weight_only}
        kept = {name: reason for name, reason in lowering.declined.items() if name in planned}
    return Rewritten(rewrite.bias_fallbacks, kept)
