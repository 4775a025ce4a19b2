"""Step load_and_plan: load and check the model, declare every file the run reads and writes, resolve the mode,
plan every node, and read the verification inputs known before calibrating."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from onnxq.calibration import Batches, CalibrationSummary, DataSource, input_specs
from onnxq.calibration.axes import InferredLayout, read_layout
from onnxq.calibration.data import reread_batches
from onnxq.calibration.holdout import SHOWS_DEFAULT_BAR
from onnxq.calibration.stream import DataStream
from onnxq.calibration.specs import sample_axis
from onnxq.config import CalibrationConfig, DataConfig, QuantConfig
from onnxq.data import declare_source, described, resolve_source, source_model
from onnxq.errors import CalibrationDataError, ConfigError, UnsupportedModelError
from onnxq.handlers import Skip, plan_model
from onnxq.io import LOAD_NOTES, external_data_files, load_model
from onnxq.io.memory import page_out
from onnxq.io.outputs import active_run
from onnxq.passes import check_model
from onnxq.passes.preparation import prepared
from onnxq.passes.prepare import onnx_opset
from onnxq.passes.upgrade import ORT_MIN_OPSET
from onnxq.ranges import cached_moments
from onnxq.steps.language_model import language_model_defaults
from onnxq.steps.state import RunState
from onnxq.verify import synthetic_batches
from onnxq.verify.outcome import check_output_tolerances
from onnxq.verify.task_rules import language_model_logits, may_hold_to_a_share
from onnxq.verify.result import CALIBRATION_SAMPLES, SYNTHETIC

__all__ = ["load_and_plan", "synthetic_inputs", "SYNTHETIC"]



def load_and_plan(state: RunState) -> bool:
    given, config = state.given, state.config
    if isinstance(given.model, (str, os.PathLike)):  # its state taken before it is read: a change while it loads
        active_run().add_input(given.model, "the input model")  # is seen right after (_declare_files)
    loaded = load_model(given.model)
    # Prepared (passes.preparation: an old opset converted, weight casts and BatchNormalization folded): the model
    # as given stays the verification's reference (state.unconverted), the prepared one is what is quantized.
    state.reference, notes = prepared(loaded)
    reference = state.reference
    if notes:
        state.notes.extend(notes)
        # Below the opsets onnxruntime runs, the model as given has no session: the prepared one is the reference.
        state.unconverted = loaded if (onnx_opset(loaded) or ORT_MIN_OPSET) >= ORT_MIN_OPSET else None
        state.given_runs = state.unconverted is not None
    state.input_path = Path(given.model) if isinstance(given.model, (str, os.PathLike)) else None
    check_model(reference)
    check_output_tolerances(config.verify, [o.name for o in reference.graph.outputs])
    if state.input_path is not None:
        # A large .onnx that keeps its weights is its own external data (io.in_place): listed once. The model as
        # loaded: a prepared clone may hold its weights in memory (a float16 model's, made float32).
        data = [p for p in external_data_files(loaded) if p.resolve() != state.input_path.resolve()]
        state.input_files = [state.input_path, *data]
    given_data = _read_data(state)
    given = state.given  # the data as the pipeline reads it (text, images opened by onnxq.data)
    _declare_files(state, given_data)  # unusable output paths stop the run now, not after calibrating
    active_run().check_inputs_unchanged("right after loading")
    # What preparing computed in memory (a float16 model's weights made float32, a folded Transpose of a tied
    # table) goes to the run's spill file now, memory-mapped like the input's own weights (io.spill: only a model
    # holding 64 MB of them or more), so that calibration's sessions read it in place instead of copying it.
    if reference is not loaded:
        state.spill.spill([reference])
        page_out(loaded)  # what spilling read of the given weights leaves resident memory (a float16 model's file)
    state.work = reference.clone()
    state.quantized_from = reference
    state.mode = _resolve_mode(config, given.calibration, given.cache)
    if state.mode == "weight-only":
        state.cached_moments = cached_moments(given.cache, reference)
        state.config = config = _resolve_block_method(config, given.calibration, state)
    state.config = config = _with_language_model_defaults(state)
    state.plans, state.skips = plan_model(state.work.graph, config, state.mode)
    if not state.plans:
        raise UnsupportedModelError(_nothing_to_quantize(state.skips, config))
    state.config = config = _with_inferred_layout(state)
    state.eight_bit = set(config.blocks.int8_nodes)  # 4-bit weights' 8-bit tier, by config (fallback adds to it)
    holds_back = given.verify_data is None and config.verify.enabled
    state.stream = DataStream.for_run(given.calibration, state.specs, config, holds_back,
                                      may_hold_to_a_share(reference, config.verify))
    densified = reference.meta[LOAD_NOTES]["densified"]
    if densified:
        state.notes.append(f"{len(densified)} sparse initializer(s) made dense to be quantized "
                           f"({', '.join(densified[:3])}{', …' if len(densified) > 3 else ''})")
    repeated = reference.meta[LOAD_NOTES].get("renamed_values", ())
    if repeated:
        state.notes.append(f"{len(repeated)} value name(s) repeated across subgraphs renamed in the output "
                           f"(e.g. {repeated[0]!r}): calibration keys values by name")
    state.upfront_inputs = _upfront_verification_inputs(state, _same_data(given_data, config.data))
    return True


def _with_language_model_defaults(state: RunState) -> QuantConfig:
    has_data = state.given.calibration is not None
    config, note = language_model_defaults(state.reference, state.config, state.mode, has_data)
    if note is not None:
        state.notes.append(note)
    return config


def _with_inferred_layout(state: RunState) -> QuantConfig:
    """The config with the layout the data's shapes imply for inputs the model and the user leave open
    (calibration.axes, calibration.unbatched): inputs given once held constant, samples axes inferred, inputs
    without a batch axis fed a sample a run, each said in a note; the specs (state.specs) follow."""
    given = state.given
    layout, inferred = read_layout(state.work, state.config.calibration, (given.calibration, given.verify_data))
    return _applied_layout(state, layout, inferred)


def _applied_layout(state: RunState, layout: CalibrationConfig, inferred: InferredLayout) -> QuantConfig:
    state.specs = input_specs(state.work, layout.sample_axes, layout.constant_inputs, layout.unbatched_inputs)
    state.notes.extend(_layout_notes(inferred))
    return state.config.replace(calibration=layout)


def _layout_notes(inferred: InferredLayout) -> list[str]:
    notes = []
    if inferred.unbatched:
        notes.append(f"inputs without a batch axis, fed one sample per run: {', '.join(inferred.unbatched)} (the "
                     "data stacks samples of the model's whole input on a first axis of its own)")
    if inferred.once:
        notes.append(f"inputs given once, held constant with every batch: {', '.join(inferred.once)} (their data is "
                     "the whole shape the model fixes; --sample-axis to read samples from them)")
    if inferred.axes:
        said = ", ".join(f"{name}={axis}" for name, axis in inferred.axes.items())
        notes.append(f"sample axes inferred from the data's lengths: {said} (the only axis holding the other "
                     "inputs' sample count; --sample-axis to set another)")
    return notes


def _read_data(state: RunState) -> tuple[DataSource | None, DataSource | None]:
    """The data as the pipeline reads it (onnxq.data: text, images, one .npy, arrays renamed by data.input_map) in
    state.given, each reader's account of what it made in the notes; returns the data as given."""
    given, config = state.given, state.config
    decoder = language_model_logits(state.reference) is not None
    model = source_model(state.reference, config.calibration, decoder, state.input_path)
    calibration = resolve_source(given.calibration, model, config.data, "calibration")
    # The verification data's own map with no --verify-data: other arrays of the calibration data (x_test).
    given_verify = given.calibration if given.verify_data is None and config.data.verify_input_map \
        else given.verify_data
    verify_data = resolve_source(given_verify, model, config.data, "verification")
    state.notes.extend(line for line in map(described, (calibration, verify_data)) if line is not None)
    state.given = dataclasses.replace(given, calibration=calibration, verify_data=verify_data)
    return given.calibration, given_verify


