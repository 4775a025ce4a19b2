"""Run the registered handlers over a graph: one plan or one reasoned skip per candidate node."""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from onnxq.config import QuantConfig
from onnxq.config.formats import FORMATS
from onnxq.handlers.plan import NodePlan, PlanContext, Skip, default_form
from onnxq.handlers.registry import handler_for
from onnxq.irquery import bodies
from onnxq.targets import needs_pair_limit

__all__ = ["plan_model", "BODY_MODES"]


# The mode a subgraph's nodes take in a run of each mode. Calibration observes the main graph's values only (ORT
# returns no value of a body), so a static run quantizes bodies' activations at run time.
BODY_MODES = {"static": "dynamic", "dynamic": "dynamic", "weight-only": "weight-only"}


def plan_model(graph: ir.Graph, config: QuantConfig, mode: str) -> tuple[list[NodePlan], list[Skip]]:
    """Plans in graph order for the nodes of config.op_types (nodes of other op types are not candidates), then
    each subgraph's (If branches, Loop and Scan bodies, at any depth) in BODY_MODES[mode], their plans' scope
    saying where they are."""
    plans, skips = _plan_graph(graph, config, mode, "")
    body_mode = BODY_MODES[mode]
    why = "" if body_mode == mode else f"{body_mode} inside subgraphs (calibration observes the main graph only): "
    for body in bodies(graph):
        body_plans, body_skips = _plan_graph(body.graph, config, body_mode, body.where)
        plans += body_plans
        skips += [Skip(s.node, f"{why}{s.reason} (inside {body.where})") for s in body_skips]
    return plans, skips


def _plan_graph(graph: ir.Graph, config: QuantConfig, mode: str, scope: str) -> tuple[list[NodePlan], list[Skip]]:
    """One graph's own nodes (not its subgraphs')."""
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
    )
    plans: list[NodePlan] = []
    skips: list[Skip] = []
    per_token_ctx = dataclasses.replace(ctx, per_token=True)
    per_token_nodes = set(config.per_token_nodes)
    for node in graph:
        if node.op_type not in config.op_types:
            continue
        handler = handler_for(node)
        if handler is None:
            continue
        reason = config.exclusion_reason(node.name or "", node.op_type)
        result = handler(node, per_token_ctx if node.name in per_token_nodes else ctx)
        if result is None:
            continue
        if reason is not None:
            result = Skip(node, reason)
        if isinstance(result, NodePlan):
            plans.append(dataclasses.replace(result, form=result.form or default_form(mode, result), scope=scope))
        else:
            skips.append(result)
    return plans, skips
