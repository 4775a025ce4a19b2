"""quantize(): load → check → plan → calibrate → rewrite → verify (+ sensitivity, fallback) → save, driven by one
QuantConfig."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import onnx
import onnx_ir as ir

from onnxq.calibration import (Batches, CalibrationSummary, DataSource, Holdout, first_samples, fixed_batch_size,
                               input_specs, validated_batches)
from onnxq.calibration.data import declare_data_files, reread_batches
from onnxq.calibration.moments import WeightKey, WeightMoments, weight_key
from onnxq.config import QuantConfig
from onnxq.errors import CalibrationDataError, ConfigError, UnsupportedModelError
from onnxq.fallback import fall_back
from onnxq.handlers import NodePlan, Skip, plan_model
from onnxq.io import (LOAD_NOTES, external_data_files, load_model, model_size_bytes, page_out, run_files,
                      save_model, trim_heap)
from onnxq.io.outputs import active_run
from onnxq.passes import check_model
from onnxq.passes.apply import apply_plans
from onnxq.passes.builder import shared_weight_quantization
from onnxq.recipe import choose_recipe
from onnxq.report import NodeEntry, QuantReport, SmoothedActivation
from onnxq.sensitivity import layer_sensitivity
from onnxq.ranges import calibrated_ranges, smoothed_ranges, smoothing_cache
from onnxq.smoothing_steps import check_recipe, check_reusable, recipe_groups, smooth_model
from onnxq.targets import integer_types_reason
from onnxq.verify import (Reference, quantized_nodes, resolve_providers, synthetic_batches, verify_models,
                          with_placement)
from onnxq.verify.outcome import check_output_tolerances
from onnxq.verify.speed import check_speed

__all__ = ["quantize", "QuantResult", "default_output_path"]

logger = logging.getLogger(__name__)

ModelInput = str | os.PathLike | onnx.ModelProto | ir.Model


@dataclasses.dataclass
class QuantResult:
    model: ir.Model
    output: Path | None
    report: QuantReport


def default_output_path(model_path: str | os.PathLike) -> Path:
    path = Path(model_path)
    return path.with_name(f"{path.stem}.int8.onnx")


def quantize(
    model: ModelInput,
    calibration: DataSource | None = None,
    *,
    output: str | os.PathLike | None = None,
    config: QuantConfig | None = None,
    verify_data: DataSource | None = None,
    calibration_cache: str | os.PathLike | CalibrationSummary | None = None,
    progress: Callable[[int], None] | None = None,
) -> QuantResult:
    """Quantize a float model to int8 and verify it against the float model on every ONNX Runtime provider present.

    model: a path, an onnx.ModelProto or an onnx_ir.Model (the caller's object is never modified).
    calibration: .npz path, folder of .npz, dict of arrays (first axis = samples) or iterable of such dicts.
        Given: static quantization. Absent: dynamic activation quantization (see QuantConfig.mode).
    output: where to write the model (atomically); None keeps it in memory only.
    verify_data: held-out inputs for verification; without it, every 10th calibration sample is held back.
    calibration_cache: a CalibrationSummary, or a path: read when the file exists (no calibration pass; it must
        be this model's), else written after calibrating, with histograms, for every candidate activation.
    progress: called with the number of samples after each calibration batch.
    """
    with shared_weight_quantization(), run_files():  # every output written together at the end, or none
        return _quantize(model, calibration, output, config, verify_data, calibration_cache, progress)


def _quantize(model: ModelInput, calibration: DataSource | None, output: str | os.PathLike | None,
              config: QuantConfig | None, verify_data: DataSource | None,
              calibration_cache: str | os.PathLike | CalibrationSummary | None,
              progress: Callable[[int], None] | None) -> QuantResult:
    config = config or QuantConfig()
    timings: dict[str, float] = {}
    start = time.perf_counter()
    reference = load_model(model)
    input_path = Path(model) if isinstance(model, (str, os.PathLike)) else None
    check_model(reference)
    check_output_tolerances(config.verify, [o.name for o in reference.graph.outputs])
    densified = reference.meta[LOAD_NOTES]["densified"]
    input_files = [input_path, *external_data_files(reference)] if input_path is not None else []
    # Unusable output paths stop the run now, not after calibrating.
    _declare_files(input_files, calibration, verify_data, calibration_cache, output)
    work = reference.clone()
    mode = _resolve_mode(config, calibration, calibration_cache)
    if mode == "weight-only":
        config = _resolve_block_method(config, calibration)
    plans, skips = plan_model(work.graph, config, mode)
    if not plans:
        raise UnsupportedModelError(_nothing_to_quantize(skips, config))
    specs = input_specs(work)
    notes: list[str] = [f"{len(densified)} sparse initializer(s) made dense to be quantized ({', '.join(densified[:3])}"
                        f"{', …' if len(densified) > 3 else ''})"] if densified else []
    # Read and check given verification data before anything is written: bad input must leave no files behind.
    verification_inputs = _upfront_verification_inputs(reference, config, mode, specs, calibration, verify_data,
                                                        notes)
    timings["load_and_plan"] = time.perf_counter() - start

    holdout = Holdout(config.verify.holdout_every, config.verify.max_samples, fixed_batch_size(specs))
    smoothing: tuple[SmoothedActivation, ...] = ()
    quantized_from = reference  # the float graph the quantization starts from (smoothed, when asked)
    smoothed = config.recipe == "manual" and config.smooth != "off"
    if config.recipe == "auto":
        check_recipe(config, mode, calibration)
    elif smoothed:
        start = time.perf_counter()
        cached = smoothing_cache(reference, work, config, specs, calibration, verify_data, calibration_cache, notes)
        smoothing = smooth_model(work, plans, config, specs, calibration, verify_data, cached)
        quantized_from = work.clone()
        timings["smooth"] = time.perf_counter() - start

    ranges: dict[str, tuple[float, float]] = {}
    calibration_samples = 0
    # Weight-only: per weight, XᵀX / n of its activations (GPTQ) or its diagonal (clip = activation).
    moments = None
    if mode == "weight-only" and (config.blocks.method == "gptq" or config.blocks.clip == "activation"):
        start = time.perf_counter()
        moments = _second_moments(work, plans, config, specs, calibration, verify_data, holdout)
        timings["calibrate"] = time.perf_counter() - start
    if mode == "static":
        start = time.perf_counter()
        if smoothed:  # ranges of the smoothed graph; a cache holds the float model's
            ranges, calibration_samples = smoothed_ranges(work, plans, config, specs, calibration, verify_data,
                                                          holdout, progress)
        else:
            ranges, calibration_samples = calibrated_ranges(reference, work, plans, config, specs, calibration,
                                                            verify_data, calibration_cache, holdout, progress,
                                                            notes)
        timings["calibrate"] = time.perf_counter() - start
    page_out(reference)  # the rewrite reads each float weight once
    start = time.perf_counter()
    rewritten = apply_plans(work, plans, ranges, config, mode, moments)
    bias_fallbacks = rewritten.bias_fallbacks
    for name, reason in rewritten.kept_qdq.items():
        notes.append(f"format qoperator: {name} kept in QDQ form ({reason})")
    timings["rewrite"] = time.perf_counter() - start

    verification = sensitivity = fallback = recipe = None
    eight_bit = set(config.blocks.int8_nodes)  # 4-bit weights: the nodes at 8 bits (by config or fallback)
    gate_failures: list[str] = []
    if config.verify.enabled:
        start = time.perf_counter()
        batches, label = verification_inputs or _held_out_inputs(reference, config, specs, holdout, notes)
        ref = Reference(reference, batches)  # shares the float weights' memory map with every other session
        placement = quantized_nodes(work) if config.verify.check_kernels else None
        verification = verify_models(ref, work, config.verify, label, placement, config.target)
        timings["verify"] = time.perf_counter() - start
        if config.recipe == "auto" and not verification.passed:
            start = time.perf_counter()
            groups = recipe_groups(reference, config, mode, ranges, specs, calibration, verify_data)
            recipe, chosen = choose_recipe(reference, config, mode, ranges, groups,
                                           lambda m: verify_models(ref, m, config.verify, label, target=config.target))
            if chosen is not None:  # None: no activation group can go per token
                config, quantized_from = chosen.config, chosen.float_model
                work, plans, skips, bias_fallbacks = chosen.model, chosen.plans, chosen.skips, chosen.bias_fallbacks
                verification = chosen.verification
                if config.verify.check_kernels:
                    verification = with_placement(verification, work, batches.first(), quantized_nodes(work))
                switched = set(recipe.per_token)
                smoothing = tuple(SmoothedActivation(g.activation, g.alpha, chosen.absorbed.get(g.activation), {})
                                  for g in groups if g.activation in switched)
            notes.append(f"recipe auto: {len(recipe.per_token)} of {recipe.candidates} activation group(s) per token "
                         f"+ smoothing, the rest static per tensor ({recipe.probes} probes)"
                         + ("" if recipe.met else "; the tolerance is not met even so"))
            timings["recipe"] = time.perf_counter() - start
        elif config.recipe == "auto":
            notes.append("recipe auto: the all-static model meets the tolerance; nothing per token")
        trim_heap()  # the verification sessions' buffers are free: do not count them under the next phase
        wants_fallback = config.verify.fallback and not verification.passed
        if config.verify.sensitivity_samples or wants_fallback:
            start = time.perf_counter()
            samples = first_samples(batches, config.verify.sensitivity_samples or 16, fixed_batch_size(specs))
            per_node = wants_fallback or len(plans) <= config.verify.sensitivity_max_nodes
            if not per_node:
                notes.append(f"sensitivity: {len(plans)} quantized nodes > verify.sensitivity_max_nodes "
                             f"({config.verify.sensitivity_max_nodes}): groups ranked, not single nodes")
            sensitivity = layer_sensitivity(quantized_from, plans, ranges, config, mode, samples, per_node,
                                            moments)
            if sensitivity.nonfinite():
                gate_failures.append(f"sensitivity: quantizing {', '.join(sensitivity.nonfinite()[:3])} alone makes "
                                     "an output NaN or inf — keep it float (--exclude NAME) or check the data")
            timings["sensitivity"] = time.perf_counter() - start
        if wants_fallback:
            start = time.perf_counter()
            fallback, chosen = fall_back(quantized_from, config, mode, ranges, sensitivity, verification,
                                         lambda m: verify_models(ref, m, config.verify, label, target=config.target),
                                         moments)
            if chosen is not None:
                work, plans, skips, bias_fallbacks = chosen.model, chosen.plans, chosen.skips, chosen.bias_fallbacks
                verification = chosen.verification  # checked during the search; only its placement is new
                if config.verify.check_kernels:
                    verification = with_placement(verification, work, batches.first(), quantized_nodes(work))
                notes.append(f"fallback: {_fallback_summary(chosen.excluded, chosen.eight_bit)} to meet the "
                             "tolerance")
                eight_bit = eight_bit | set(chosen.eight_bit)
            else:
                notes.append("fallback: the tolerance cannot be met even with all but one node float")
            timings["fallback"] = time.perf_counter() - start

    speed = ()
    if config.verify.enabled and config.verify.check_speed:
        start = time.perf_counter()
        page_out(reference)
        speed = check_speed(input_path or reference, work, batches.first(),
                            resolve_providers(config.verify.providers)[0])
        for check in speed:
            if not check.faster:
                notes.append(f"SPEED: the quantized model is not faster than float on {check.provider} "
                             f"({check.quantized_ms:.1f} ms vs {check.float_ms:.1f} ms) — see README, Targets")
        timings["check_speed"] = time.perf_counter() - start

    saved, written = None, []
    if output is not None:
        start = time.perf_counter()
        page_out(reference)  # the float weights are not needed to save the quantized model
        written = save_model(work, output)
        saved = written[0]
        timings["save"] = time.perf_counter() - start

    report = QuantReport(
        input=str(input_path) if input_path else "(in-memory model)",
        output=str(saved) if saved else None,
        mode=mode,
        config=config.to_dict(),
        quantized=tuple(_entry(p, mode, config, bias_fallbacks, eight_bit) for p in plans),
        left_float=tuple(NodeEntry(s.node.name or "", s.node.op_type, s.reason) for s in skips),
        ranges=ranges,
        calibration_samples=calibration_samples,
        float_bytes=_total_bytes(input_files) if input_files else model_size_bytes(reference),
        quant_bytes=active_run().staged_bytes(written) if written else model_size_bytes(work),
        seconds=timings,
        verification=verification,
        sensitivity=sensitivity,
        fallback=fallback,
        notes=tuple(notes),
        speed=speed,
        smoothing=smoothing,
        recipe=recipe,
        renamed_nodes=reference.meta[LOAD_NOTES]["renamed_nodes"],
        gate_failures=tuple(gate_failures),
    )
    return QuantResult(model=work, output=saved, report=report)


def _declare_files(input_files: list[Path], calibration: DataSource | None, verify_data: DataSource | None,
                   cache: str | os.PathLike | CalibrationSummary | None, output: str | os.PathLike | None) -> None:
    """What the run reads and writes, each output checked against every input and every other output (io.outputs)."""
    files = active_run()
    for i, path in enumerate(input_files):
        files.add_input(path, "the input model" if i == 0 else "the input model's external data")
    declare_data_files(files, calibration, "the calibration data")
    declare_data_files(files, verify_data, "the verification data")
    if cache is not None and not isinstance(cache, CalibrationSummary):
        if os.path.lexists(cache):  # read, never rewritten
            files.read(cache, "the calibration cache", CalibrationDataError)
        else:
            files.claim(cache, "calibration cache")
    if output is not None:
        output = Path(output)
        files.claim(output, "output", also=[output.with_name(output.name + ".data")])


def _resolve_mode(config: QuantConfig, calibration: DataSource | None, cache) -> str:
    if config.weight_only:
        return "weight-only"
    has_ranges = calibration is not None or isinstance(cache, CalibrationSummary) or (
        cache is not None and Path(cache).is_file())
    if config.mode == "auto":
        return "static" if has_ranges else "dynamic"
    if config.mode == "static" and not has_ranges:
        raise ConfigError("static mode needs calibration data — pass --calib DATA (or an existing --calib-cache), "
                          "or use --mode dynamic")
    return config.mode


def _resolve_block_method(config: QuantConfig, calibration: DataSource | None) -> QuantConfig:
    blocks = config.blocks
    if blocks.method == "auto":
        blocks = dataclasses.replace(blocks, method="gptq" if calibration is not None else "rtn")
    needs = "blocks.method = gptq" if blocks.method == "gptq" else (
        "blocks.clip = activation" if blocks.clip == "activation" else None)
    if needs and calibration is None:
        raise ConfigError(f"{needs} fits the weights to their activations, so it needs calibration data: pass "
                          "--calib DATA, or use blocks.method = rtn with blocks.clip = mse")
    return config.replace(blocks=blocks)


def _second_moments(work: ir.Model, plans: list[NodePlan], config: QuantConfig, specs, calibration, verify_data,
                    holdout: Holdout) -> WeightMoments:
    """Per weight, the second moments of every activation reading it, computed now (the first pass also fills the
    holdout); a model whose matrices exceed the budget needs a pass per chunk, so its data must be re-readable."""
    holdouts = iter([holdout])  # the first pass fills the run's holdout; later passes skip the same samples

    def batches():
        stream = validated_batches(calibration, specs, config.calibration.batch_size, config.calibration.max_samples)
        if verify_data is None and config.verify.enabled:
            split = next(holdouts, None) or Holdout(holdout.every, holdout.max_samples, holdout.fixed)
            stream = split.split(stream)
        return stream

    readers: dict[WeightKey, dict[str, None]] = {}  # ordered sets
    for plan in plans:
        if plan.node.op_type != "Gather":
            readers.setdefault(weight_key(plan.node), {})[plan.node.inputs[0].name] = None
    moments = WeightMoments(work.clone(), {k: list(v) for k, v in readers.items()}, batches,
                            full=config.blocks.method == "gptq")
    if moments.chunks > 1:
        check_reusable(calibration, f"GPTQ over {moments.chunks} chunks of weights (their matrices exceed "
                                    f"{moments.budget >> 20} MiB at once)")
    moments.prefetch()
    return moments


def _nothing_to_quantize(skips: list[Skip], config: QuantConfig) -> str:
    if not skips:
        return (f"nothing to quantize: the model has no {'/'.join(config.op_types)} node with a constant float32 "
                "weight — onnxq quantizes MatMul, Gemm and Gather on constant weights")
    first = skips[0]
    return (f"nothing to quantize: all {len(skips)} candidate node(s) stay float (e.g. {first.node.name}: "
            f"{first.reason}) — check the exclude options")


def _total_bytes(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def _upfront_verification_inputs(reference: ir.Model, config: QuantConfig, mode: str, specs, calibration,
                                 verify_data, notes: list[str]) -> tuple[Batches, str] | None:
    """Verification batches known before calibrating; None when they come from the calibration stream."""
    size = config.calibration.batch_size
    if not config.verify.enabled:
        return None
    if verify_data is not None:  # read again by each pass, a batch at a time; its first batch checked now
        return reread_batches(verify_data, specs, size), "verification data"
    if calibration is not None and (mode == "static" or mode == "weight-only" and (
            config.blocks.method == "gptq" or config.blocks.clip == "activation")):
        return None  # held back from the calibration data as it streams
    if calibration is not None:  # dynamic mode with data: verify on (the start of) it
        return reread_batches(calibration, specs, size, config.verify.max_samples), "the given data"
    return _synthetic_inputs(reference, specs, notes)


def _held_out_inputs(reference: ir.Model, config: QuantConfig, specs, holdout: Holdout,
                     notes: list[str]) -> tuple[Batches, str]:
    held, first = holdout.verification_batches(), holdout.first_batches()
    if held:
        return Batches.held(held), f"held-out calibration samples (every {config.verify.holdout_every}th)"
    if first:
        notes.append("too few samples to hold any back: verified on calibration data, which flatters the result")
        return Batches.held(first), "calibration samples"
    return _synthetic_inputs(reference, specs, notes)


def _synthetic_inputs(reference: ir.Model, specs, notes: list[str]) -> tuple[Batches, str]:
    notes.append("no data given: verified on synthetic random inputs, a smoke test only — pass --verify-data "
                 "with real inputs for meaningful figures")
    return Batches.held(synthetic_batches(reference, specs)), "synthetic inputs"


def _fallback_summary(floats: tuple[str, ...], eight_bit: tuple[str, ...]) -> str:
    parts = [f"{len(eight_bit)} sensitive node(s) at 8 bits"] if eight_bit else []
    if floats or not eight_bit:
        parts.append(f"{len(floats)} most sensitive node(s) kept float")
    return " and ".join(parts)


def _entry(plan: NodePlan, mode: str, config: QuantConfig, bias_fallbacks: dict[str, str],
           eight_bit: set[str]) -> NodeEntry:
    node = plan.node
    parts = []
    for spec in plan.weights:
        if mode == "weight-only":
            blocks = config.blocks
            dtype = config.weights.dtype
            if node.name in eight_bit:
                dtype = dtype.replace("4", "8")  # int4 → int8, uint4 → uint8
            if node.op_type != "Gather":
                kernel = "MatMulNBits" if blocks.format == "matmulnbits" else "DequantizeLinear block_size → MatMul"
                parts.append(f"weight {dtype}, blocks of {blocks.size} along K ({kernel}, {blocks.method}); "
                             "activation float")
                continue
            parts.append(f"table {dtype}, blocks of {blocks.size} along each row (GatherBlockQuantized)")
            continue
        axis = "per tensor" if spec.axis is None else f"per channel (axis {spec.axis})"
        parts.append(f"{'table' if plan.weight_only else 'weight'} int8 {axis}")
    if plan.activations:
        if plan.per_token:
            parts.append("activation per token (dynamic, symmetric, uint8 + 128)")
        else:
            kind = "dynamic" if mode == "dynamic" else "static"
            parts.append(f"{len(plan.activations)} activation(s) {config.activations.dtype} {kind}")
        if plan.weights:  # an integer kernel reads this node: its types on the target, and why
            parts.append(integer_types_reason(config.target, config.activations.dtype))
    if plan.bias_index is not None:
        parts.append(bias_fallbacks.get(node.name or "", "bias int32"))
    elif plan.bias_note:
        parts.append(f"bias float: {plan.bias_note}")
    return NodeEntry(node.name or "", node.op_type, "; ".join(parts))
