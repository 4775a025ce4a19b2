"""Apply a set of plans (the quantize pass: each plan by its form), then the output format's lowering: the one place
every build rewrites."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnxq.calibration.moments import WeightMoments
from onnxq.config import QuantConfig
from onnxq.config.formats import FORMATS
from onnxq.handlers.plan import NodePlan
from onnxq.passes import lower_qlinear, lower_qoperator  # noqa: F401  (register formats qlinear, qoperator)
from onnxq.passes.forms import RewriteInputs
from onnxq.passes.quantize import QuantizePass

__all__ = ["apply_plans", "Rewritten"]


@dataclasses.dataclass(frozen=True)
class Rewritten:
    bias_fallbacks: dict[str, str]  # nodes whose int32 bias stayed float, with why
    kept_qdq: dict[str, str]  # a lowering format: planned nodes left in QDQ form, with why


def apply_plans(model: ir.Model, plans: Sequence[NodePlan], ranges: Mapping[str, tuple[float, float]],
                config: QuantConfig, mode: str, moments: WeightMoments | None = None) -> Rewritten:
    """Rewrite the model in place, then lower it when the format lowers this mode's models."""
    notes = QuantizePass(plans, RewriteInputs(ranges, config, moments))(model).notes
    output_format = FORMATS[config.format]
    lowers = output_format.lower is not None and mode in output_format.lowered_modes
    kept = dict(output_format.lower(model, plans)) if lowers else {}
    return Rewritten(notes, kept)