def _same_data(given: tuple[DataSource | None, DataSource | None], data: DataConfig) -> bool:
    """Whether the verification data is the calibration data: one file (or folder) read through the same arrays."""
    calibration, verification = given
    if not all(isinstance(source, (str, os.PathLike)) and os.path.exists(source)
               for source in (calibration, verification)):
        return False
    verify_map, inherited = data.map_for("verification")
    return os.path.samefile(calibration, verification) and (inherited or verify_map == data.input_map)


def _declare_files(state: RunState, given_data: tuple[DataSource | None, DataSource | None]) -> None:
    """What the run reads and writes, each output checked against every input and every other output (io.outputs)."""
    files, given = active_run(), state.given
    for i, path in enumerate(state.input_files):
        files.add_input(path, "the input model" if i == 0 else "the input model's external data")
    declare_source(files, given_data[0], given.calibration, "the calibration data")
    declare_source(files, given_data[1], given.verify_data, "the verification data")
    if given.cache is not None and not isinstance(given.cache, CalibrationSummary):
        if os.path.lexists(given.cache):  # read, never rewritten
            files.read(given.cache, "the calibration cache", CalibrationDataError)
        else:
            files.claim(given.cache, "calibration cache")
    if given.output is not None:
        output = Path(given.output)
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


def _resolve_block_method(config: QuantConfig, calibration: DataSource | None, state: RunState) -> QuantConfig:
    """blocks.method auto: GPTQ where there is data, or a calibration cache holding its XᵀX moments."""
    blocks, stored = config.blocks, state.cached_moments
    fitted = calibration is not None or stored is not None and stored.full
    if blocks.method == "auto":
        blocks = dataclasses.replace(blocks, method="gptq" if fitted else "rtn")
        if stored is None and state.given.cache is not None and calibration is None:
            state.notes.append("weights: rounded to nearest — the calibration cache holds no second moments "
                               "(onnxq calibrate --weights int4 keeps them)")
    needs = "blocks.method = gptq" if blocks.method == "gptq" else (
        "blocks.clip = activation" if blocks.clip == "activation" else None)
    if needs and calibration is None and stored is None:
        raise ConfigError(f"{needs} fits the weights to their activations, so it needs calibration data: pass "
                          "--calib DATA (or a --calib-cache that onnxq calibrate wrote with this config), or use "
                          "blocks.method = rtn with blocks.clip = mse")
    return config.replace(blocks=blocks)


