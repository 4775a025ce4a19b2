"""calibrate() and merge_calibrations(): calibration on its own, for a cache or one shard of a larger run. Above
calibration/ (it plans the model to know what to observe), beside pipeline.py."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import onnx
import onnx_ir as ir

from onnxq.calibration.moments import WeightKey, weight_key
from onnxq.calibration.request import CalibrationRequest, observe
from onnxq.calibration.shards import Shard, as_shard, shard_batches
from onnxq.data.specs import Batch, DataSource, InputSpec, input_specs
from onnxq.data.stream import check_reusable
from onnxq.calibration.summary import CalibrationSummary, model_fingerprint
from onnxq.data.axes import read_layout
from onnxq.config import QuantConfig
from onnxq.data import declare_source, resolve_source, source_model
from onnxq.errors import CalibrationDataError
from onnxq.handlers import NodePlan, plan_model
from onnxq.passes.forms.quantize import needed_ranges
from onnxq.io import external_data_files, load_model, run_files
from onnxq.io.custom_ops import custom_op_libraries
from onnxq.passes import check_model
from onnxq.passes.preparation.steps import prepared
from onnxq.smoothing.choice import smoothable_groups
from onnxq.verify.tasks.rules import language_model_logits

__all__ = ["calibrate", "calibrate_shards", "merge_calibrations", "activations_to_observe", "moments_to_observe",
           "summarize", "smoothable_activations", "CalibrationJob", "calibration_job", "calibration_request",
           "cache_request"]


def calibration_request(plans: Sequence[NodePlan], config: QuantConfig) -> CalibrationRequest:
    """What a run's static ranges need observed, made once from its plans: the ranges of the activations its
    calibrated forms quantize (passes.forms.quantize.needed_ranges), the main graph's first, then those only If /
    Loop / Scan bodies read (in_bodies); with histograms where the method reads them."""
    main = needed_ranges([p for p in plans if not p.scope], config)
    scoped = [p for p in plans if p.scope]
    bodies = [n for n in needed_ranges(scoped, config) if n not in set(main)] if scoped else []
    bins = config.calibration.histogram_bins if config.calibration.needs_histogram else None
    return CalibrationRequest(tuple(main + bodies), bins, in_bodies=frozenset(bodies))


def cache_request(model: ir.Model, config: QuantConfig, *, channels: bool, moments: bool) -> CalibrationRequest:
    """What a calibration cache of the model holds, so that it serves any later method or setting: every candidate
    activation's range with histograms; SmoothQuant's channel statistics (channels) and the 4-bit weights' second
    moments (moments: where the config fits its weights to data) when asked."""
    names = activations_to_observe(model, config, every_candidate=True)
    axes = smoothable_activations(model, config) if channels else {}
    weights, full = moments_to_observe(model, config) if moments else ({}, True)
    return CalibrationRequest(tuple(names), config.calibration.histogram_bins, axes, weights, full)


def activations_to_observe(model: ir.Model, config: QuantConfig, every_candidate: bool) -> list[str]:
    """Value names whose ranges static quantization needs; with every_candidate, those of any setting
    (no exclusions, attention MatMuls included), so that a saved summary serves other settings too."""
    if every_candidate:
        config = config.replace(exclude_nodes=(), exclude_op_types=(), exclude_regex=None,
                                quantize_activation_matmul=True)
    plans, _ = plan_model(model.graph, config, "static")
    return needed_ranges(plans, config)


def calibrate(model: str | os.PathLike | onnx.ModelProto | ir.Model | bytes, data: DataSource, *,
              config: QuantConfig | Mapping[str, Any] | None = None,
              progress: Callable[[int], None] | None = None) -> CalibrationSummary:
    """Observe every candidate activation of the model over the data, with histograms, and return the summary.

    Save it (summary.save(path)) to reuse it with any method or setting (quantize(calibration_cache=...)), or
    run this on shards of the data — in separate processes or machines — and merge the files. With config.smooth
    set, it also holds the per-channel statistics smoothing needs (of the float model, mergeable); with 4-bit
    weights fitted to the data (GPTQ, activation-aware clipping), each weight's second moments.
    """
    return calibrate_shards(model, [data], config=config, progress=progress)


def calibrate_shards(model: str | os.PathLike | onnx.ModelProto | ir.Model | bytes,
                     shards: Sequence[Shard | DataSource], *, config: QuantConfig | Mapping[str, Any] | None = None,
                     progress: Callable[[int], None] | None = None) -> CalibrationSummary:
    """calibrate() over shards of data read one after another as one stream, each read as calibrate() reads its
    data (text, images, arrays renamed; the layout its shapes say): calibration.max_samples bounds them all, a
    Shard's samples bound it alone (calibration.shards.split_samples cuts a run's shards to max_samples)."""
    config = QuantConfig.of(config)
    shards = [as_shard(s) for s in shards]
    if not shards:
        raise CalibrationDataError("nothing to calibrate on — pass at least one shard of data")
    with custom_op_libraries(config.custom_op_libraries):
        with run_files() as files:  # what it reads, so that no output of the run lands on it
            float_model = load_model(model)
            if isinstance(model, (str, os.PathLike)):
                files.add_input(model, "the input model")
                for path in external_data_files(float_model):
                    files.add_input(path, "the input model's external data")
            # Text, images, one .npy, arrays named otherwise: read as quantize() reads them (onnxq.data).
            path = model if isinstance(model, (str, os.PathLike)) else None
            decoder = language_model_logits(float_model) is not None
            reads = source_model(float_model, config.calibration, decoder, path)
            read = []
            for shard in shards:
                source = resolve_source(shard.source, reads, config.data, "calibration")
                declare_source(files, shard.source, source, "the calibration data")
                read.append(Shard(source, shard.samples))
        # The layout the data's shapes say (its first shard's, as of a folder of shards), as quantize() reads it: a
        # cache made here is the one it would make.
        layout = read_layout(float_model, config.calibration, tuple(s.source for s in read))[0]
        config = config.replace(calibration=layout)
        return calibration_job(float_model, config).run(read, config.calibration.max_samples, progress)


@dataclasses.dataclass(frozen=True)
class CalibrationJob:
    """What calibrating a model takes, made once: the model as quantize() prepares it (so that the summary's
    fingerprint matches), what to observe and the inputs' specs. A worker runs it over any number of shards
    as one stream: one ONNX Runtime session, one partial summary (onnxq.distributed)."""

    model: ir.Model
    request: CalibrationRequest
    specs: list[InputSpec]
    config: QuantConfig

    def run(self, shards: Sequence[Shard], max_samples: int | None = None,
            progress: Callable[[int], None] | None = None) -> CalibrationSummary:
        """The summary of the shards, read in turn (max_samples: of them all)."""
        batch_size = self.config.calibration.batch_size
        if self.request.moments:  # a pass for the ranges, then the second moments'
            for shard in shards:
                check_reusable(shard.source, "calibrating 4-bit weights' second moments")
        return observe(self.model, self.request, lambda: shard_batches(shards, self.specs, batch_size, max_samples),
                       progress, model_fingerprint(self.model))


def calibration_job(float_model: ir.Model, config: QuantConfig) -> CalibrationJob:
    # As quantize() prepares it (opset converted, BatchNormalization folded): the cache's fingerprint matches.
    float_model, _ = prepared(float_model)
    check_model(float_model)
    request = cache_request(float_model, config, channels=config.smooth != "off", moments=True)
    if not request.ranges:
        raise CalibrationDataError("the model has no activation to calibrate (no quantizable MatMul/Gemm/Conv)")
    layout = config.calibration
    specs = input_specs(float_model, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
    return CalibrationJob(float_model, request, specs, config)


def moments_to_observe(model: ir.Model, config: QuantConfig) -> tuple[dict[WeightKey, tuple[str, ...]], bool]:
    """The weights whose activations' second moments a 4-bit run of this config fits them to, under any exclusion
    (by the activations their nodes read), and whether it needs whole XᵀX (GPTQ) or its diagonal (activation-aware
    clipping); none where the config's weights are not fitted to data."""
    blocks = config.blocks
    full = blocks.method in ("gptq", "auto")  # auto is GPTQ with data, and calibrating has data
    if not config.weight_only or not (full or blocks.clip == "activation"):
        return {}, full
    config = config.replace(exclude_nodes=(), exclude_op_types=(), exclude_regex=None)
    readers: dict[WeightKey, dict[str, None]] = {}  # ordered sets
    for plan in plan_model(model.graph, config, "weight-only")[0]:
        if plan.node.op_type != "Gather":
            readers.setdefault(weight_key(plan.node), {})[plan.node.inputs[0].name] = None
    return {key: tuple(names) for key, names in readers.items()}, full


