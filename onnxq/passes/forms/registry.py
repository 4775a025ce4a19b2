"""Rewrite forms by name: how the plans of one form become quantized nodes.

A planner names each plan's form (handlers.plan.NodePlan.form); QuantizePass hands every form its plans. A form
rewrites all its plans at once because consumers share work (one activation quantized once for q, k and v; one
weight block-quantized once for every reader). A new form is one module that registers itself here and is imported
by passes/quantize.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import onnx_ir as ir

from onnxq.calibration.moments import WeightMoments
from onnxq.config import QuantConfig
from onnxq.handlers.plan import NodePlan, WeightSpec
from onnxq.handlers.scheme import PerAxis, PerBlock, PerTensor, PerToken, Scheme, TensorQuant

__all__ = ["RewriteInputs", "RewriteResult", "RewriteForm", "REWRITE_FORMS", "rewrite_form", "plan_tensors"]


@dataclasses.dataclass(frozen=True)
class RewriteInputs:
    """What a rewrite reads besides the model: calibrated ranges by value name, the config, and (weight-only with
    activation-aware methods) the activations' second moments per weight."""

    ranges: Mapping[str, tuple[float, float]]
    config: QuantConfig
    moments: WeightMoments | None = None


@dataclasses.dataclass
class RewriteResult(ir.passes.PassResult):
    # Node name → why part of its plan stayed float (an int32 bias that would overflow), or how it was kept.
    notes: dict[str, str] = dataclasses.field(default_factory=dict)


# Rewrites the plans of its form in place; returns notes by node name.
FormRewriter = Callable[[ir.Model, Sequence[NodePlan], RewriteInputs], Mapping[str, str]]


@dataclasses.dataclass(frozen=True)
class RewriteForm:
    name: str
    rewrite: FormRewriter
    # Forms apply in stage order, then registration order (run-time forms first, as before the registry).
    stage: int
    # Whether its plans' activations need calibrated ranges (QuantizePass.requires checks them).
    calibrated: bool
    # Whether it stores weights in blocks along K (weight-only) rather than per channel or per tensor.
    blocked: bool = False


REWRITE_FORMS: dict[str, RewriteForm] = {}


def rewrite_form(name: str, *, stage: int, calibrated: bool = False,
                 blocked: bool = False) -> Callable[[FormRewriter], FormRewriter]:
    def register(rewrite: FormRewriter) -> FormRewriter:
        if name in REWRITE_FORMS:
            raise ValueError(f"a rewrite form named {name!r} is already registered")
        REWRITE_FORMS[name] = RewriteForm(name, rewrite, stage, calibrated, blocked)
        return rewrite

    return register


def plan_tensors(plan: NodePlan, config: QuantConfig) -> tuple[TensorQuant, ...]:
    """How each quantized input of the plan is quantized under its form and the config: activations first, then
    weights. A plan whose form is not registered has none (QuantizePass.requires refuses it)."""
    form = REWRITE_FORMS.get(plan.form)
    if form is None:
        return ()
    return (tuple(TensorQuant(i, _activation_scheme(plan, form, config)) for i in plan.activations)
            + tuple(TensorQuant(w.input_index, _weight_scheme(plan, w, form, config), w.pair_limit_axis)
                    for w in plan.weights))


def _activation_scheme(plan: NodePlan, form: RewriteForm, config: QuantConfig) -> Scheme:
    if plan.per_token:  # symmetric int8 per row, stored as uint8 + 128 (numerics.per_token)
        return Scheme("uint8", True, PerToken(), "runtime")
    if form.calibrated:
        return Scheme(config.activations.dtype, config.activations.symmetric, PerTensor(), "calibrated")
    return Scheme("uint8", False, PerTensor(), "runtime")  # DynamicQuantizeLinear


def _weight_scheme(plan: NodePlan, spec: WeightSpec, form: RewriteForm, config: QuantConfig) -> Scheme:
    weights = config.weights
    if form.blocked:  # blocks along the axis that is not the output features' (K; a table's row width)
        if plan.node.name in config.blocks.int8_nodes:  # the 8-bit tier: symmetric (passes.forms.blockwise)
            return Scheme("int8", True, PerBlock(1 - spec.axis, config.blocks.size), "constant")
        return Scheme(weights.dtype, weights.symmetric, PerBlock(1 - spec.axis, config.blocks.size), "constant")
    granularity = PerTensor() if spec.axis is None else PerAxis(spec.axis)
    return Scheme(weights.dtype, weights.symmetric, granularity, "constant")
