"""Apply a set of plans with the pass of the mode: the one place both quantize() and fallback rewrite."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnxq.config import QuantConfig
from onnxq.handlers.plan import NodePlan
from onnxq.passes.insert_dynamic import InsertDynamicPass
from onnxq.passes.insert_qdq import InsertQdqPass

__all__ = ["apply_plans"]


def apply_plans(model: ir.Model, plans: Sequence[NodePlan], ranges: Mapping[str, tuple[float, float]],
                config: QuantConfig, mode: str) -> dict[str, str]:
    """Rewrite the model in place; returns the nodes whose int32 bias stayed float, with why."""
    if mode == "static":
        rewrite = InsertQdqPass(plans, ranges, config)
        rewrite(model)
        return rewrite.bias_fallbacks
    InsertDynamicPass(plans, config)(model)
    return {}