def _nothing_to_quantize(skips: list[Skip], config: QuantConfig) -> str:
    if not skips:
        return (f"nothing to quantize: the model has no {'/'.join(config.op_types)} node with a constant float32 "
                "weight — onnxq quantizes MatMul, Gemm and Gather on constant weights")
    excluded = [s for s in skips if config.exclusion_reason(s.node.name or "", s.node.op_type) is not None]
    first = (excluded or skips)[0]
    # The exclude options are the fix only where they kept a node float; elsewhere the reason says what it is.
    fix = "check the exclude options" if excluded else "docs/limits.md lists what stays float and why"
    return (f"nothing to quantize: all {len(skips)} candidate node(s) stay float (e.g. {first.node.name}: "
            f"{first.reason}) — {fix}")


def _upfront_verification_inputs(state: RunState, on_calibration_data: bool) -> tuple[Batches, str] | None:
    """Verification batches known before calibrating; None when they come from the calibration stream.
    on_calibration_data: the verification data is the calibration data (one file, the same arrays)."""
    config, given = state.config, state.given
    size = config.calibration.batch_size
    if not config.verify.enabled:
        return None
    if given.verify_data is not None:  # read again by each pass, a batch at a time; its first batch checked now
        batches = reread_batches(given.verify_data, state.specs, size, made=state.made_inputs)
        if on_calibration_data:
            state.notes.append("the verification data is the calibration data (the same file and arrays): the "
                               "figures flatter the model — verify on data held out from calibration")
        return batches, CALIBRATION_SAMPLES if on_calibration_data else "verification data"
    if given.calibration is not None and (state.mode == "static" or state.mode == "weight-only" and (
            config.blocks.method == "gptq" or config.blocks.clip == "activation")):
        return None  # held back from the calibration data as it streams
    if given.calibration is not None:  # dynamic mode with data: verify on (the start of) it
        return (reread_batches(given.calibration, state.specs, size, config.verify.max_samples or SHOWS_DEFAULT_BAR,
                               made=state.made_inputs), "the given data")
    return synthetic_inputs(state)


def synthetic_inputs(state: RunState) -> tuple[Batches, str]:
    state.notes.append("no data given: verified on synthetic random inputs, a smoke test only — pass --verify-data "
                       "with real inputs for meaningful figures")
    batches = synthetic_batches(state.reference, state.specs)
    held = tuple(s.name for s in state.specs if s.sample_axis is not None and sample_axis(batches[0], s.name) is None)
    made_once = InferredLayout(once=held)  # the inputs made once beside the others' samples
    state.config = _applied_layout(state, made_once.applied(state.config.calibration), made_once)
    return Batches.held(batches), SYNTHETIC
