"""The steps of quantize() that need calibration data twice: SmoothQuant on the float graph (statistics, then
ranges) and the candidates of recipe auto."""

from __future__ import annotations

import onnx_ir as ir

from onnxq.smoothing.awq import BlockForm, awq_groups, choose_awq
from onnxq.calibration.channels import collect_channel_stats
from onnxq.data.stream import DataStream, check_reusable
from onnxq.calibration.summary import CalibrationSummary
from onnxq.config import QuantConfig
from onnxq.errors import CalibrationDataError, ConfigError
from onnxq.handlers import NodePlan, plan_model
from onnxq.io.memory import trim_heap
from onnxq.passes.smoothing.graph import NOT_ABSORBED, SmoothPass, StoredRows
from onnxq.report.record import SmoothedActivation
from onnxq.search.recipe import RecipeGroup
from onnxq.smoothing.choice import choose_smoothing, smoothable_groups, static_error

__all__ = ["check_recipe", "recipe_groups", "smooth_model"]


def check_recipe(config: QuantConfig, mode: str, calibration) -> None:
    check_reusable(calibration, "recipe auto")
    if mode != "static" or not config.verify.enabled:
        raise ConfigError("recipe auto chooses by verifying against the tolerance from a static model: it needs "
                          "--mode static or auto and verification on")


def _channel_stats(model: ir.Model, candidates, stream: DataStream):
    """Per-channel statistics of the candidates' activations over the calibration data, less the samples held
    back for verification (the same samples calibration proper sees)."""
    return collect_channel_stats(model, {c.activation.name: c.channel_axis for c in candidates}, stream.batches())


def _alpha(config: QuantConfig) -> float | None:
    return None if isinstance(config.smooth, str) else float(config.smooth)


def recipe_groups(reference: ir.Model, config: QuantConfig, mode: str, ranges,
                  stream: DataStream) -> list[RecipeGroup]:
    """The smoothable activations of the all-static plan, with their per-token α and what switching gains (MatMul
    / Gemm only: a Conv's activation has no per-token form)."""
    plans, _ = plan_model(reference.graph, config, mode)
    candidates = [c for c in smoothable_groups(plans) if c.channel_axis == -1]
    stats = _channel_stats(reference, candidates, stream)
    groups, choices = choose_smoothing(candidates, stats, _alpha(config), per_token=True)
    scales = {g.activation.name: g.scales for g in groups}
    return [RecipeGroup(c.activation.name, tuple(p.node.name for p in c.plans), choice.alpha,
                        scales.get(c.activation.name),
                        static_error(c, stats, ranges[c.activation.name]) - min(choice.errors.values()))
            for c, choice in zip(candidates, choices)]


def smooth_model(work: ir.Model, plans: list[NodePlan], config: QuantConfig, stream: DataStream,
                 cached: CalibrationSummary | None,
                 stored_rows: StoredRows | None = None) -> tuple[SmoothedActivation, ...]:
    """SmoothQuant on the float graph `work` (in place) — AWQ's activation-aware scales for weight-only blocks —
    from the per-channel statistics of a calibration cache (of the float model) or, without one, of the
    calibration data. stored_rows: where each scaled weight goes as it is made (passes.smoothing.graph.SmoothPass)."""
    candidates = awq_groups(plans, work) if config.weight_only else smoothable_groups(plans)
    if cached is not None:
        missing = [c.activation.name for c in candidates if c.activation.name not in cached.channels]
        if missing:
            raise CalibrationDataError(f"the calibration cache has no smoothing statistics for '{missing[0]}' — "
                                       "write it with smoothing on (python -m onnxq calibrate --smooth auto)")
        stats = {c.activation.name: cached.channels[c.activation.name] for c in candidates}
    else:
        check_reusable(stream.source, "smoothing")
        stats = _channel_stats(work, candidates, stream)
        trim_heap()  # the statistics' sessions are gone: what they freed goes back before the weights are read
    if config.weight_only:
        blocks = config.blocks
        form = BlockForm(blocks.size, config.weights.bits, config.weights.symmetric, blocks.accuracy_level == 4)
        groups, choices = choose_awq(candidates, stats, _alpha(config), form)
    else:
        groups, choices = choose_smoothing(candidates, stats, _alpha(config))
    trim_heap()  # the search's products and quantized copies, freed
    absorbed = SmoothPass(groups, insert_mul=not config.weight_only, stored_rows=stored_rows)(work).absorbed
    return tuple(SmoothedActivation(c.activation, None if absorbed.get(c.activation) == NOT_ABSORBED else c.alpha,
                                    absorbed.get(c.activation), c.errors) for c in choices)