def summarize(model: ir.Model, names: list[str], batches: Iterable[Batch], histogram_bins: int | None,
              progress: Callable[[int], None] | None, fingerprint: str,
              channel_axes: Mapping[str, int] | None = None) -> CalibrationSummary:
    """Stream the batches through the model, observing the named values (and per-channel statistics of the values
    of channel_axes on their channel axis, for smoothing), into a summary."""
    request = CalibrationRequest(tuple(names), histogram_bins, dict(channel_axes or {}))
    return observe(model, request, lambda: batches, progress, fingerprint)


def smoothable_activations(model: ir.Model, config: QuantConfig) -> dict[str, int]:
    """The activations SmoothQuant may smooth under any setting, with their channel axes (their per-channel
    statistics go in a cache)."""
    config = config.replace(exclude_nodes=(), exclude_op_types=(), exclude_regex=None)
    plans, _ = plan_model(model.graph, config, "static")
    return {c.activation.name: c.channel_axis for c in smoothable_groups(plans)}


def merge_calibrations(summaries: Iterable[CalibrationSummary | str | os.PathLike]) -> CalibrationSummary:
    """Merge shard summaries (objects or files) into one, equal to calibrating on all the data at once."""
    loaded = [s if isinstance(s, CalibrationSummary) else CalibrationSummary.load(s) for s in summaries]
    if not loaded:
        raise CalibrationDataError("nothing to merge — pass at least one calibration summary")
    merged = loaded[0].copy()
    for summary in loaded[1:]:
        merged.merge(summary)
    return merged
