"""Apply a set of plans with the pass of the mode, then the format's lowering: the one place both quantize() and
fallback rewrite."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnxq.calibration.moments import WeightMoments
from onnxq.config import QuantConfig
from onnxq.handlers.plan import NodePlan
from onnxq.passes.insert_blockwise import InsertBlockwisePass
from onnxq.passes.insert_dynamic import InsertDynamicPass
from onnxq.passes.insert_qdq import InsertQdqPass
from onnxq.passes.lower_qoperator import LowerToQOperatorPass

__all__ = ["apply_plans", "insert_quantization", "Rewritten"]


@dataclasses.dataclass(frozen=True)
class Rewritten:
    bias_fallbacks: dict[str, str]  # nodes whose int32 bias stayed float, with why
    kept_qdq: dict[str, str]  # format qoperator: nodes left in QDQ form, with why


def apply_plans(model: ir.Model, plans: Sequence[NodePlan], ranges: Mapping[str, tuple[float, float]],
                config: QuantConfig, mode: str, moments: WeightMoments | None = None) -> Rewritten:
    """Rewrite the model in place. Dynamic and weight-only models are operator form already (MatMulInteger,
    MatMulNBits): nothing to lower."""
    rewrite = insert_quantization(model, plans, ranges, config, mode, moments)
    if rewrite is None:
        return Rewritten({}, {})
    kept: dict[str, str] = {}
    if config.format == "qoperator":
        lowering = LowerToQOperatorPass()
        lowering(model)
        planned = {p.node.name for p in plans if not p.weight_only}
        kept = {name: reason for name, reason in lowering.declined.items() if name in planned}
    return Rewritten(rewrite.bias_fallbacks, kept)


def insert_quantization(model: ir.Model, plans: Sequence[NodePlan], ranges: Mapping[str, tuple[float, float]],
                        config: QuantConfig, mode: str,
                        moments: WeightMoments | None = None) -> InsertQdqPass | None:
    """The rewrite proper, each plan by the pass of its kind: per-token plans (dynamic even in a static model) and
    a dynamic model's plans by InsertDynamicPass, the rest by InsertQdqPass (returned, for its bias notes); a
    weight-only model's (4- or 8-bit blocks) by InsertBlockwisePass, with the activations' second moments (method
    gptq, clip activation)."""
    if mode == "weight-only":
        InsertBlockwisePass(plans, config, moments)(model)
        return None
    dynamic = list(plans) if mode != "static" else [p for p in plans if p.per_token]
    if dynamic:
        InsertDynamicPass(dynamic, config)(model)
    if mode != "static":
        return None
    rewrite = InsertQdqPass([p for p in plans if not p.per_token], ranges, config)
    rewrite(model)
    return rewrite
