"""Run the registered handlers over a graph: one plan or one reasoned skip per candidate node."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

import onnx_ir as ir

from onnxq.config import QuantConfig
from onnxq.config.formats import FORMATS
from onnxq.handlers.plan import NodePlan, PlanContext, Skip, default_form
from onnxq.handlers.registry import handler_for
from onnxq.handlers.unplanned import unplanned_weights
from onnxq.io.memory import page_out
from onnxq.io.irquery import bodies
from onnxq.targets import int8_activations_refusal, needs_pair_limit

__all__ = ["plan_model", "replan_dynamic"]


def plan_model(graph: ir.Graph, config: QuantConfig, mode: str) -> tuple[list[NodePlan], list[Skip]]:
    """Plans in graph order for the nodes of config.op_types (nodes of other op types are not candidates), then
    each subgraph's (If branches, Loop and Scan bodies, at any depth), their plans' scope saying where they are.
    Calibration observes a body's values through its outputs (calibration.bodies), so bodies take the run's mode.
    A node holding weights that no planner decided on is a skip too, with why (handlers.unplanned)."""
    plans, skips = _plan_nodes(graph, config, mode, "")
    skips += unplanned_weights(graph, {*(p.node for p in plans), *(s.node for s in skips)}, config.op_types)
    for body in bodies(graph):
        body_plans, body_skips = _plan_nodes(body.graph, config, mode, body.where)
        body_skips += unplanned_weights(body.graph, {*(p.node for p in body_plans), *(s.node for s in body_skips)},
                                        config.op_types)
        plans += body_plans
        skips += [Skip(s.node, f"{s.reason} (inside {body.where})") for s in body_skips]
    return plans, skips


def replan_dynamic(plans: list[NodePlan], skips: list[Skip], config: QuantConfig, nodes: Collection[ir.Node],
                   why: str) -> tuple[list[NodePlan], list[Skip]]:
    """The plans of `nodes` planned again in dynamic mode, saying why (a static run's subgraph node whose activation
    the calibration data never computed: a branch not taken, a loop that ran no iteration); one that dynamic mode
    leaves float becomes a skip."""
    replanned, skipped = [], list(skips)
    for plan in plans:
        if plan.node not in nodes:
            replanned.append(plan)
            continue
        again, left = _plan_nodes([plan.node], config, "dynamic", plan.scope)
        replanned += [dataclasses.replace(p, form_note=f"dynamic: {why}") for p in again]
        skipped += [Skip(s.node, f"{why}, and dynamically: {s.reason} (inside {plan.scope})") for s in left]
    return replanned, skipped


def _plan_nodes(nodes: Iterable[ir.Node], config: QuantConfig, mode: str,
                scope: str) -> tuple[list[NodePlan], list[Skip]]:
    """One graph's own nodes (not its subgraphs'), or the nodes given."""
    ctx = PlanContext(
        per_channel=config.per_channel,
        mode=mode,
        quantize_activation_matmul=config.quantize_activation_matmul,
        gemm_bias=config.gemm_bias,
        limit_pairs=needs_pair_limit(config.target, config.activations.dtype, config.weights.dtype),
        per_token=config.activation_granularity == "per-token",
        fold_relu=not config.activations.symmetric,
        dynamic_conv=config.dynamic_conv,
        requantize_products=mode == "static" and FORMATS[config.format].requantize_products,
        standard_ops_only=FORMATS[config.format].standard_ops_only,
        limit_runtime_pairs=needs_pair_limit(config.target, "uint8", config.weights.dtype),
        no_int8_activations=int8_activations_refusal(config.target),
    )
    plans: list[NodePlan] = []
    skips: list[Skip] = []
    per_token_ctx = dataclasses.replace(ctx, per_token=True)
    per_token_nodes = set(config.per_token_nodes)
    for node in nodes:
        if node.op_type not in config.op_types:
            continue
        handler = handler_for(node)
        if handler is None:
            continue
        reason = config.exclusion_reason(node.name or "", node.op_type)
        result = handler(node, per_token_ctx if node.name in per_token_nodes else ctx)
        for value in node.inputs:  # a planner reads the weights once: their memory-mapped pages need not stay
            if value is not None and value.const_value is not None:
                page_out(value.const_value)
        if result is None:
            continue
        if reason is not None:
            result = Skip(node, reason)
        if isinstance(result, NodePlan):
            plans.append(dataclasses.replace(result, form=result.form or default_form(mode, result), scope=scope))
        else:
            skips.append(result)
    return plans, skips
