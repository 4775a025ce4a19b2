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
from onnxq.handlers.plan import NodePlan

__all__ = ["RewriteInputs", "RewriteResult", "RewriteForm", "REWRITE_FORMS", "rewrite_form"]


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


REWRITE_FORMS: dict[str, RewriteForm] = {}


def rewrite_form(name: str, *, stage: int, calibrated: bool = False) -> Callable[[FormRewriter], FormRewriter]:
    def register(rewrite: FormRewriter) -> FormRewriter:
        if name in REWRITE_FORMS:
            raise ValueError(f"a rewrite form named {name!r} is already registered")
        REWRITE_FORMS[name] = RewriteForm(name, rewrite, stage, calibrated)
        return rewrite

    return register
