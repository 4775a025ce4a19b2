"""quantize(): load → check → plan → calibrate → rewrite → save → verify, driven by one QuantConfig."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import onnx
import onnx_ir as ir

from onnxq.calibration import Batch, DataSource, Holdout, calibrate_minmax, input_specs, iter_batches, validate_batch
from onnxq.config import QuantConfig
from onnxq.errors import ConfigError, UnsupportedModelError
from onnxq.handlers import NodePlan, Skip, plan_model
from onnxq.io import external_data_files, load_model, model_size_bytes, save_model
from onnxq.passes import InsertDynamicPass, InsertQdqPass, check_model
from onnxq.report import NodeEntry, QuantReport
from onnxq.verify import Verification, synthetic_batches, verify_models

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
    progress: Callable[[int], None] | None = None,
) -> QuantResult:
    """Quantize a float model to int8 and verify it against the float model on ONNX Runtime's CPU provider.

    model: a path, an onnx.ModelProto or an onnx_ir.Model (the caller's object is never modified).
    calibration: .npz path, folder of .npz, dict of arrays (first axis = samples) or iterable of such dicts.
        Given: static quantization. Absent: dynamic activation quantization (see QuantConfig.mode).
    output: where to write the model (atomically); None keeps it in memory only.
    verify_data: held-out inputs for verification; without it, every 10th calibration sample is held back.
    progress: called with the number of samples after each calibration batch.
    """
    config = config or QuantConfig()
    timings: dict[str, float] = {}
    start = time.perf_counter()
    reference = load_model(model)
    input_path = Path(model) if isinstance(model, (str, os.PathLike)) else None
    check_model(reference)
    work = reference.clone()
    mode = _resolve_mode(config, calibration)
    plans, skips = plan_model(work.graph, config, mode)
    if not plans:
        raise UnsupportedModelError(_nothing_to_quantize(skips, config))
    specs = input_specs(work)
    timings["load_and_plan"] = time.perf_counter() - start

    notes: list[str] = []
    holdout = Holdout(config.verify.holdout_every, config.verify.max_samples)
    ranges: dict[str, tuple[float, float]] = {}
    calibration_samples = 0
    start = time.perf_counter()
    if mode == "static":
        batches = _validated(iter_batches(calibration, config.calibration.batch_size,
                                          config.calibration.max_samples), specs, "calibration")
        if verify_data is None and config.verify.enabled:
            batches = holdout.split(batches)
        counted = _Counter(batches)
        ranges = calibrate_minmax(work, _activation_names(plans), counted, progress)
        calibration_samples = counted.samples
        timings["calibrate"] = time.perf_counter() - start
        start = time.perf_counter()
        rewrite = InsertQdqPass(plans, ranges, config)
        rewrite(work)
        bias_fallbacks = rewrite.bias_fallbacks
    else:
        InsertDynamicPass(plans, config)(work)
        bias_fallbacks = {}
    timings["rewrite"] = time.perf_counter() - start

    saved, written = None, []
    input_files = [input_path, *external_data_files(reference)] if input_path is not None else []
    if output is not None:
        start = time.perf_counter()
        written = save_model(work, output, protected=set(input_files))
        saved = written[0]
        timings["save"] = time.perf_counter() - start

    verification = None
    if config.verify.enabled:
        start = time.perf_counter()
        verification = _verify(reference if input_path is None else input_path, saved or work, config, mode,
                               specs, calibration, verify_data, holdout, notes)
        timings["verify"] = time.perf_counter() - start

    report = QuantReport(
        input=str(input_path) if input_path else "(in-memory model)",
        output=str(saved) if saved else None,
        mode=mode,
        config=config.to_dict(),
        quantized=tuple(_entry(p, mode, config, bias_fallbacks) for p in plans),
        left_float=tuple(NodeEntry(s.node.name or "", s.node.op_type, s.reason) for s in skips),
        ranges=ranges,
        calibration_samples=calibration_samples,
        float_bytes=_total_bytes(input_files) if input_files else model_size_bytes(reference),
        quant_bytes=_total_bytes(written) if written else model_size_bytes(work),
        seconds=timings,
        verification=verification,
        notes=tuple(notes),
    )
    return QuantResult(model=work, output=saved, report=report)


def _resolve_mode(config: QuantConfig, calibration: DataSource | None) -> str:
    if config.mode == "auto":
        return "static" if calibration is not None else "dynamic"
    if config.mode == "static" and calibration is None:
        raise ConfigError("static mode needs calibration data — pass --calib DATA, or use --mode dynamic")
    return config.mode


def _nothing_to_quantize(skips: list[Skip], config: QuantConfig) -> str:
    if not skips:
        return (f"nothing to quantize: the model has no {'/'.join(config.op_types)} node with a constant float32 "
                "weight — onnxq quantizes MatMul, Gemm and Gather on constant weights")
    first = skips[0]
    return (f"nothing to quantize: all {len(skips)} candidate node(s) stay float (e.g. {first.node.name}: "
            f"{first.reason}) — check the exclude options")


def _validated(batches: Iterable[Batch], specs, what: str) -> Iterable[Batch]:
    for batch in batches:
        yield validate_batch(batch, specs, what)


class _Counter:
    """Counts the samples flowing through an iterable of batches."""

    def __init__(self, batches: Iterable[Batch]) -> None:
        self.batches = batches
        self.samples = 0

    def __iter__(self):
        for batch in self.batches:
            self.samples += len(next(iter(batch.values())))
            yield batch


def _activation_names(plans: list[NodePlan]) -> list[str]:
    return [p.node.inputs[i].name for p in plans for i in p.activations]


def _total_bytes(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def _verify(float_model, quant_model, config: QuantConfig, mode: str, specs, calibration, verify_data,
            holdout: Holdout, notes: list[str]) -> Verification:
    size = config.calibration.batch_size
    if verify_data is not None:
        batches = list(_validated(iter_batches(verify_data, size, what="verification"), specs, "verification"))
        label = "verification data"
    elif mode == "static" and holdout.held:
        batches, label = holdout.held, "held-out calibration samples (every %dth)" % config.verify.holdout_every
    elif mode == "static":
        batches, label = [holdout.first], "calibration samples"
        notes.append("too few samples to hold any back: verified on calibration data, which flatters the result")
    elif calibration is not None:
        batches = list(_validated(iter_batches(calibration, size, config.verify.max_samples), specs, "verification"))
        label = "the given data"
    else:
        batches = synthetic_batches(float_model if isinstance(float_model, ir.Model) else load_model(float_model),
                                    specs)
        label = "synthetic inputs"
        notes.append("no data given: verified on synthetic random inputs, a smoke test only — pass --verify-data "
                     "with real inputs for meaningful figures")
    return verify_models(float_model, quant_model, batches, config.verify.tolerance, label,
                         check_kernels=config.verify.check_kernels)


def _entry(plan: NodePlan, mode: str, config: QuantConfig, bias_fallbacks: dict[str, str]) -> NodeEntry:
    node = plan.node
    parts = []
    for spec in plan.weights:
        axis = "per tensor" if spec.axis is None else f"per channel (axis {spec.axis})"
        parts.append(f"{'table' if plan.weight_only else 'weight'} int8 {axis}")
    if plan.activations:
        kind = "dynamic" if mode == "dynamic" else "static"
        parts.append(f"{len(plan.activations)} activation(s) {config.activations.dtype} {kind}")
    if plan.bias_index is not None:
        parts.append(bias_fallbacks.get(node.name or "", "bias int32"))
    elif plan.bias_note:
        parts.append(f"bias float: {plan.bias_note}")
    return NodeEntry(node.name or "", node.op_type, "; ".join(parts))
