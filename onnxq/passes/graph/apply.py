"""Apply a set of plans (the quantize pass: each plan by its form), then the output format's lowering, then the
compute precision (float16 for target cuda): the one place every build rewrites."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnxq.calibration.moments import WeightMoments
from onnxq.config import QuantConfig
from onnxq.config.formats import FORMATS
from onnxq.handlers.plan import NodePlan
from onnxq.passes.graph.bodies import body_as_model, drop_unread_initializers
from onnxq.passes.formats.clamps_as_max_min import clamps_as_max_min
from onnxq.passes.float16.compute import Float16Result, to_float16
from onnxq.passes.formats import qlinear, qoperator  # noqa: F401  (register formats qlinear, qoperator)
from onnxq.passes.forms.registry import RewriteInputs
from onnxq.passes.forms.quantize import QuantizePass
from onnxq.passes.formats.separate_matmul_add import separate_matmul_adds

__all__ = ["apply_plans", "Rewritten"]


@dataclasses.dataclass(frozen=True)
class Rewritten:
    bias_notes: dict[str, str]  # how a node's bias was kept where it is not plain int32: float (why), widened weights
    kept_qdq: dict[str, str]  # a lowering format: planned nodes left in QDQ form, with why
    separated_adds: tuple[str, ...] = ()  # QDQ MatMuls whose Add became Sum (passes.formats.separate_matmul_add)
    clamps_as_max_min: tuple[str, ...] = ()  # QDQ MatMuls / Gemms whose Relu / Clip became Max / Min
    # (passes.formats.clamps_as_max_min)
    float16: Float16Result | None = None  # compute float16: what became float16, what stayed float32 and why


def apply_plans(model: ir.Model, plans: Sequence[NodePlan], ranges: Mapping[str, tuple[float, float]],
                config: QuantConfig, mode: str, moments: WeightMoments | None = None,
                magnitudes: Mapping[str, float] | None = None) -> Rewritten:
    """Rewrite the model in place, then lower it when the format lowers this mode's models. Each subgraph's plans
    are applied to it as a model of its own (passes.graph.bodies) before the main graph's, so that the main graph's
    rewrite sees which float weights the bodies still read. magnitudes: max |x| per float value on the data, for
    float16 compute (calibration.magnitudes)."""
    notes: dict[str, str] = {}
    kept: dict[str, str] = {}
    by_graph: dict[int, list[NodePlan]] = {}
    for plan in plans:
        if plan.scope:
            by_graph.setdefault(id(plan.node.graph), []).append(plan)
    for body_plans in by_graph.values():
        with body_as_model(model, body_plans[0].node.graph) as body:
            _apply(body, body_plans, (ranges, config, mode, moments), notes, kept)
    if by_graph:
        drop_unread_initializers(model)
    _apply(model, [p for p in plans if not p.scope], (ranges, config, mode, moments), notes, kept)
    separated = tuple(separate_matmul_adds(plans))
    clamps = tuple(clamps_as_max_min(plans))
    # Last: the float arithmetic of everything quantization left float (and of MatMulNBits' activations).
    float16 = to_float16(model, magnitudes) if config.compute_dtype == "float16" else None
    return Rewritten(notes, kept, separated, clamps, float16)


def _apply(model: ir.Model, plans: Sequence[NodePlan], settings: tuple, notes: dict[str, str],
           kept: dict[str, str]) -> None:
    ranges, config, mode, moments = settings
    if plans:
        notes.update(QuantizePass(plans, RewriteInputs(ranges, config, moments))(model).notes)
    output_format = FORMATS[config.format]
    if output_format.lower is not None and mode in output_format.lowered_modes:
        kept.update(output_format.lower(model, plans))
